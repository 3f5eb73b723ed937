package cm

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// host is one ndkxdp adapter of the veth pair with a PD and two CQs, which
// fails its test where the helpers below meet an error.
type host struct {
	t testing.TB
	*ndkhost.Host

	mu   sync.Mutex
	free [][]byte // unused slots of registrable memory
}

// mode is how both hosts' adapters are served: in the test process
// (ndk.Open), or by a daemon (ndk/daemon) whose client (ndk.Dial) the test
// uses. Test hooks act on the served adapter (ndkhost.Host.Served).
type mode struct {
	name   string
	daemon bool
}

var modes = []mode{{"inproc", false}, {"daemon", true}}

// forEachMode runs f as a subtest per mode.
func forEachMode(t *testing.T, f func(t *testing.T, m mode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

func openHost(t testing.TB, h *harness.Host, m mode, opts ndk.Options) *host {
	t.Helper()
	x, err := ndkhost.Open(h, ndkhost.Config{Options: opts, Daemon: m.daemon})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	return &host{t: t, Host: x}
}

// pair builds a veth pair and opens ndkxdp on both ends. Without static
// neighbours the first Connect makes the kernel resolve the peer's MAC.
func pair(t testing.TB, m mode, cfg harness.Config, a, b ndk.Options) (*harness.Pair, *host, *host) {
	t.Helper()
	p := harness.New(t, cfg)
	return p, openHost(t, p.A, m, a), openHost(t, p.B, m, b)
}

func (x *host) qp() *ndk.QP {
	x.t.Helper()
	q, err := x.PD.CreateQP(ndk.QPConfig{ReceiveCQ: x.RCQ, InitiatorCQ: x.ICQ, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1, InlineDataSize: 64})
	if err != nil {
		x.t.Fatal(err)
	}
	return q
}

// buffer is registered memory for SENDs and receives.
type buffer struct {
	b  []byte
	mr *ndk.MR
}

func (x *host) buffer(n int) *buffer {
	x.t.Helper()
	b, err := x.tryBuffer(n)
	if err != nil {
		x.t.Fatal(err)
	}
	return b
}

// slotSize is the most any buffer of these tests holds.
const slotSize = 256

// tryBuffer registers n bytes (at most slotSize) of a slot of memory the
// adapter can register. A daemon maps a client's memory (Adapter.Memory)
// as a few hundred memfds at most, each until the client closes, so slots
// are cut from 64 KiB of it at a time and reused (release).
func (x *host) tryBuffer(n int) (*buffer, error) {
	if n > slotSize {
		return nil, fmt.Errorf("buffer of %d bytes, over the %d of a slot", n, slotSize)
	}
	x.mu.Lock()
	if len(x.free) == 0 {
		m, err := x.Adapter.Memory(64 << 10)
		if err != nil {
			x.mu.Unlock()
			return nil, err
		}
		for off := 0; off < len(m); off += slotSize {
			x.free = append(x.free, m[off:off+slotSize:off+slotSize])
		}
	}
	b := x.free[len(x.free)-1][:n]
	x.free = x.free[:len(x.free)-1]
	x.mu.Unlock()
	clear(b)
	mr, err := x.PD.RegisterMR(b, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		x.mu.Lock()
		x.free = append(x.free, b[:slotSize])
		x.mu.Unlock()
		return nil, err
	}
	return &buffer{b: b, mr: mr}, nil
}

// release deregisters b and makes its slot reusable; nothing may use the
// memory any more (no request posted on it is pending).
func (x *host) release(b *buffer) error {
	err := b.mr.Deregister()
	x.mu.Lock()
	x.free = append(x.free, b.b[:slotSize])
	x.mu.Unlock()
	return err
}

func (b *buffer) sgl(n int) []ndk.SGE {
	return []ndk.SGE{{Addr: b.mr.Addr(), Length: uint32(n), Token: b.mr.LocalToken()}}
}

// waitCQ returns the next completion of c whose request context is ctx.
// Cancelled requests of connections closed earlier are passed over; any
// other completion is an error.
func waitCQ(t testing.TB, c *ndk.CQ, ctx any, d time.Duration) ndk.ResultEx {
	t.Helper()
	var r [1]ndk.ResultEx
	deadline := time.Now().Add(d)
	for {
		if c.GetResultsEx(r[:]) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no completion for %v within %v", ctx, d)
			}
			runtime.Gosched()
			continue
		}
		if r[0].Status == ndk.StatusCancelled {
			continue
		}
		if r[0].RequestContext != ctx {
			t.Fatalf("completion %+v, want request %v", r[0], ctx)
		}
		return r[0]
	}
}

// exchange sends msg from qa (on x) to qb (on y), which has a receive
// posted from rb, and checks that it arrived intact.
func exchange(t testing.TB, x, y *host, qa *ndk.QP, rb *buffer, msg []byte) {
	t.Helper()
	sb := x.buffer(len(msg))
	defer x.release(sb)
	copy(sb.b, msg)
	if err := qa.Send("send", sb.sgl(len(msg)), 0); err != nil {
		t.Fatal(err)
	}
	if r := waitCQ(t, x.ICQ, "send", 5*time.Second); r.Status != ndk.StatusSuccess {
		t.Fatalf("send completed %v", r.Status)
	}
	r := waitCQ(t, y.RCQ, "recv", 5*time.Second)
	if r.Status != ndk.StatusSuccess || int(r.BytesTransferred) != len(msg) || !bytes.Equal(rb.b[:len(msg)], msg) {
		t.Fatalf("receive %+v: %q, want %q", r, rb.b[:r.BytesTransferred], msg)
	}
}

// server is a listener on y that accepts every request on a new QP with a
// receive posted, and reports each accepted connection.
type server struct {
	y     *host
	l     *ndk.Listener
	reply []byte
	conns chan *serverConn
	mu    sync.Mutex
	seen  int
}

type serverConn struct {
	c            *ndk.Connector
	qp           *ndk.QP
	rb           *buffer
	data         []byte // the REQ's private data
	in, out      int    // the limits the request asked for
	err          error
	disconnected chan struct{}
}

func serve(t testing.TB, y *host, addr netip.AddrPort, reply []byte) *server {
	t.Helper()
	s := &server{y: y, reply: reply, conns: make(chan *serverConn, 2048)}
	var err error
	s.l, err = y.Adapter.CreateListener(s.accept)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.l.Listen(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.l.Close)
	return s
}

func (s *server) accept(c *ndk.Connector) {
	s.mu.Lock()
	s.seen++
	s.mu.Unlock()
	sc := &serverConn{c: c, disconnected: make(chan struct{})}
	defer func() { s.conns <- sc }()
	var n int
	sc.in, sc.out, n, sc.err = c.GetConnectionData(nil)
	if sc.err != nil {
		return
	}
	sc.data = make([]byte, n)
	if _, _, _, sc.err = c.GetConnectionData(sc.data); sc.err != nil {
		return
	}
	q, err := s.y.PD.CreateQP(ndk.QPConfig{ReceiveCQ: s.y.RCQ, InitiatorCQ: s.y.ICQ, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1, InlineDataSize: 64})
	if err != nil {
		sc.err = err
		return
	}
	sc.qp = q
	if sc.rb, sc.err = s.y.tryBuffer(slotSize); sc.err != nil {
		return
	}
	if sc.err = q.Receive("recv", sc.rb.sgl(slotSize)); sc.err != nil {
		return
	}
	var once sync.Once
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc.err = c.Accept(ctx, q, 4, 4, s.reply, func() { once.Do(func() { close(sc.disconnected) }) })
}

func (s *server) next(t testing.TB) *serverConn {
	t.Helper()
	select {
	case sc := <-s.conns:
		if sc.err != nil {
			t.Fatalf("server side: %v", sc.err)
		}
		return sc
	case <-time.After(30 * time.Second):
		t.Fatal("no connection accepted within 30s")
		return nil
	}
}

func (s *server) events() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// client connects a new QP of x to dst and completes the connection.
type client struct {
	c            *ndk.Connector
	qp           *ndk.QP
	rb           *buffer
	disconnected chan struct{}
}

func dial(t testing.TB, x *host, dst netip.AddrPort, data []byte) *client {
	t.Helper()
	cl, err := tryDial(t, x, netip.AddrPort{}, dst, data)
	if err != nil {
		t.Fatalf("connect to %v: %v", dst, err)
	}
	return cl
}

func tryDial(t testing.TB, x *host, src, dst netip.AddrPort, data []byte) (*client, error) {
	t.Helper()
	cl := &client{qp: x.qp(), rb: x.buffer(256), disconnected: make(chan struct{})}
	if err := cl.qp.Receive("recv", cl.rb.sgl(256)); err != nil {
		t.Fatal(err)
	}
	var err error
	if cl.c, err = x.Adapter.CreateConnector(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.c.Connect(ctx, cl.qp, src, dst, 4, 4, data); err != nil {
		return cl, err
	}
	var once sync.Once
	if err := cl.c.CompleteConnect(func() { once.Do(func() { close(cl.disconnected) }) }); err != nil {
		return cl, fmt.Errorf("complete connect: %w", err)
	}
	return cl, nil
}

func closed(t testing.TB, what string, ch <-chan struct{}, d time.Duration) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s not within %v", what, d)
	}
}

func notClosed(t testing.TB, what string, ch <-chan struct{}, d time.Duration) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s", what)
	case <-time.After(d):
	}
}
