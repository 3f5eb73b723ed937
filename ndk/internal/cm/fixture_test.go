package cm_test

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

var (
	ipA  = netip.MustParseAddr("198.18.0.1")
	ipB  = netip.MustParseAddr("198.18.0.2")
	ip6A = netip.MustParseAddr("2001:2::1")
	ip6B = netip.MustParseAddr("2001:2::2")
)

// pair is two Managers joined by an in-memory link on a fake clock.
type pair struct {
	t    *testing.T
	clk  *cmtest.Clock
	link *cmtest.Link
	a, b *cm.Manager
}

func newPair(t *testing.T, f cmtest.Faults, p cm.Params) *pair {
	t.Helper()
	clk := cmtest.NewClock()
	link := cmtest.NewLink(clk, f)
	return newPairOn(t, clk, link, p)
}

func newPairOn(t *testing.T, clk *cmtest.Clock, link *cmtest.Link, p cm.Params) *pair {
	t.Helper()
	a, err := cm.New(cm.Config{Transport: link.A, Clock: clk, CAGUID: link.A.GUID(), Params: p, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cm.New(cm.Config{Transport: link.B, Clock: clk, CAGUID: link.B.GUID(), Params: p, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	link.A.Attach(a)
	link.B.Attach(b)
	t.Cleanup(func() { a.Close(); b.Close() })
	return &pair{t: t, clk: clk, link: link, a: a, b: b}
}

func (p *pair) pathAB() cm.PathInfo { return p.link.A.PathTo(ipA, ipB) }
func (p *pair) pathBA() cm.PathInfo { return p.link.B.PathTo(ipB, ipA) }

// result records a completion: how often it was called and with what.
type result struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (r *result) done(err error) {
	r.mu.Lock()
	r.calls++
	r.err = err
	r.mu.Unlock()
}

func (r *result) get() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.err
}

func (r *result) called() bool { n, _ := r.get(); return n > 0 }

// counter counts event callbacks.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) inc() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// listener collects the connectors a listener hands over.
type listener struct {
	mu    sync.Mutex
	l     *cm.Listener
	conns []*cm.Connector
	// onConnect, when set, runs inside the callback.
	onConnect func(*cm.Connector)
}

func listen(t *testing.T, m *cm.Manager, addr netip.AddrPort) *listener {
	t.Helper()
	ls := &listener{}
	l, err := m.NewListener(func(c *cm.Connector) {
		ls.mu.Lock()
		ls.conns = append(ls.conns, c)
		f := ls.onConnect
		ls.mu.Unlock()
		if f != nil {
			f(c)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(addr); err != nil {
		t.Fatalf("listen %v: %v", addr, err)
	}
	ls.l = l
	return ls
}

func (ls *listener) count() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.conns)
}

func (ls *listener) conn(i int) *cm.Connector {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if i >= len(ls.conns) {
		return nil
	}
	return ls.conns[i]
}

// conn is one connection's two sides and their completions.
type conn struct {
	active, passive     *cm.Connector
	qpA, qpB            *cmtest.QP
	connected, accepted result
	eventA, eventB      counter
}

// connect runs a whole connection setup: Connect, Accept in the connect
// callback, CompleteConnect when Connect completes.
func (p *pair) connect(t *testing.T, ls *listener, qpn uint32, dst netip.AddrPort) *conn {
	t.Helper()
	c := &conn{qpA: cmtest.NewQP(qpn, rocev2.PSN(qpn*7)), qpB: cmtest.NewQP(qpn+50000, rocev2.PSN(qpn*11))}
	before := ls.count()
	c.active = p.a.NewConnector()
	if err := c.active.Connect(c.qpA, p.link.A.PathTo(ipFor(dst.Addr(), true), dst.Addr()), netip.AddrPort{}, dst,
		cm.ConnectParams{InboundReadLimit: 4, OutboundReadLimit: 4}, c.connected.done); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if !p.clk.RunUntil(func() bool { return ls.count() > before }, time.Minute) {
		t.Fatalf("no connect event")
	}
	c.passive = ls.conn(before)
	if err := c.passive.Accept(c.qpB, cm.AcceptParams{InboundReadLimit: 4, OutboundReadLimit: 4}, c.eventB.inc, c.accepted.done); err != nil {
		t.Fatalf("accept: %v", err)
	}
	if !p.clk.RunUntil(c.connected.called, time.Minute) {
		t.Fatalf("connect did not complete")
	}
	if _, err := c.connected.get(); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if err := c.active.CompleteConnect(c.eventA.inc); err != nil {
		t.Fatalf("complete connect: %v", err)
	}
	if !p.clk.RunUntil(c.accepted.called, time.Minute) {
		t.Fatalf("accept did not complete")
	}
	if _, err := c.accepted.get(); err != nil {
		t.Fatalf("accept: %v", err)
	}
	return c
}

func ipFor(dst netip.Addr, a bool) netip.Addr {
	switch {
	case dst.Is4() && a:
		return ipA
	case dst.Is4():
		return ipB
	case a:
		return ip6A
	}
	return ip6B
}

func wantStatus(t *testing.T, what string, err error, status ndkpi.Status) {
	t.Helper()
	if got := ndkpi.StatusOf(err); got != status {
		t.Fatalf("%s: status %#x, want %#x (err %v)", what, got, status, err)
	}
}

func rejectReason(err error) (rocev2.RejectReason, []byte, bool) {
	var re *cm.RejectError
	if !errors.As(err, &re) {
		return 0, nil, false
	}
	return re.Reason, re.PrivateData, true
}
