package perftest

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Sizes of the messages that cross the control connection
// (src/perftest_communication.c).
const (
	// DestLen is sizeof(struct pingpong_dest) on x86-64: lid, out_reads,
	// qpn, psn, rkey (5 x int32), 4 bytes of padding, vaddr (u64), gid (16),
	// srqn, gid_index (2 x int32).
	DestLen = 56
	// VersionLen is sizeof(user_param->version): a NUL-padded string.
	VersionLen = 16
	// mtuLen is check_mtu's message for peers >= 5.31: sprintf("%d") of the
	// enum ibv_mtu in two bytes ("3\0" for 1024).
	mtuLen = 2
	// ReportLen is one field of xchg_bw_reports: each is exchanged alone.
	ReportLen = 8
)

// Dest is struct pingpong_dest, what ctx_hand_shake exchanges. On the wire
// (rdma_write_keys with HAVE_ENDIAN) every integer is big-endian and the
// GID is raw; the padding at offset 20 is whatever was on the sender's
// stack, so it is ignored. rdma_read_keys does not read srqn and gid_index.
type Dest struct {
	LID      int32
	OutReads int32
	QPN      int32
	PSN      int32
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
	GIDIndex int32
}

// Put writes d into b[:DestLen].
func (d *Dest) Put(b []byte) error {
	if len(b) < DestLen {
		return fmt.Errorf("encode pingpong_dest: %d-byte buffer, need %d: %w", len(b), DestLen, verbs.ErrInvalid)
	}
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(d.LID))
	be.PutUint32(b[4:], uint32(d.OutReads))
	be.PutUint32(b[8:], uint32(d.QPN))
	be.PutUint32(b[12:], uint32(d.PSN))
	be.PutUint32(b[16:], d.RKey)
	clear(b[20:24])
	be.PutUint64(b[24:], d.VAddr)
	copy(b[32:48], d.GID[:])
	be.PutUint32(b[48:], d.SRQN)
	be.PutUint32(b[52:], uint32(d.GIDIndex))
	return nil
}

// DecodeDest reads a pingpong_dest.
func DecodeDest(b []byte) (Dest, error) {
	if len(b) != DestLen {
		return Dest{}, fmt.Errorf("pingpong_dest of %d bytes, want %d: %w", len(b), DestLen, ErrProtocol)
	}
	be := binary.BigEndian
	d := Dest{
		LID:      int32(be.Uint32(b[0:])),
		OutReads: int32(be.Uint32(b[4:])),
		QPN:      int32(be.Uint32(b[8:])),
		PSN:      int32(be.Uint32(b[12:])),
		RKey:     be.Uint32(b[16:]),
		VAddr:    be.Uint64(b[24:]),
		SRQN:     be.Uint32(b[48:]),
		GIDIndex: int32(be.Uint32(b[52:])),
	}
	copy(d.GID[:], b[32:48])
	return d, nil
}

// putVersion writes the version string NUL-padded (exchange_versions).
func putVersion(b []byte, v string) error {
	if len(v) >= VersionLen {
		return fmt.Errorf("version %q longer than %d bytes: %w", v, VersionLen-1, verbs.ErrInvalid)
	}
	clear(b[:VersionLen])
	copy(b, v)
	return nil
}

// parseVersion reads the peer's version as atof does.
func parseVersion(b []byte) (string, float64, error) {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	s := string(b[:n])
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s, 0, fmt.Errorf("peer's perftest version %q: %w", s, ErrProtocol)
	}
	return s, f, nil
}

// Report is struct bw_report_data as xchg_bw_reports sends it without
// --report_per_port: size and iters as big-endian u64 (hton_long; iters is
// 64-bit from version 5.33), bw_peak, bw_avg and msgRate_avg as big-endian
// IEEE doubles (hton_double), in that order, one 8-byte SEND each.
type Report struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// fields returns the five wire words in exchange order.
func (r *Report) fields() [5]uint64 {
	return [5]uint64{r.Size, r.Iters, math.Float64bits(r.BWPeak), math.Float64bits(r.BWAvg), math.Float64bits(r.MsgRate)}
}

func reportFrom(f [5]uint64) Report {
	return Report{Size: f[0], Iters: f[1], BWPeak: math.Float64frombits(f[2]), BWAvg: math.Float64frombits(f[3]), MsgRate: math.Float64frombits(f[4])}
}

// mtuEnum is enum ibv_mtu for a path MTU in bytes.
func mtuEnum(bytes int) (int, bool) {
	switch bytes {
	case 256:
		return 1, true
	case 512:
		return 2, true
	case 1024:
		return 3, true
	case 2048:
		return 4, true
	case 4096:
		return 5, true
	}
	return 0, false
}
