package ndkverbs

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// srqListener records the SRQs a Listener made and checks, on every
// endpoint accepted on one, that the endpoint's own Receive is refused.
type srqListener struct {
	*Listener
	mu   sync.Mutex
	srqs []*SRQ
	errs []error // Receive on each endpoint made on an SRQ
}

func (l *srqListener) CreateSRQ(depth int) (verbs.SRQ, error) {
	s, err := l.dev.CreateSRQ(depth)
	if err == nil {
		l.mu.Lock()
		l.srqs = append(l.srqs, s)
		l.mu.Unlock()
	}
	return s, err
}

func (l *srqListener) Accept(ctx context.Context, p verbs.ConnParams) (verbs.Endpoint, error) {
	if p.SRQ != nil {
		prepare := p.Prepare
		p.Prepare = func(ep verbs.Endpoint) error {
			buf, err := ep.Alloc(64)
			if err != nil {
				return err
			}
			r, err := ep.Register(buf, verbs.AccessLocalWrite)
			if err != nil {
				return err
			}
			seg, _ := r.Seg(0, 64)
			l.mu.Lock()
			l.errs = append(l.errs, ep.Receive(99, seg))
			l.mu.Unlock()
			return prepare(ep)
		}
	}
	return l.Listener.Accept(ctx, p)
}

// TestPerftestSRQ runs send_bw and send_lat with --use-srq through the IB
// CM: the server's data QP is made on an SRQ (its own Receive is refused)
// and every receive the server posts, the first RxDepth and the reposts,
// goes to the SRQ; the run completes, so each SEND found one there. In
// send_lat the client has an SRQ too (perftest's srq_exists).
func TestPerftestSRQ(t *testing.T) {
	a, b := newSides(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var peer netip.Addr
	if err := b.h.Do(func() error { peer = b.dev.Adapter.LocalAddress(); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []perftest.Params{
		{Verb: perftest.Send, Kind: perftest.BW, Size: 4096, Iterations: 300, RxDepth: 64, UseSRQ: true},
		{Verb: perftest.Send, Kind: perftest.Lat, Size: 64, Iterations: 100, RxDepth: 16, UseSRQ: true},
	} {
		t.Run(kindName(p), func(t *testing.T) {
			var l *srqListener
			if err := b.h.Do(func() error {
				x, err := Listen(b.dev, perftest.DefaultPort, Depths{})
				l = &srqListener{Listener: x}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p.ConnectRetry = perftest.Retry{Attempts: 20, Interval: 50 * time.Millisecond}
			conn := &Connector{Dev: a.dev, Peer: peer}
			var sout, cout bytes.Buffer
			var serr, cerr error
			var srv perftest.Result
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				// In the namespace: a perftest server also listens on TCP.
				_ = b.h.Do(func() error { srv, serr = perftest.RunServer(ctx, p, l, &sout); return nil })
			}()
			_ = a.h.Do(func() error { _, cerr = perftest.RunClient(ctx, p, conn, &cout); return nil })
			wg.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\nserver: %v\n%s\n%s", cerr, serr, cout.String(), sout.String())
			}
			if len(l.srqs) != 1 || len(l.errs) != 1 {
				t.Fatalf("%d SRQs made, %d endpoints on one; want 1 each", len(l.srqs), len(l.errs))
			}
			if !errors.Is(l.errs[0], verbs.ErrInvalid) {
				t.Fatalf("Receive on the endpoint made on the SRQ: %v, want ErrInvalid", l.errs[0])
			}
			if got := l.srqs[0].Posted(); got != uint64(srv.Params.Iterations) {
				t.Fatalf("%d receives posted to the server's SRQ, want %d (every receive of the run)", got, srv.Params.Iterations)
			}
			if p.Kind == perftest.BW && (srv.BW == nil || srv.BW.Iters != uint64(p.Iterations)) {
				t.Fatalf("server report %+v", srv.BW)
			}
			if p.Kind == perftest.Lat && (srv.Lat == nil || srv.Lat.Iters != p.Iterations) {
				t.Fatalf("server latency %+v", srv.Lat)
			}
			t.Logf("server:\n%s", sout.String())
		})
	}
}

func kindName(p perftest.Params) string {
	if p.Kind == perftest.Lat {
		return "send_lat"
	}
	return "send_bw"
}

// rejectFirstData is a Connector whose second Connect (perftest's first
// data connection attempt) does what a REJ does to a real one: the
// endpoint is made on the SRQ and prepared (its receives posted to the
// SRQ), then closed, and the attempt fails with REJ reason 8. It records
// the SRQs it makes.
type rejectFirstData struct {
	*Connector
	n    int
	srqs []*SRQ
}

func (r *rejectFirstData) CreateSRQ(depth int) (verbs.SRQ, error) {
	s, err := r.Dev.CreateSRQ(depth)
	if err == nil {
		r.srqs = append(r.srqs, s)
	}
	return s, err
}

func (r *rejectFirstData) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	r.n++
	if r.n != 2 {
		return r.Connector.Connect(ctx, port, p)
	}
	srq, err := r.Dev.srqOf(p)
	if err != nil {
		return nil, err
	}
	ep, err := r.Dev.endpoint(r.Depths, srq, false)
	if err != nil {
		return nil, err
	}
	defer ep.Close()
	if err := p.Prepare(ep); err != nil {
		return nil, err
	}
	return nil, &verbs.RejectError{Reason: verbs.RejectInvalidServiceID}
}

// TestPerftestSRQRetriedConnect: a send_lat --use-srq client whose first
// data connection attempt is rejected after its endpoint was prepared
// (its receives posted to the SRQ, its memory registered and then
// released with the endpoint) retries on a new SRQ: the run completes,
// and every receive of the run went to the SRQ of the connection that
// ran. Reusing the first SRQ fails: it is full of the first attempt's
// receives, into memory that is gone.
func TestPerftestSRQRetriedConnect(t *testing.T) {
	a, b := newSides(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var peer netip.Addr
	if err := b.h.Do(func() error { peer = b.dev.Adapter.LocalAddress(); return nil }); err != nil {
		t.Fatal(err)
	}
	var l *Listener
	if err := b.h.Do(func() (err error) { l, err = Listen(b.dev, perftest.DefaultPort, Depths{}); return err }); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := perftest.Params{Verb: perftest.Send, Kind: perftest.Lat, Size: 64, Iterations: 100, RxDepth: 16, UseSRQ: true,
		ConnectRetry: perftest.Retry{Attempts: 3, Interval: 10 * time.Millisecond}}
	conn := &rejectFirstData{Connector: &Connector{Dev: a.dev, Peer: peer}}
	var sout, cout bytes.Buffer
	var serr, cerr error
	var cli perftest.Result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// In the namespace: a perftest server also listens on TCP.
		_ = b.h.Do(func() error { _, serr = perftest.RunServer(ctx, p, l, &sout); return nil })
	}()
	_ = a.h.Do(func() error { cli, cerr = perftest.RunClient(ctx, p, conn, &cout); return nil })
	wg.Wait()
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v\nserver: %v\n%s\n%s", cerr, serr, cout.String(), sout.String())
	}
	if len(conn.srqs) != 2 {
		t.Fatalf("the client made %d SRQs, want 2 (one per data connection attempt)", len(conn.srqs))
	}
	if got := conn.srqs[1].Posted(); got != uint64(cli.Params.Iterations) {
		t.Fatalf("%d receives posted to the SRQ of the connection that ran, want %d", got, cli.Params.Iterations)
	}
	if cli.Lat == nil || cli.Lat.Iters != p.Iterations {
		t.Fatalf("client latency %+v", cli.Lat)
	}
}
