package ndkverbs

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestSendBWOverUD runs perftest's ib_send_bw and ib_send_lat -c UD
// between two adapters on a veth pair: RC control connection, SIDR for
// the data QP, datagrams up to the path MTU (send_bw's default size
// becomes it), the latency test's server answering where the client's
// first datagram came from; and a UD port nobody serves refused as REJ
// reason 8 is, so that the client retries it. Both sides run in process,
// then the client, then the server, through a daemon on its end.
func TestSendBWOverUD(t *testing.T) {
	t.Run("in process", func(t *testing.T) { a, b := newSides(t, 1500); testSendBWOverUD(t, a, b) })
	t.Run("client through a daemon", func(t *testing.T) { a, b := newDaemonSides(t, 1500); testSendBWOverUD(t, a, b) })
	t.Run("server through a daemon", func(t *testing.T) { a, b := newDaemonSides(t, 1500); testSendBWOverUD(t, b, a) })
}

// testSendBWOverUD runs the cases with a as client and b as server.
func testSendBWOverUD(t *testing.T, a, b *side) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var peer netip.Addr
	if err := b.h.Do(func() error { peer = b.dev.Adapter.LocalAddress(); return nil }); err != nil {
		t.Fatal(err)
	}
	conn := &Connector{Dev: a.dev, Peer: peer}
	var err error
	_ = a.h.Do(func() error { _, err = conn.ConnectUD(ctx, 4000, verbs.ConnParams{}); return nil })
	var rej *verbs.RejectError
	if !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidServiceID {
		t.Fatalf("UD connect to an unserved port: %v, want REJ reason 8", err)
	}

	for _, c := range []struct {
		kind perftest.Kind
		size int
		all  bool
	}{{perftest.BW, 0, false}, {perftest.BW, 64, false}, {perftest.Lat, 1, false}, {perftest.Lat, 1024, false},
		{perftest.BW, 0, true}, {perftest.Lat, 0, true}} {
		size := c.size
		p := perftest.Params{Verb: perftest.Send, Kind: c.kind, Size: size, Iterations: 200, UD: true, AllSizes: c.all,
			ConnectRetry: perftest.Retry{Attempts: 20, Interval: 50 * time.Millisecond}}
		cli, srv, cout, sout := runUD(t, ctx, a, b, conn, p)
		want := size
		if size == 0 {
			want = 1024 // the path MTU at MTU 1500
			if !strings.Contains(cout, "Changing to this MTU") {
				t.Fatalf("client output:\n%s", cout)
			}
		}
		switch {
		case c.all && c.kind == perftest.BW && (len(cli.AllBW) != 10 || cli.AllBW[9].Size != 1024):
			t.Fatalf("-a: client rows %+v, want 2 to 1024 bytes", cli.AllBW)
		case c.all && c.kind == perftest.Lat && (len(cli.AllLat) != 10 || cli.AllLat[9].Size != 1024):
			t.Fatalf("-a: client rows %+v, want 2 to 1024 bytes", cli.AllLat)
		case c.all:
		case c.kind == perftest.Lat && (cli.Lat == nil || srv.Lat == nil || cli.Params.Size != want):
			t.Fatalf("send_lat size %d: client %+v server %+v", size, cli.Lat, srv.Lat)
		case c.kind == perftest.BW && (cli.BW == nil || srv.BW == nil || cli.BW.Size != uint64(want) || srv.BW.Iters != 200):
			t.Fatalf("size %d: client %+v server %+v", size, cli.BW, srv.BW)
		}
		t.Logf("client:\n%s\nserver:\n%s", cout, sout)
	}
	p := perftest.Params{Verb: perftest.Send, Kind: perftest.BW, Size: 2048, UD: true}
	if err := (perftest.Params{Verb: perftest.Send, Kind: perftest.BW, UD: true, UseSRQ: true}).Check(); !errors.Is(err, perftest.ErrUnsupported) {
		t.Errorf("-c UD --use-srq: %v, want ErrUnsupported", err)
	}
	if err := p.Check(); err != nil {
		t.Fatal(err) // refused later, once the MTU is agreed
	}
	for _, bad := range []perftest.Params{
		{Verb: perftest.Read, Kind: perftest.Lat, UD: true},
		{Verb: perftest.Write, Kind: perftest.BW, UD: true},
	} {
		if err := bad.Check(); !errors.Is(err, perftest.ErrUnsupported) {
			t.Errorf("%+v: %v, want ErrUnsupported", bad, err)
		}
	}
}

// newDaemonSides is newSides whose first side is a client of a daemon
// serving A's veth end.
func newDaemonSides(t *testing.T, mtu int) (*side, *side) {
	t.Helper()
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: mtu, StaticNeighbours: true})
	var served *ndk.Adapter
	if err := p.A.Do(func() (err error) { served, err = ndk.Open(p.A.Link, ndk.Options{}); return err }); err != nil {
		t.Fatalf("open the daemon's adapter: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := daemon.Listen(sock, 0o600, -1)
	if err != nil {
		served.Close()
		t.Fatal(err)
	}
	srv := daemon.New(served, daemon.Config{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		served.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	var b *ndk.Adapter
	if err := p.B.Do(func() (err error) { b, err = ndk.Open(p.B.Link, ndk.Options{}); return err }); err != nil {
		t.Fatalf("open %s: %v", p.B.Name, err)
	}
	t.Cleanup(b.Close)
	bd, err := New(b)
	if err != nil {
		t.Fatal(err)
	}
	return &side{h: p.A, dev: d}, &side{h: p.B, dev: bd}
}

// TestUDServerServesBeforeItsSync runs send_bw and send_lat -c UD with a
// client that does not retry a refused resolution, as perftest's does not
// (RDMA_CM_EVENT_UNREACHABLE ends it), against a server whose accept is
// slow to serve its UD port: the server's sync before the data connection
// waits until the port is served, so the client's SIDR_REQ, sent as the
// sync ends, is answered with the QP and never refused.
func TestUDServerServesBeforeItsSync(t *testing.T) {
	a, b := newSides(t, 1500)
	defer func(f func()) { beforeServeUD = f }(beforeServeUD)
	beforeServeUD = func() { time.Sleep(300 * time.Millisecond) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var peer netip.Addr
	if err := b.h.Do(func() error { peer = b.dev.Adapter.LocalAddress(); return nil }); err != nil {
		t.Fatal(err)
	}
	conn := &Connector{Dev: a.dev, Peer: peer}
	for _, kind := range []perftest.Kind{perftest.BW, perftest.Lat} {
		runUD(t, ctx, a, b, conn, perftest.Params{Verb: perftest.Send, Kind: kind, Size: 64, Iterations: 50, UD: true})
	}
}

// runUD runs one perftest test with a as client through conn and b as
// server on a fresh listener, failing t if either side fails.
func runUD(t *testing.T, ctx context.Context, a, b *side, conn *Connector, p perftest.Params) (cli, srv perftest.Result, cout, sout string) {
	t.Helper()
	var l *Listener
	if err := b.h.Do(func() (err error) { l, err = Listen(b.dev, perftest.DefaultPort, Depths{}); return err }); err != nil {
		t.Fatal(err)
	}
	var so, co bytes.Buffer
	var serr, cerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// In the namespace: a perftest server also listens on TCP.
		_ = b.h.Do(func() error { srv, serr = perftest.RunServer(ctx, p, l, &so); return nil })
	}()
	_ = a.h.Do(func() error { cli, cerr = perftest.RunClient(ctx, p, conn, &co); return nil })
	wg.Wait()
	l.Close()
	if cerr != nil || serr != nil {
		t.Fatalf("%v %v size %d: client: %v\nserver: %v\n%s\n%s", p.Verb, p.Kind, p.Size, cerr, serr, co.String(), so.String())
	}
	return cli, srv, co.String(), so.String()
}
