package cm_test

import (
	"errors"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestListenerClosedWhileConnectionsLive: connections survive their
// listener, new requests are refused, and the port stays taken until the
// last connector closes; only then does the listener's close complete.
func TestListenerClosedWhileConnectionsLive(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	addr := netip.AddrPortFrom(ipB, 8000)
	ls := listen(t, p.b, addr)
	c := p.connect(t, ls, 1, addr)
	closed := false
	if ls.l.Close(func() { closed = true }) {
		t.Fatal("listener close completed with a connector open")
	}
	// New requests are refused at once.
	var r result
	_ = p.a.NewConnector().Connect(cmtest.NewQP(2, 2), p.pathAB(), netip.AddrPort{}, addr, cm.ConnectParams{}, r.done)
	p.clk.RunUntil(r.called, time.Minute)
	if _, err := r.get(); ndkpi.StatusOf(err) != ndkpi.StatusConnectionRefused || ls.count() != 1 {
		t.Fatalf("connect after listener close: %v, %d events", err, ls.count())
	}
	// The port is still taken.
	l2, _ := p.b.NewListener(func(*cm.Connector) {})
	if err := l2.Listen(addr); !errors.Is(err, ndkpi.ErrSharingViolation) {
		t.Fatalf("listen on a port a connector holds: %v", err)
	}
	// The connection still works.
	var d result
	if err := c.active.Disconnect(d.done); err != nil {
		t.Fatal(err)
	}
	p.clk.Drain(time.Minute)
	if k, err := d.get(); k != 1 || err != nil || c.eventB.get() != 1 {
		t.Fatalf("disconnect after listener close: %d %v", k, err)
	}
	if closed {
		t.Fatal("listener close completed early")
	}
	if !c.passive.Close(nil) {
		t.Fatal("connector close pending with no callback running")
	}
	if !closed {
		t.Fatal("listener close did not complete after its last connector closed")
	}
	if err := l2.Listen(addr); err != nil {
		t.Fatalf("listen after everything closed: %v", err)
	}
}

// TestEndpoints checks port 0, sharing and address rules of NDKPI.md §8.
func TestEndpoints(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	seen := map[uint16]bool{}
	for i := 0; i < 50; i++ {
		l, _ := p.b.NewListener(func(*cm.Connector) {})
		if err := l.Listen(netip.AddrPortFrom(ipB, 0)); err != nil {
			t.Fatal(err)
		}
		port := l.LocalAddr().Port()
		if port < cm.EphemeralFirst || seen[port] || l.LocalAddr().Addr() != ipB {
			t.Fatalf("port 0 gave %v", l.LocalAddr())
		}
		seen[port] = true
	}
	mustFail := func(what string, err error, want *ndkpi.Error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want status %#x", what, err, want.Status)
		}
	}
	newL := func() *cm.Listener { l, _ := p.b.NewListener(func(*cm.Connector) {}); return l }
	if err := newL().Listen(netip.AddrPortFrom(ipB, 9000)); err != nil {
		t.Fatal(err)
	}
	mustFail("same address and port", newL().Listen(netip.AddrPortFrom(ipB, 9000)), ndkpi.ErrSharingViolation)
	mustFail("wildcard over a bound port", newL().Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 9000)), ndkpi.ErrSharingViolation)
	if err := newL().Listen(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.3"), 9000)); err != nil {
		t.Fatalf("other address, same port: %v", err)
	}
	if err := newL().Listen(netip.AddrPortFrom(netip.IPv6Unspecified(), 9000)); err != nil {
		t.Fatalf("IPv6 wildcard beside IPv4: %v", err)
	}
	mustFail("multicast", newL().Listen(netip.AddrPortFrom(netip.MustParseAddr("224.0.0.1"), 1)), ndkpi.ErrInvalidAddress)
	mustFail("broadcast", newL().Listen(netip.AddrPortFrom(netip.MustParseAddr("255.255.255.255"), 1)), ndkpi.ErrInvalidAddress)

	// Active side: A listens on 9100, so a connect from that port fails.
	la, _ := p.a.NewListener(func(*cm.Connector) {})
	_ = la.Listen(netip.AddrPortFrom(ipA, 9100))
	nop := func(error) {}
	dst := netip.AddrPortFrom(ipB, 9000)
	mustFail("connect from a listener's port", p.a.NewConnector().Connect(cmtest.NewQP(1, 0), p.pathAB(), netip.AddrPortFrom(ipA, 9100), dst, cm.ConnectParams{}, nop), ndkpi.ErrSharingViolation)
	c1 := p.a.NewConnector()
	if err := c1.Connect(cmtest.NewQP(2, 0), p.pathAB(), netip.AddrPortFrom(ipA, 9200), dst, cm.ConnectParams{}, nop); err != nil {
		t.Fatal(err)
	}
	mustFail("same 4-tuple", p.a.NewConnector().Connect(cmtest.NewQP(3, 0), p.pathAB(), netip.AddrPortFrom(ipA, 9200), dst, cm.ConnectParams{}, nop), ndkpi.ErrAddressAlreadyExists)
	mustFail("same source, other destination", p.a.NewConnector().Connect(cmtest.NewQP(4, 0), p.pathAB(), netip.AddrPortFrom(ipA, 9200), netip.AddrPortFrom(ipB, 9001), cm.ConnectParams{}, nop), ndkpi.ErrSharingViolation)
	mustFail("same QP twice", p.a.NewConnector().Connect(cmtest.NewQP(2, 0), p.pathAB(), netip.AddrPort{}, dst, cm.ConnectParams{}, nop), ndkpi.ErrInvalidParameter)
	mustFail("multicast destination", p.a.NewConnector().Connect(cmtest.NewQP(5, 0), p.link.A.PathTo(ipA, netip.MustParseAddr("224.0.0.9")), netip.AddrPort{}, netip.AddrPortFrom(netip.MustParseAddr("224.0.0.9"), 1), cm.ConnectParams{}, nop), ndkpi.ErrInvalidAddress)
	mustFail("port 0 destination", p.a.NewConnector().Connect(cmtest.NewQP(6, 0), p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 0), cm.ConnectParams{}, nop), ndkpi.ErrInvalidAddress)
	mustFail("oversized private data", p.a.NewConnector().Connect(cmtest.NewQP(7, 0), p.pathAB(), netip.AddrPort{}, dst, cm.ConnectParams{PrivateData: make([]byte, cm.MaxCallerData+1)}, nop), ndkpi.ErrInvalidParameter)
	if err := c1.Connect(cmtest.NewQP(8, 0), p.pathAB(), netip.AddrPort{}, dst, cm.ConnectParams{}, nop); !errors.Is(err, ndkpi.ErrConnectionInvalid) {
		t.Fatalf("connector reuse: %v", err)
	}
	// Closing c1 frees its port.
	c1.Close(nil)
	if err := p.a.NewConnector().Connect(cmtest.NewQP(9, 0), p.pathAB(), netip.AddrPortFrom(ipA, 9200), dst, cm.ConnectParams{}, nop); err != nil {
		t.Fatalf("port after close: %v", err)
	}

	// Shared endpoint: many destinations, each once.
	se, err := p.a.NewSharedEndpoint(netip.AddrPortFrom(ipA, 0))
	if err != nil || se.LocalAddr().Port() < cm.EphemeralFirst {
		t.Fatalf("shared endpoint %v: %v", se.LocalAddr(), err)
	}
	if err := p.a.NewConnector().ConnectWithSharedEndpoint(cmtest.NewQP(10, 0), p.pathAB(), se, dst, cm.ConnectParams{}, nop); err != nil {
		t.Fatal(err)
	}
	if err := p.a.NewConnector().ConnectWithSharedEndpoint(cmtest.NewQP(11, 0), p.pathAB(), se, netip.AddrPortFrom(ipB, 9001), cm.ConnectParams{}, nop); err != nil {
		t.Fatal(err)
	}
	mustFail("shared endpoint, same destination", p.a.NewConnector().ConnectWithSharedEndpoint(cmtest.NewQP(12, 0), p.pathAB(), se, dst, cm.ConnectParams{}, nop), ndkpi.ErrAddressAlreadyExists)
	if _, err := p.a.NewSharedEndpoint(se.LocalAddr()); !errors.Is(err, ndkpi.ErrSharingViolation) {
		t.Fatalf("second shared endpoint on the same port: %v", err)
	}

	// IsLocalAddr guards every local address.
	m, _ := cm.New(cm.Config{Transport: p.link.A, CAGUID: 1, IsLocalAddr: func(a netip.Addr) bool { return a == ipA }})
	defer m.Close()
	l, _ := m.NewListener(func(*cm.Connector) {})
	mustFail("listen on a foreign address", l.Listen(netip.AddrPortFrom(ipB, 1)), ndkpi.ErrInvalidAddress)
	if _, err := m.NewSharedEndpoint(netip.AddrPortFrom(ipB, 1)); !errors.Is(err, ndkpi.ErrInvalidAddress) {
		t.Fatalf("shared endpoint on a foreign address: %v", err)
	}
}

// TestIPv6 connects over IPv6: GIDs are the addresses themselves and the
// rdma_cm header says IP version 6.
func TestIPv6(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	ls := listen(t, p.b, netip.AddrPortFrom(netip.IPv6Unspecified(), 7174))
	c := p.connect(t, ls, 1, netip.AddrPortFrom(ip6B, 7174))
	if c.passive.PeerAddr().Addr() != ip6A || c.passive.LocalAddr() != netip.AddrPortFrom(ip6B, 7174) {
		t.Fatalf("addresses %v %v", c.passive.LocalAddr(), c.passive.PeerAddr())
	}
	var pkt rocev2.Packet
	_, _, mad, err := cm.ParseGSI(p.link.A.Frames()[0], &pkt)
	if err != nil || !pkt.IP.Dst.Is6() {
		t.Fatalf("first frame: %v, IP %v", err, pkt.IP.Dst)
	}
	d, _ := rocev2.DecodeMAD(mad)
	req := d.Message.(*rocev2.CMReq)
	h, err := rocev2.DecodeCMAHeader(req.PrivateData[:])
	if err != nil || h.Src != ip6A || h.Dst != ip6B || req.PrivateData[1] != 0x60 {
		t.Fatalf("cma header %+v %v (version byte %#x)", h, err, req.PrivateData[1])
	}
	if req.Primary.LocalGID != rocev2.GIDFromAddr(ip6A) || req.Primary.RemoteGID.Addr() != ip6B {
		t.Fatalf("GIDs %v %v", req.Primary.LocalGID, req.Primary.RemoteGID)
	}
	var dd result
	_ = c.active.Disconnect(dd.done)
	p.clk.Drain(time.Minute)
	if _, err := dd.get(); err != nil || c.eventB.get() != 1 {
		t.Fatalf("IPv6 disconnect %v", err)
	}
}

// TestStaleConnection: a REQ from a QP the passive side still holds a
// connection with, under a new communication ID, is refused with REJ 10
// and ends the old connection.
func TestStaleConnection(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	addr := netip.AddrPortFrom(ipB, 8100)
	ls := listen(t, p.b, addr)
	old := p.connect(t, ls, 77, addr)
	// The active host restarts: a new Manager with the same GUID reuses QPN 77.
	a2, err := cm.New(cm.Config{Transport: p.link.A, Clock: p.clk, CAGUID: p.link.A.GUID(), Seed: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	p.link.A.Attach(a2)
	var r result
	if err := a2.NewConnector().Connect(cmtest.NewQP(77, 5), p.pathAB(), netip.AddrPort{}, addr, cm.ConnectParams{}, r.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(r.called, time.Minute)
	_, err = r.get()
	if reason, _, _ := rejectReason(err); ndkpi.StatusOf(err) != ndkpi.StatusConnectionRefused || reason != rocev2.RejStaleConn {
		t.Fatalf("stale REQ: %v", err)
	}
	if ls.count() != 1 || old.eventB.get() != 1 || old.qpB.State() != "error" || p.link.B.Sent(rocev2.AttrDREQ) == 0 {
		t.Fatalf("old connection: %d events, event %d, QP %s, %d DREQs", ls.count(), old.eventB.get(), old.qpB.State(), p.link.B.Sent(rocev2.AttrDREQ))
	}
}

// TestCloseCancels: closing a connector cancels what it has pending,
// tells the peer, and a close from inside a callback completes when the
// callback returns.
func TestCloseCancels(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	addr := netip.AddrPortFrom(ipB, 8200)
	ls := listen(t, p.b, addr)
	active := p.a.NewConnector()
	var r result
	_ = active.Connect(cmtest.NewQP(1, 1), p.pathAB(), netip.AddrPort{}, addr, cm.ConnectParams{}, r.done)
	p.clk.RunUntil(func() bool { return ls.count() == 1 }, time.Minute)
	if !active.Close(nil) {
		t.Fatal("close pending")
	}
	if _, err := r.get(); !errors.Is(err, ndkpi.ErrCancelled) {
		t.Fatalf("pending connect after close: %v", err)
	}
	p.clk.Drain(time.Minute)
	err := ls.conn(0).Accept(cmtest.NewQP(2, 2), cm.AcceptParams{}, nil, func(error) {})
	if ndkpi.StatusOf(err) != ndkpi.StatusConnectionAborted {
		t.Fatalf("accept after the peer gave up: %v", err)
	}

	// Close from the Connect completion.
	closeDone := 0
	var inner *cm.Connector
	var pending bool
	inner = p.a.NewConnector()
	ls.onConnect = func(c *cm.Connector) { _ = c.Accept(cmtest.NewQP(4, 4), cm.AcceptParams{}, nil, func(error) {}) }
	_ = inner.Connect(cmtest.NewQP(3, 3), p.pathAB(), netip.AddrPort{}, addr, cm.ConnectParams{}, func(error) {
		pending = !inner.Close(func() { closeDone++ })
		if closeDone != 0 {
			t.Error("close completed inside the callback")
		}
	})
	p.clk.Drain(time.Minute)
	if !pending || closeDone != 1 {
		t.Fatalf("close from callback: pending %v, done %d", pending, closeDone)
	}
}

// TestManyConnections forms and tears down 1,000 connections, on the fake
// clock and on the system clock, and checks that no goroutine is left.
func TestManyConnections(t *testing.T) {
	const n = 1000
	run := func(t *testing.T, clk cm.Clock, step func(cond func() bool) bool) {
		before := runtime.NumGoroutine()
		link := cmtest.NewLink(clk, cmtest.Faults{})
		// Every REQ may arrive before the first Accept: room for all.
		params := cm.DefaultParams()
		params.ListenBacklog = n
		a, _ := cm.New(cm.Config{Transport: link.A, Clock: clk, CAGUID: link.A.GUID(), Params: params})
		b, _ := cm.New(cm.Config{Transport: link.B, Clock: clk, CAGUID: link.B.GUID(), Params: params})
		link.A.Attach(a)
		link.B.Attach(b)
		addr := netip.AddrPortFrom(ipB, 18515)
		var accepted, connected, disconnected, events counter
		var qpns atomic.Uint32
		l, _ := b.NewListener(func(c *cm.Connector) {
			qp := cmtest.NewQP(100000+qpns.Add(1), 0)
			if err := c.Accept(qp, cm.AcceptParams{}, events.inc, func(err error) {
				if err != nil {
					t.Errorf("accept: %v", err)
				}
				accepted.inc()
			}); err != nil {
				t.Errorf("accept: %v", err)
			}
		})
		if err := l.Listen(addr); err != nil {
			t.Fatal(err)
		}
		conns := make([]*cm.Connector, n)
		for i := range conns {
			c := a.NewConnector()
			conns[i] = c
			qp := cmtest.NewQP(uint32(i+1), rocev2.PSN(i))
			if err := c.Connect(qp, link.A.PathTo(ipA, ipB), netip.AddrPort{}, addr, cm.ConnectParams{}, func(err error) {
				if err == nil {
					err = c.CompleteConnect(nil)
				}
				if err != nil {
					t.Errorf("connect: %v", err)
				}
				connected.inc()
			}); err != nil {
				t.Fatal(err)
			}
		}
		if !step(func() bool { return accepted.get() == n && connected.get() == n }) {
			t.Fatalf("%d connected, %d accepted of %d", connected.get(), accepted.get(), n)
		}
		for _, c := range conns {
			if err := c.Disconnect(func(err error) {
				if err == nil {
					disconnected.inc()
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		if !step(func() bool { return disconnected.get() == n && events.get() == n }) {
			t.Fatalf("%d disconnected, %d events of %d", disconnected.get(), events.get(), n)
		}
		for _, c := range conns {
			c.Close(nil)
		}
		l.Close(nil)
		a.Close()
		b.Close()
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if g := runtime.NumGoroutine(); g > before {
			t.Fatalf("%d goroutines after, %d before", g, before)
		}
	}
	t.Run("fake clock", func(t *testing.T) {
		clk := cmtest.NewClock()
		run(t, clk, func(cond func() bool) bool { return clk.RunUntil(cond, time.Minute) })
	})
	t.Run("system clock", func(t *testing.T) {
		run(t, cm.SystemClock{}, func(cond func() bool) bool {
			deadline := time.Now().Add(30 * time.Second)
			for !cond() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			return cond()
		})
	})
}

// TestBacklog: requests beyond the listener's backlog are refused until the
// consumer decides on the ones it holds.
func TestBacklog(t *testing.T) {
	params := cm.DefaultParams()
	params.ListenBacklog = 2
	p := newPair(t, cmtest.Faults{}, params)
	addr := netip.AddrPortFrom(ipB, 8300)
	ls := listen(t, p.b, addr)
	try := func(qpn uint32) error {
		var r result
		_ = p.a.NewConnector().Connect(cmtest.NewQP(qpn, 0), p.pathAB(), netip.AddrPort{}, addr, cm.ConnectParams{}, r.done)
		p.clk.RunUntil(func() bool { return r.called() || ls.count() >= int(qpn) }, time.Minute)
		_, err := r.get()
		return err
	}
	_ = try(1)
	_ = try(2)
	if err := try(3); ndkpi.StatusOf(err) != ndkpi.StatusConnectionRefused || ls.count() != 2 {
		t.Fatalf("third request with backlog 2: %v, %d events", err, ls.count())
	}
	_ = ls.conn(0).Reject(nil)
	var r result
	_ = p.a.NewConnector().Connect(cmtest.NewQP(4, 0), p.pathAB(), netip.AddrPort{}, addr, cm.ConnectParams{}, r.done)
	p.clk.RunUntil(func() bool { return ls.count() == 3 }, time.Minute)
	if ls.count() != 3 {
		t.Fatalf("request after a reject freed the backlog: %d events", ls.count())
	}
}

// TestNewConnectionFromQPInTimeWait: once a connection ended, a REQ from
// the same peer QP under a new communication ID starts a new connection
// while the old one is still in time-wait, as Linux's CM forgets the QP
// of a connection entering time-wait (cm_cleanup_timewait): cmtime's
// rounds reuse their QPNs so.
func TestNewConnectionFromQPInTimeWait(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	addr := netip.AddrPortFrom(ipB, 8101)
	ls := listen(t, p.b, addr)
	old := p.connect(t, ls, 78, addr)
	var dd result
	_ = old.active.Disconnect(dd.done)
	p.clk.RunUntil(dd.called, time.Minute)
	if _, err := dd.get(); err != nil || old.eventB.get() != 1 {
		t.Fatalf("disconnect: %v", err)
	}
	a2, err := cm.New(cm.Config{Transport: p.link.A, Clock: p.clk, CAGUID: p.link.A.GUID(), Seed: 98})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	p.link.A.Attach(a2)
	var r result
	if err := a2.NewConnector().Connect(cmtest.NewQP(78, 5), p.pathAB(), netip.AddrPort{}, addr, cm.ConnectParams{}, r.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(r.called, time.Minute)
	if _, err := r.get(); err != nil {
		t.Fatalf("a new REQ from the QP of a connection in time-wait: %v", err)
	}
	if ls.count() != 2 || p.link.B.Sent(rocev2.AttrREJ) != 0 {
		t.Fatalf("listener took %d connections, B sent %d REJs; want 2 and none", ls.count(), p.link.B.Sent(rocev2.AttrREJ))
	}
}
