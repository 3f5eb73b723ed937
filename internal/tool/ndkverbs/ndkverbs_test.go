package ndkverbs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rping"
)

// TestRping runs rping's client and server (internal/rping) on two ndkxdp
// adapters over a veth pair, with the ping data verified (-V): the
// protocol's SENDs, READs and WRITEs through the adapter.
func TestRping(t *testing.T) {
	for _, size := range []int{rping.MinSize, 64, 4096, 65535} {
		t.Run(strings.ReplaceAll(time.Duration(size).String(), "ns", "B"), func(t *testing.T) {
			a, b := newSides(t, 1500)
			n := &oobNet{client: a, server: b}
			n.listen(rping.DefaultPort)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := rping.Config{Size: size, Count: 20, Validate: true}
			var srv rping.Stats
			var serr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv, serr = rping.RunServer(ctx, cfg, oobListener{n, rping.DefaultPort})
			}()
			cli, cerr := rping.RunClient(ctx, cfg, n, rping.DefaultPort)
			wg.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			if cli.Pings != 20 || srv.Pings != 20 {
				t.Fatalf("pings: client %d, server %d; want 20", cli.Pings, srv.Pings)
			}
		})
	}
}

// TestPerftest runs every perftest test of internal/perftest between two
// ndkxdp adapters (both MTUs for write bw) and checks the reports; the
// atomic tests check the server's target word afterwards.
func TestPerftest(t *testing.T) {
	tests := []struct {
		name string
		mtu  int
		p    perftest.Params
	}{
		{"send_bw", 1500, perftest.Params{Verb: perftest.Send, Kind: perftest.BW, Size: 4096, Iterations: 300, RxDepth: 64}},
		{"write_bw", 1500, perftest.Params{Verb: perftest.Write, Kind: perftest.BW, Size: 65536, Iterations: 200}},
		{"write_bw_9000", 9000, perftest.Params{Verb: perftest.Write, Kind: perftest.BW, Size: 1 << 20, Iterations: 20}},
		{"read_bw", 1500, perftest.Params{Verb: perftest.Read, Kind: perftest.BW, Size: 4096, Iterations: 200}},
		{"atomic_bw_fetch_add", 1500, perftest.Params{Verb: perftest.Atomic, Kind: perftest.BW, Iterations: 500}},
		{"atomic_bw_cmp_swap", 1500, perftest.Params{Verb: perftest.Atomic, Kind: perftest.BW, Iterations: 200, AtomicType: perftest.CompareAndSwap}},
		{"send_lat", 1500, perftest.Params{Verb: perftest.Send, Kind: perftest.Lat, Size: 64, Iterations: 200}},
		{"write_lat", 1500, perftest.Params{Verb: perftest.Write, Kind: perftest.Lat, Size: 1, Iterations: 200}},
		{"read_lat", 1500, perftest.Params{Verb: perftest.Read, Kind: perftest.Lat, Size: 64, Iterations: 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := newSides(t, tt.mtu)
			n := &oobNet{client: a, server: b}
			n.listen(perftest.DefaultPort)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var sout, cout bytes.Buffer
			var srv perftest.Result
			var serr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv, serr = perftest.RunServer(ctx, tt.p, oobListener{n, perftest.DefaultPort}, &sout)
			}()
			cli, cerr := perftest.RunClient(ctx, tt.p, n, &cout)
			if cerr != nil {
				cancel()
			}
			wg.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\nserver: %v\n%s\n%s", cerr, serr, cout.String(), sout.String())
			}
			t.Logf("client:\n%s", cout.String())
			p := cli.Params
			if p.Kind == perftest.BW {
				if cli.BW == nil || cli.BW.Iters != uint64(p.Iterations) || !(cli.BW.BWAvg > 0) {
					t.Fatalf("client report %+v", cli.BW)
				}
			} else if cli.Lat == nil || cli.Lat.Iters != p.Iterations || !(cli.Lat.Typical > 0) {
				t.Fatalf("client latency %+v", cli.Lat)
			}
			if p.Verb == perftest.Atomic {
				// The server's target is the second half of its buffer.
				b.dev.Adapter.Stats() // orders the engines' atomics before the read
				word := serverTarget(t, n, srv)
				warm := uint64(min(p.TxDepth, p.OutReads, p.Iterations))
				want := uint64(p.Iterations) + warm
				if p.AtomicType == perftest.CompareAndSwap {
					want = 7 // perftest's ATOMIC_SWAP_VALUE: the first compare (0) hits
				}
				if word != want {
					t.Fatalf("server's atomic target %d, want %d", word, want)
				}
			}
		})
	}
}

// serverTarget reads the word at the server's advertised address from the
// regions the server's endpoints registered (RegisterMR uses the buffer's
// own address).
func serverTarget(t *testing.T, n *oobNet, srv perftest.Result) uint64 {
	t.Helper()
	for _, b := range n.serverMem {
		base := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
		if a := srv.Local.VAddr; a >= base && a+8 <= base+uint64(len(b)) {
			return binary.NativeEndian.Uint64(b[a-base:])
		}
	}
	t.Fatal("no server region holds the advertised address")
	return 0
}

// TestEndpointErrorsAndDisconnect: a refused atomic completes with
// verbs.ErrAccess, everything after it is flushed, and once one side
// closes, the other's Poll returns verbs.ErrDisconnected.
func TestEndpointErrorsAndDisconnect(t *testing.T) {
	a, b := newSides(t, 1500)
	n := &oobNet{client: a, server: b}
	n.listen(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type acc struct {
		ep  verbs.Endpoint
		err error
	}
	got := make(chan acc, 1)
	go func() {
		ep, err := oobListener{n, 1}.Accept(ctx, verbs.ConnParams{ResponderResources: 4, InitiatorDepth: 4})
		got <- acc{ep, err}
	}()
	cli, err := n.Connect(ctx, 1, verbs.ConnParams{ResponderResources: 4, InitiatorDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.err != nil {
		t.Fatal(s.err)
	}
	srv := s.ep
	target, err := srv.Register(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteRead) // no atomic right
	if err != nil {
		t.Fatal(err)
	}
	local, _ := cli.Register(make([]byte, 64), verbs.AccessLocalWrite)
	seg, _ := local.Seg(0, 8)
	if err := cli.(verbs.Atomics).FetchAdd(7, seg, target.Addr, target.RKey, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := cli.Send(8, seg, true); err != nil {
		t.Fatal(err)
	}
	cs := pollN(t, cli, 2)
	if cs[0].ID != 7 || cs[0].Op != verbs.OpFetchAdd || !errors.Is(cs[0].Err, verbs.ErrAccess) {
		t.Fatalf("refused atomic completed %+v", cs[0])
	}
	if cs[1].ID != 8 || cs[1].Op != verbs.OpSend || !errors.Is(cs[1].Err, verbs.ErrFlushed) {
		t.Fatalf("send after the failure completed %+v", cs[1])
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	var out [4]verbs.Completion
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := srv.Poll(out[:])
		if errors.Is(err, verbs.ErrDisconnected) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("server poll after the client closed: %v", err)
		}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
}

func pollN(t *testing.T, ep verbs.Endpoint, n int) []verbs.Completion {
	t.Helper()
	var out []verbs.Completion
	buf := make([]verbs.Completion, 8)
	for deadline := time.Now().Add(5 * time.Second); len(out) < n; {
		k, err := ep.Poll(buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions", len(out), n)
		}
	}
	return out
}

// TestPostAndPollAllocateNothing: a SEND/receive round trip and an atomic
// through the adapter allocate nothing.
func TestPostAndPollAllocateNothing(t *testing.T) {
	a, b := newSides(t, 1500)
	n := &oobNet{client: a, server: b}
	n.listen(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan verbs.Endpoint, 1)
	go func() {
		ep, err := oobListener{n, 2}.Accept(ctx, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1})
		if err != nil {
			t.Error(err)
		}
		got <- ep
	}()
	cli, err := n.Connect(ctx, 2, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := <-got
	if srv == nil {
		t.FailNow()
	}
	lr, _ := cli.Register(make([]byte, 64), verbs.AccessLocalWrite)
	rr, _ := srv.Register(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteAtomic)
	ls, _ := lr.Seg(0, 8)
	rs, _ := rr.Seg(0, 64)
	at := cli.(verbs.Atomics)
	var out [4]verbs.Completion
	wait := func(ep verbs.Endpoint) {
		for {
			k, err := ep.Poll(out[:])
			if err != nil {
				t.Fatal(err)
			}
			if k > 0 {
				if out[0].Err != nil {
					t.Fatal(out[0].Err)
				}
				return
			}
		}
	}
	round := func() {
		if err := srv.Receive(1, rs); err != nil {
			t.Fatal(err)
		}
		if err := cli.Send(2, ls, true); err != nil {
			t.Fatal(err)
		}
		wait(cli)
		wait(srv)
		if err := at.FetchAdd(3, ls, rr.Addr+8, rr.RKey, 1, true); err != nil {
			t.Fatal(err)
		}
		wait(cli)
	}
	for i := 0; i < 20; i++ {
		round()
	}
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Fatalf("%.2f allocations per round, want 0", allocs)
	}
}

// TestOverIBCM runs rping and perftest through Connector and Listener,
// ndk's IB CM on QP1 (REQ, REP, RTU, DREQ, DREP), and checks that a
// connection to a port nobody listens on is a *verbs.RejectError with
// reason 8, the error perftest's client retries on.
func TestOverIBCM(t *testing.T) {
	a, b := newSides(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var peer netip.Addr
	if err := b.h.Do(func() error { peer = b.dev.Adapter.LocalAddress(); return nil }); err != nil {
		t.Fatal(err)
	}
	conn := &Connector{Dev: a.dev, Peer: peer}
	// The CM resolves routes in the adapter's namespace.
	connect := func(fn func() error) error { return a.h.Do(fn) }

	t.Run("reject8", func(t *testing.T) {
		var err error
		_ = connect(func() error { _, err = conn.Connect(ctx, 4000, verbs.ConnParams{}); return nil })
		var rej *verbs.RejectError
		if !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidServiceID {
			t.Fatalf("connect to an unbound port: %v, want REJ reason 8", err)
		}
	})
	t.Run("private_data_and_immediate", func(t *testing.T) {
		// Each side reads the other's private data (the REQ's from
		// Prepare on, the REP's once connected) and the peer's address;
		// a zero-length WRITE with immediate completes a receive posted
		// without an SGE with the immediate and 0 bytes, a 5-byte one
		// with 5.
		var l *Listener
		if err := b.h.Do(func() (err error) { l, err = Listen(b.dev, 7300, Depths{}); return err }); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var srv verbs.Endpoint
		var sawREQ []byte
		var serr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv, serr = l.Accept(ctx, verbs.ConnParams{PrivateData: []byte("rep!"), Prepare: func(ep verbs.Endpoint) error {
				sawREQ = ep.(verbs.PeerData).PeerPrivateData()
				for range 2 {
					if err := ep.Receive(0, verbs.Segment{}); err != nil {
						return err
					}
				}
				return nil
			}})
		}()
		var cli verbs.Endpoint
		var cerr error
		_ = connect(func() error {
			cli, cerr = conn.Connect(ctx, 7300, verbs.ConnParams{PrivateData: []byte("req?")})
			return nil
		})
		<-done
		if cerr != nil || serr != nil {
			t.Fatalf("connect: %v; accept: %v", cerr, serr)
		}
		defer cli.Close()
		defer srv.Close()
		if len(sawREQ) != 56 || string(sawREQ[:4]) != "req?" {
			t.Errorf("the REQ's private data as Prepare saw it: %q, want \"req?\" padded to 56 bytes", sawREQ)
		}
		if rep := cli.(verbs.PeerData).PeerPrivateData(); len(rep) != 196 || string(rep[:4]) != "rep!" {
			t.Errorf("the REP's private data: %q, want \"rep!\" padded to 196 bytes", rep)
		}
		if got := srv.(*Endpoint).PeerAddress().Addr(); got != a.dev.Adapter.LocalAddress() {
			t.Errorf("the server's peer %v, want %v", got, a.dev.Adapter.LocalAddress())
		}
		buf, err := srv.Alloc(64)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := srv.Register(buf, verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		sbuf, _ := cli.Alloc(64)
		src, err := cli.Register(sbuf, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		copy(src.Buf, "hello")
		imm := cli.(verbs.Immediate)
		if err := imm.WriteImm(1, verbs.Segment{Region: src}, 0, 0, 0xE0000000, true); err != nil {
			t.Fatal(err)
		}
		if err := imm.WriteImm(2, verbs.Segment{Region: src, Len: 5}, dst.Addr+10, dst.RKey, 0x12345678, true); err != nil {
			t.Fatal(err)
		}
		var got []verbs.Completion
		out := make([]verbs.Completion, 4)
		for len(got) < 2 && ctx.Err() == nil {
			n, err := srv.Poll(out)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out[:n]...)
		}
		want := []verbs.Completion{{Op: verbs.OpRecvRDMAWithImm, Imm: 0xE0000000}, {Op: verbs.OpRecvRDMAWithImm, Bytes: 5, Imm: 0x12345678}}
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] || string(srv.Peek(dst, 10)) != "h" {
			t.Fatalf("receives %+v, want %+v, and the bytes placed", got, want)
		}
	})
	t.Run("rping", func(t *testing.T) {
		var l *Listener
		if err := b.h.Do(func() (err error) { l, err = Listen(b.dev, rping.DefaultPort, Depths{}); return err }); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		cfg := rping.Config{Size: 1000, Count: 30, Validate: true}
		var srv rping.Stats
		var serr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); srv, serr = rping.RunServer(ctx, cfg, l) }()
		var cli rping.Stats
		var cerr error
		_ = connect(func() error { cli, cerr = rping.RunClient(ctx, cfg, conn, rping.DefaultPort); return nil })
		wg.Wait()
		if cerr != nil || serr != nil || cli.Pings != 30 || srv.Pings != 30 {
			t.Fatalf("client %d pings (%v), server %d (%v)", cli.Pings, cerr, srv.Pings, serr)
		}
	})
	for _, p := range []perftest.Params{
		{Verb: perftest.Write, Kind: perftest.BW, Size: 65536, Iterations: 100},
		{Verb: perftest.Atomic, Kind: perftest.BW, Iterations: 200},
		{Verb: perftest.Send, Kind: perftest.Lat, Size: 64, Iterations: 100},
	} {
		t.Run(fmt.Sprintf("perftest_%v_%v", p.Verb, p.Kind), func(t *testing.T) {
			var l *Listener
			if err := b.h.Do(func() (err error) { l, err = Listen(b.dev, perftest.DefaultPort, Depths{}); return err }); err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p.ConnectRetry = perftest.Retry{Attempts: 20, Interval: 50 * time.Millisecond}
			var sout, cout bytes.Buffer
			var serr, cerr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				// In the namespace: a perftest server also listens on TCP.
				_ = b.h.Do(func() error { _, serr = perftest.RunServer(ctx, p, l, &sout); return nil })
			}()
			_ = connect(func() error { _, cerr = perftest.RunClient(ctx, p, conn, &cout); return nil })
			wg.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\nserver: %v\n%s\n%s", cerr, serr, cout.String(), sout.String())
			}
			t.Logf("client:\n%s", cout.String())
		})
	}
}

// TestCompletionBeforeDisconnect: a SEND whose completion comes after the
// peer's disconnect was seen (its ACK, then the DREQ, as rdma_xserver
// sends them) still completes on Poll, which reports the disconnect only
// once the CQs stayed empty; before, the first empty Poll after the
// disconnect reported it and the completion was never read. The grace is
// stretched to 2 s here: on a loaded machine the ACK can take longer than
// the 20 ms a tool waits (CI once saw that), and what is tested is that
// Poll waits at all.
func TestCompletionBeforeDisconnect(t *testing.T) {
	defer func(g time.Duration) { goneGrace = g }(goneGrace)
	goneGrace = 2 * time.Second
	a, b := newSides(t, 1500)
	n := &oobNet{client: a, server: b}
	n.listen(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan verbs.Endpoint, 1)
	go func() {
		ep, err := oobListener{n, 1}.Accept(ctx, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1,
			Prepare: func(ep verbs.Endpoint) error {
				r, err := ep.Register(make([]byte, 64), verbs.AccessLocalWrite)
				if err != nil {
					return err
				}
				s, _ := r.Seg(0, 64)
				return ep.Receive(1, s)
			}})
		if err != nil {
			t.Error(err)
		}
		got <- ep
	}()
	cli, err := n.Connect(ctx, 1, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := <-got
	if srv == nil {
		t.FailNow()
	}
	defer srv.Close()
	local, _ := cli.Register(make([]byte, 64), verbs.AccessLocalWrite)
	seg, _ := local.Seg(0, 16)
	if err := cli.Send(5, seg, true); err != nil {
		t.Fatal(err)
	}
	cli.(*Endpoint).PeerDisconnected() // seen before the ACK came
	var out [4]verbs.Completion
	for deadline := time.Now().Add(5 * time.Second); ; {
		k, err := cli.Poll(out[:])
		if err != nil {
			t.Fatalf("poll: %v before the SEND's completion", err)
		}
		if k == 1 && out[0].ID == 5 && out[0].Err == nil {
			break
		}
		if k != 0 || time.Now().After(deadline) {
			t.Fatalf("poll: %d completions %+v", k, out[:k])
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, err := cli.Poll(out[:])
		if errors.Is(err, verbs.ErrDisconnected) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("poll after the completion: %v, want ErrDisconnected", err)
		}
	}
}
