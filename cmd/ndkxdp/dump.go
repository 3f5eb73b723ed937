package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// errDumpDone ends a dump that has its count.
var errDumpDone = errors.New("dump: count reached")

func runDump(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cmdline.NewFlagSet("dump", "usage: ndkxdp dump -dev IF|-daemon SOCKET [-w FILE] [-s SNAP] [-c N] [-t DURATION] [-qp QPN]\n\n"+
		"Captures the RoCEv2 frames a daemon's engines receive and send, as xdpdump. The daemon copies them\n"+
		"off its data path into a bounded ring and drops (and counts) what does not fit rather than wait.", stderr)
	var o opsFlags
	o.register(fs, false)
	file := fs.String("w", "", "write a pcap file (Wireshark decodes RoCEv2 on UDP 4791) instead of a summary per frame; - for stdout")
	snap := fs.Int("s", daemon.DefaultSnap, fmt.Sprintf("bytes kept of each frame (64-%d)", daemon.MaxSnap))
	count := fs.Int("c", 0, "stop after this many frames (0: until interrupted)")
	qpn := fs.Uint("qp", 0, "only the frames of this local QP: those it receives and those it sends its peer (0: all)")
	dur := fs.Duration("t", 0, "stop after this long (0: until interrupted)")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return err
	}
	sock, err := o.path()
	if err != nil {
		return err
	}
	if *snap < 64 || *snap > daemon.MaxSnap || *count < 0 || *dur < 0 {
		return cmdline.Usagef("-s %d, -c %d, -t %v: want -s in [64, %d], -c and -t not negative", *snap, *count, *dur, daemon.MaxSnap)
	}
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	var pw *pcapfile.Writer
	var out *bufio.Writer
	if *file != "" {
		var w io.Writer = stdout
		if *file != "-" {
			f, err := os.Create(*file)
			if err != nil {
				return fmt.Errorf("dump: %w", err)
			}
			defer f.Close()
			w = f
		}
		out = bufio.NewWriter(w)
		if pw, err = pcapfile.NewWriter(out, uint32(*snap), pcapfile.LinkTypeEthernet); err != nil {
			return fmt.Errorf("dump: %w", err)
		}
	} else {
		out = bufio.NewWriter(stdout)
	}
	keep := func(daemon.DumpFrame) bool { return true }
	if *qpn != 0 {
		if keep, err = qpFilter(ctx, &o, uint32(*qpn)); err != nil {
			return err
		}
	}
	n := 0
	counts, err := daemon.Dump(ctx, sock, *snap, func(f daemon.DumpFrame, _ daemon.DumpCounts) error {
		if !keep(f) {
			return nil
		}
		n++
		if pw != nil {
			if err := pw.WritePacketLen(time.Unix(0, f.Time), f.Data, f.Length); err != nil {
				return err
			}
		} else {
			fmt.Fprintln(out, summary(f))
		}
		if n == *count {
			return errDumpDone
		}
		return nil
	})
	if ferr := out.Flush(); err == nil || errors.Is(err, errDumpDone) {
		err = ferr
	}
	if ndk.StatusOf(err) == ndk.StatusAccessViolation {
		// The daemon refused this user a capture: no frame was taken, and
		// the NTSTATUS's usual reading (a peer refusing memory) is not it.
		return fmt.Errorf("dump: refused: %s (EACCES); run it as root or as the daemon's user", ntText.ReplaceAllString(err.Error(), ""))
	}
	err = cmdline.SocketError(sock, err)
	fmt.Fprintf(stderr, "%d frames captured, %d dropped by the daemon (of %d it moved while capturing)\n", n, counts.Dropped, counts.Seen)
	if err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	return nil
}

// summary is one line for a frame, as tcpdump's: time, direction, queue,
// addresses, then the BTH's opcode, destination QP and PSN.
func summary(f daemon.DumpFrame) string {
	dir := "in "
	if f.Out {
		dir = "out"
	}
	head := fmt.Sprintf("%s %s q%d", time.Unix(0, f.Time).UTC().Format("15:04:05.000000"), dir, f.Queue)
	src, dst, bth, ok := roceHeaders(f.Data)
	if !ok {
		return fmt.Sprintf("%s len %d (not RoCEv2)", head, f.Length)
	}
	op := rocev2.Opcode(bth[0])
	qpn := binary.BigEndian.Uint32(bth[4:8]) & 0xFFFFFF
	psn := binary.BigEndian.Uint32(bth[8:12]) & 0xFFFFFF
	return fmt.Sprintf("%s %s > %s %s qp %d psn %d len %d", head, src, dst, op, qpn, psn, f.Length)
}

// roceHeaders finds the addresses and the BTH of a RoCEv2 frame.
func roceHeaders(b []byte) (src, dst netip.Addr, bth []byte, ok bool) {
	if len(b) < 14 {
		return
	}
	et, off := binary.BigEndian.Uint16(b[12:]), 14
	if et == 0x8100 && len(b) >= 18 {
		et, off = binary.BigEndian.Uint16(b[16:]), 18
	}
	var proto byte
	switch et {
	case 0x0800:
		if len(b) < off+20 {
			return
		}
		ihl := int(b[off]&0x0F) * 4
		proto = b[off+9]
		src, _ = netip.AddrFromSlice(b[off+12 : off+16])
		dst, _ = netip.AddrFromSlice(b[off+16 : off+20])
		off += ihl
	case 0x86DD:
		if len(b) < off+40 {
			return
		}
		proto = b[off+6]
		src, _ = netip.AddrFromSlice(b[off+8 : off+24])
		dst, _ = netip.AddrFromSlice(b[off+24 : off+40])
		off += 40
	default:
		return
	}
	if proto != 17 || len(b) < off+8+12 || binary.BigEndian.Uint16(b[off+2:]) != 4791 {
		return
	}
	return src, dst, b[off+8 : off+20], true
}

// qpFilter keeps the frames of local QP qpn: received ones addressed to
// it, sent ones addressed to its peer's QP (which the daemon names).
func qpFilter(ctx context.Context, o *opsFlags, qpn uint32) (func(daemon.DumpFrame) bool, error) {
	var qps []daemon.QP
	if err := o.query(ctx, daemon.OpAdminQPs, &qps); err != nil {
		return nil, fmt.Errorf("dump: %w", err)
	}
	i := slices.IndexFunc(qps, func(q daemon.QP) bool { return q.QPN == qpn })
	if i < 0 {
		return nil, fmt.Errorf("dump: the daemon has no QP %d", qpn)
	}
	peer := qps[i].PeerQPN
	return func(f daemon.DumpFrame) bool {
		_, _, bth, ok := roceHeaders(f.Data)
		if !ok {
			return false
		}
		dst := binary.BigEndian.Uint32(bth[4:8]) & 0xFFFFFF
		if f.Out {
			return peer != 0 && dst == peer
		}
		return dst == qpn
	}, nil
}
