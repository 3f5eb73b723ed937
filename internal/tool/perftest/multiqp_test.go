package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// TestSeveralQPs: with -q 3 each bandwidth test opens three data
// connections after the control one, exchanges each QP's pingpong_dest
// in QP order (two more handshakes per further QP than with one QP),
// runs the full -n on every QP against that QP's own buffer, and reports
// -n x 3 messages; the send bw server consumes -n receives on each QP.
func TestSeveralQPs(t *testing.T) {
	const qps = 3
	tests := []struct {
		name string
		p    Params
	}{
		{"send_bw", Params{Verb: Send, Kind: BW, Size: 2048, Iterations: 300, TxDepth: 16, CQMod: 4, RxDepth: 32}},
		{"write_bw", Params{Verb: Write, Kind: BW, Size: 3000, Iterations: 250, CQMod: 7}},
		{"read_bw", Params{Verb: Read, Kind: BW, Size: 1024, Iterations: 200, OutReads: 4}},
		{"atomic_bw", Params{Verb: Atomic, Kind: BW, Iterations: 150}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			one := runPair(t, tt.p, tt.p, 0)
			if one.cerr != nil || one.serr != nil {
				t.Fatalf("one QP: client: %v\nserver: %v", one.cerr, one.serr)
			}
			mp := tt.p
			mp.QPs = qps
			pr := runPair(t, mp, mp, 0)
			if pr.cerr != nil || pr.serr != nil {
				t.Fatalf("client: %v\nserver: %v", pr.cerr, pr.serr)
			}
			p := pr.client.Params
			if len(pr.rec.eps) != 1+qps || len(pr.srv.eps) != 1+qps {
				t.Fatalf("%d client and %d server connections, want 1 control + %d data each", len(pr.rec.eps), len(pr.srv.eps), qps)
			}
			if got, want := dests(pr.rec.sent)-dests(one.rec.sent), 2*(qps-1); got != want {
				t.Errorf("-q %d added %d handshakes to one QP's, want %d (gather and print per QP)", qps, got, want)
			}
			// Each side's QP i learned the peer's QP i, and the QPs'
			// buffers are distinct.
			for i := range qps {
				if pr.client.Peers[i] != pr.server.Locals[i] || pr.server.Peers[i] != pr.client.Locals[i] {
					t.Errorf("qp %d: client saw %+v, server advertised %+v", i, pr.client.Peers[i], pr.server.Locals[i])
				}
				if b := pr.srv.eps[1+i].Regions()[0].Buf; i > 0 && &b[0] == &pr.srv.eps[1].Regions()[0].Buf[0] {
					t.Errorf("qp %d shares qp 0's buffer", i)
				}
			}
			if pr.client.Local != pr.client.Locals[0] || pr.client.Peer != pr.client.Peers[0] {
				t.Errorf("Local/Peer %+v %+v are not QP 0's", pr.client.Local, pr.client.Peer)
			}
			total := p
			total.Iterations = p.Iterations * qps
			checkBW(t, total, pr.client.BW)
			if p.Verb == Send {
				checkBW(t, total, pr.server.BW)
			} else if pr.server.BW == nil || *pr.server.BW != *pr.client.BW {
				t.Errorf("server printed %+v, client measured %+v", pr.server.BW, pr.client.BW)
			}
			warm := 0
			if p.Verb != Send {
				warm = min(window(&p), p.Iterations)
			}
			for i := range qps {
				if pr.client.PerQP[i] != p.Iterations {
					t.Errorf("client qp %d completed %d, want %d", i, pr.client.PerQP[i], p.Iterations)
				}
				c := pr.rec.eps[1+i].Posted
				got := map[Verb]int{Send: c.Send, Write: c.Write, Read: c.Read, Atomic: c.Atomic}[p.Verb]
				if got != p.Iterations+warm {
					t.Errorf("client qp %d posted %d, want %d + %d warm-up", i, got, p.Iterations, warm)
				}
				s := pr.srv.eps[1+i]
				if p.Verb == Send {
					if s.Posted.Receive != p.Iterations || pr.server.PerQP[i] != p.Iterations {
						t.Errorf("server qp %d posted %d receives and consumed %d, want %d", i, s.Posted.Receive, pr.server.PerQP[i], p.Iterations)
					}
				}
				if p.Verb == Atomic {
					r := s.Regions()[0]
					v := binary.LittleEndian.Uint64(r.Buf[pr.server.Locals[i].VAddr-r.Addr:][:8])
					if v != uint64(p.Iterations+warm) {
						t.Errorf("server qp %d's atomic target = %d, want %d", i, v, p.Iterations+warm)
					}
				}
			}
			if n := strings.Count(pr.cout.String(), " local address:"); n != qps {
				t.Errorf("client printed %d local dests, want %d:\n%s", n, qps, pr.cout.String())
			}
		})
	}
}

// TestSeveralQPsRefused: -q > 1 takes bandwidth tests in iterations mode
// on RC, and endpoints that can wait on several at once.
func TestSeveralQPsRefused(t *testing.T) {
	for _, tt := range []struct {
		p    Params
		want error
		says string
	}{
		{Params{Verb: Send, Kind: Lat, QPs: 2}, verbs.ErrInvalid, "Multiple QPs only available on bw tests"},
		{Params{Verb: Write, Kind: BW, QPs: 16385}, verbs.ErrInvalid, "num of Qps should be between 1 and 16384"},
		{Params{Verb: Write, Kind: BW, QPs: 2, Duration: 4 * time.Second}, ErrUnsupported, "-D"},
		{Params{Verb: Write, Kind: BW, QPs: 2, AllSizes: true}, ErrUnsupported, "-a"},
		{Params{Verb: Send, Kind: BW, QPs: 2, UseSRQ: true}, ErrUnsupported, "--use-srq"},
	} {
		err := tt.p.Check()
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%+v: %v, want %v saying %q", tt.p, err, tt.want, tt.says)
		}
	}
	// Endpoints without verbs.AnyWaiter: the test says so rather than
	// polling one QP while another's news waits.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := &verbstest.Network{}
	l, err := n.Listen(DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := Params{Verb: Write, Kind: BW, Size: 64, Iterations: 10, QPs: 2}
	done := make(chan error, 1)
	go func() {
		_, err := RunServer(ctx, p, l, &strings.Builder{})
		done <- err
	}()
	_, cerr := RunClient(ctx, p, plainConnector{n}, &strings.Builder{})
	if !errors.Is(cerr, ErrUnsupported) || !strings.Contains(cerr.Error(), "several endpoints") {
		t.Errorf("client without AnyWaiter: %v", cerr)
	}
	cancel()
	<-done
}

// plainConnector hands out endpoints with nothing but verbs.Endpoint.
type plainConnector struct{ n *verbstest.Network }

type plainEndpoint struct{ verbs.Endpoint }

func (c plainConnector) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	if prep := p.Prepare; prep != nil {
		p.Prepare = func(ep verbs.Endpoint) error { return prep(plainEndpoint{ep}) }
	}
	ep, err := c.n.Connect(ctx, port, p)
	if err != nil {
		return nil, err
	}
	return plainEndpoint{ep}, nil
}

// TestBWLoopSeveralQPsAllocatesNothing: postBWMulti, the -q client's
// loop, allocates nothing per run.
func TestBWLoopSeveralQPsAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	p := Params{Verb: Write, Kind: BW, Size: 512, Iterations: 128, TxDepth: 32, CQMod: 8, QPs: 3}
	if err := p.normalize(); err != nil {
		t.Fatal(err)
	}
	n := &verbstest.Network{}
	l, err := n.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	g := &qpSet{n: make([]counts, p.QPs)}
	var peers []Dest
	for range p.QPs {
		var dc, ds data
		a, err := n.Connect(ctx, 1, verbs.ConnParams{Prepare: prepareData(&dc, &p, DefaultCycleBuf)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Accept(ctx, verbs.ConnParams{Prepare: prepareData(&ds, &p, DefaultCycleBuf)}); err != nil {
			t.Fatal(err)
		}
		g.ds, g.eps = append(g.ds, &dc), append(g.eps, a)
		peers = append(peers, ds.dest(&p))
	}
	g.any = g.eps[0].(verbs.AnyWaiter)
	tot := p.Iterations * p.QPs
	posted, completed := make([]uint64, tot), make([]uint64, tot)
	if err := postBWMulti(ctx, &p, g, peers, posted, completed); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := postBWMulti(ctx, &p, g, peers, posted, completed); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("postBWMulti allocates %v times per run", allocs)
	}
	for i, c := range g.n {
		if c.done != p.Iterations || c.posted != p.Iterations {
			t.Errorf("qp %d: posted %d, completed %d, want %d", i, c.posted, c.done, p.Iterations)
		}
	}
}
