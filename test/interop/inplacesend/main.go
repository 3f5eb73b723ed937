// Command inplacesend runs in a guest of test/interop
// (TestDaemonOnBackportsKernel): it attaches ndkxdp in process to a NIC,
// serves the adapter as the daemon does (so that `ndkxdp stats` and
// `ndkxdp info` report its queues), connects to a listener of the host's,
// and SENDs and WRITEs whole AllocBuffer buffers, each posted once, one
// request at a time, so that each packet's payload is one whole
// allocation the port may send in place as one descriptor. It prints one
// JSON object: the payload bytes posted from AllocBuffer memory, and what
// `ndkxdp info -j` and `ndkxdp stats -j` said afterwards.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// Report is what inplacesend prints.
type Report struct {
	Posted uint64          `json:"posted"` // payload bytes posted from AllocBuffer memory
	Ops    int             `json:"ops"`    // SENDs and WRITEs posted
	Info   json.RawMessage `json:"info"`
	Stats  json.RawMessage `json:"stats"`
}

func main() {
	dev := flag.String("dev", "eth0", "interface to attach to")
	queues := flag.Int("queues", 1, "device queues to bind")
	peer := flag.String("peer", "", "the host's listener, address:port")
	size := flag.Int("size", 1000, "bytes per buffer (at most the path MTU: one packet)")
	count := flag.Int("count", 20, "buffers, each sent once and written once")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, *dev, *queues, *peer, *size, *count); err != nil {
		fmt.Fprintln(os.Stderr, "inplacesend:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dev string, queues int, peer string, size, count int) error {
	dst, err := netip.ParseAddrPort(peer)
	if err != nil {
		return err
	}
	a, err := ndk.Open(dev, ndk.Options{Queues: queues})
	if err != nil {
		return err
	}
	defer a.Close()
	if size > a.PathMTU() {
		return fmt.Errorf("size %d over the path MTU %d", size, a.PathMTU())
	}
	srv := daemon.New(a, daemon.Config{Interface: dev, Version: "inplacesend"})
	ln, err := daemon.Listen(daemon.SocketPath(dev), 0o600, -1)
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	defer srv.Close()

	pd, err := a.CreatePD()
	if err != nil {
		return err
	}
	cq, err := a.CreateCQ(64, nil)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 16,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		return err
	}
	c, err := a.CreateConnector()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Connect(ctx, qp, netip.AddrPort{}, dst, 0, 0, nil); err != nil {
		return fmt.Errorf("connect %s: %w", dst, err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		return err
	}
	// The host's REP names its sink: address and token.
	var pdata [256]byte // a REP carries 196 bytes of private data, padded
	_, _, n, err := c.GetConnectionData(pdata[:])
	if err != nil || n < 12 {
		return fmt.Errorf("the host's private data: %d bytes, %v", n, err)
	}
	sink, token := binary.BigEndian.Uint64(pdata[:8]), binary.BigEndian.Uint32(pdata[8:12])

	// Every SEND and every WRITE has a buffer of its own, held to the
	// end: no buffer is posted while an earlier frame of it may still
	// await its transmit completion, which would make the port copy it.
	rep := Report{}
	bufs := make([]*ndk.Buffer, 0, 2*count)
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	for i := range count {
		var sges [2]ndk.SGE
		for k := range sges {
			buf, err := a.AllocBuffer(pd, size, 0)
			if err != nil {
				return err
			}
			bufs = append(bufs, buf)
			b := buf.Bytes()
			for j := range b {
				b[j] = byte(i*31 + j*7)
			}
			if sges[k], err = buf.SGE(0, size); err != nil {
				return err
			}
		}
		if err := qp.Send(nil, sges[:1], 0); err != nil {
			return err
		}
		if err := wait(ctx, cq, "send"); err != nil {
			return err
		}
		if err := qp.Write(nil, sges[1:], sink+uint64(i*size), token, 0); err != nil {
			return err
		}
		if err := wait(ctx, cq, "write"); err != nil {
			return err
		}
		rep.Posted += 2 * uint64(size)
		rep.Ops += 2
	}
	a.Stats() // the engines publish their ports' counts per batch
	if rep.Info, err = exec.CommandContext(ctx, "ndkxdp", "info", "-j", "-dev", dev).Output(); err != nil {
		return fmt.Errorf("ndkxdp info: %w", err)
	}
	if rep.Stats, err = exec.CommandContext(ctx, "ndkxdp", "stats", "-j", "-dev", dev).Output(); err != nil {
		return fmt.Errorf("ndkxdp stats: %w", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	c.Disconnect(dctx)
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// wait waits for one successful completion on cq.
func wait(ctx context.Context, cq *ndk.CQ, op string) error {
	var r [1]ndk.ResultEx
	for cq.GetResultsEx(r[:]) == 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: no completion: %w", op, ctx.Err())
		}
		time.Sleep(100 * time.Microsecond)
	}
	if r[0].Status != ndk.StatusSuccess {
		return fmt.Errorf("%s: %w", op, errors.New(r[0].Status.String()))
	}
	return nil
}
