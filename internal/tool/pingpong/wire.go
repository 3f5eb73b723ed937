package pingpong

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// MsgLen is the exchange message's length on the wire: rdma-core's
// `char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"]`
// (rc_pingpong.c pp_client_exch_dest), the 51 characters and their NUL.
// Each side writes and reads exactly this many bytes.
const MsgLen = len("0000:000000:000000:00000000000000000000000000000000") + 1

// done is the client's last word, "done" and its NUL (write(sockfd,
// "done", sizeof "done")), which the server waits for before it starts.
var done = []byte("done\x00")

// Dest is one side's pingpong_dest: LID (0 on RoCE), QP number, first PSN
// and GID (all zero when the side was not given -g).
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID [16]byte
}

// Encode writes d as sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn,
// wire_gid) does, NUL included. gid_to_wire_gid (pingpong.c) prints each
// 32-bit word of the GID through htobe32 and "%08x", which on every host
// is the GID's 16 bytes in order, as hex.
func (d Dest) Encode() [MsgLen]byte {
	var b [MsgLen]byte
	s := fmt.Sprintf("%04x:%06x:%06x:%032x", d.LID, d.QPN, d.PSN, d.GID[:])
	copy(b[:], s)
	return b
}

// ParseDest reads a message as sscanf(msg, "%x:%x:%x:%s") and
// wire_gid_to_gid do, but strictly: three hex numbers of at most 4, 6 and
// 6 digits and a GID of 32 hex digits, then the NUL.
func ParseDest(msg []byte) (Dest, error) {
	var d Dest
	s := string(msg)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Split(s, ":")
	if len(f) != 4 {
		return d, fmt.Errorf("peer's address %q: want LID:QPN:PSN:GID", s)
	}
	var v [3]uint64
	for i, w := range []int{16, 24, 24} {
		var err error
		if v[i], err = strconv.ParseUint(f[i], 16, w); err != nil || f[i] == "" {
			return d, fmt.Errorf("peer's address %q: field %d %q is not a %d-bit hex number", s, i+1, f[i], w)
		}
	}
	d.LID, d.QPN, d.PSN = uint16(v[0]), uint32(v[1]), uint32(v[2])
	if len(f[3]) != 32 {
		return d, fmt.Errorf("peer's address %q: GID %q is not 32 hex digits", s, f[3])
	}
	for i := range d.GID {
		x, err := strconv.ParseUint(f[3][2*i:2*i+2], 16, 8)
		if err != nil {
			return d, fmt.Errorf("peer's address %q: GID %q is not 32 hex digits", s, f[3])
		}
		d.GID[i] = byte(x)
	}
	return d, nil
}

// GIDString formats a GID as inet_ntop(AF_INET6) does, the form the
// tools print: "::ffff:198.18.1.2" for an IPv4-mapped GID, "::" for none.
func GIDString(g [16]byte) string { return netip.AddrFrom16(g).String() }

// AddressLine is the line each side prints for its own (local) or the
// peer's (remote) address. ud_pingpong's local line has a colon where
// rc_pingpong's has a comma before GID (ud_pingpong.c's printf), and so
// has ours.
func AddressLine(which string, d Dest, ud bool) string {
	sep := ","
	pad := " "
	if which == "local" {
		pad = "  "
		if ud {
			sep = ":"
		}
	}
	return fmt.Sprintf("  %s address:%sLID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", which, pad, d.LID, d.QPN, d.PSN, sep, GIDString(d.GID))
}

// ResultLines are the two lines both sides print at the end: bytes
// (size * iters * 2) over the run's microseconds, as rc_pingpong's
// "%lld bytes in %.2f seconds = %.2f Mbit/sec" and "%d iters in %.2f
// seconds = %.2f usec/iter". The C code keeps usec in a float, and so
// does this.
func ResultLines(size, iters int, usec float32) string {
	bytes := int64(size) * int64(iters) * 2
	return fmt.Sprintf("%d bytes in %.2f seconds = %.2f Mbit/sec\n%d iters in %.2f seconds = %.2f usec/iter\n",
		bytes, float64(usec)/1000000., float64(bytes)*8./float64(usec),
		iters, float64(usec)/1000000., float64(usec)/float64(iters))
}

// clientExchange is pp_client_exch_dest on a connected socket: send ours
// (one message a QP), read as many of theirs, say done.
func clientExchange(c io.ReadWriter, my []Dest) ([]Dest, error) {
	for _, d := range my {
		m := d.Encode()
		if _, err := c.Write(m[:]); err != nil {
			return nil, fmt.Errorf("couldn't send local address: %w", err)
		}
	}
	rem, err := readDests(c, len(my))
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(done); err != nil {
		return nil, fmt.Errorf("couldn't write done: %w", err)
	}
	return rem, nil
}

// readDests reads n addresses.
func readDests(c io.Reader, n int) ([]Dest, error) {
	rem := make([]Dest, n)
	for i := range rem {
		var in [MsgLen]byte
		if _, err := io.ReadFull(c, in[:]); err != nil {
			return nil, fmt.Errorf("%d/%d: couldn't read remote address: %w", i, n, err)
		}
		var err error
		if rem[i], err = ParseDest(in[:]); err != nil {
			return nil, err
		}
	}
	return rem, nil
}

// serverRead is the first half of pp_server_exch_dest: the client's
// n addresses. The connect runs between it and serverReply, as the
// server moves its QPs to RTR before it answers.
func serverRead(c io.Reader, n int) ([]Dest, error) { return readDests(c, n) }

// serverReply sends ours and waits for the client's "done".
func serverReply(c io.ReadWriter, my []Dest) error {
	for _, d := range my {
		m := d.Encode()
		if _, err := c.Write(m[:]); err != nil {
			return fmt.Errorf("couldn't send local address: %w", err)
		}
	}
	var in [5]byte
	if _, err := io.ReadFull(c, in[:]); err != nil {
		return fmt.Errorf("couldn't recv done: %w", err)
	}
	if string(in[:]) != string(done) {
		return errors.New("couldn't recv done: the client sent " + strconv.Quote(string(in[:])))
	}
	return nil
}
