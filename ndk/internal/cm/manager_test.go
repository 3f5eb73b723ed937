package cm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestConnectAcceptRTU walks one connection through REQ, REP and RTU and
// checks what each side and each QP learns.
func TestConnectAcceptRTU(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	ls := listen(t, p.b, netip.AddrPortFrom(ipB, 7174))

	qpA, qpB := cmtest.NewQP(0x11, 0x123456), cmtest.NewQP(0x2c, 0xABCDEF)
	active := p.a.NewConnector()
	var connected, accepted result
	var evA, evB counter
	hello := []byte("hello from the active side")
	if err := active.Connect(qpA, p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 7174),
		cm.ConnectParams{InboundReadLimit: 2, OutboundReadLimit: 3, PrivateData: hello}, connected.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(func() bool { return ls.count() == 1 }, time.Minute)
	passive := ls.conn(0)
	if passive == nil {
		t.Fatal("no connect event")
	}
	d, err := passive.ConnectionData()
	if err != nil {
		t.Fatal(err)
	}
	// Before Accept the limits are the peer's, seen from the passive side.
	if d.InboundReadLimit != 3 || d.OutboundReadLimit != 2 || len(d.PrivateData) != cm.MaxCallerData || !bytes.HasPrefix(d.PrivateData, hello) {
		t.Fatalf("passive connection data %+v", d)
	}
	la := active.LocalAddr()
	if la.Addr() != ipA || la.Port() < cm.EphemeralFirst {
		t.Fatalf("active local address %v", la)
	}
	if passive.PeerAddr() != la || passive.LocalAddr() != netip.AddrPortFrom(ipB, 7174) || active.PeerAddr() != passive.LocalAddr() {
		t.Fatalf("addresses: active %v->%v passive %v<-%v", active.LocalAddr(), active.PeerAddr(), passive.LocalAddr(), passive.PeerAddr())
	}
	world := []byte("hello from the passive side")
	if err := passive.Accept(qpB, cm.AcceptParams{InboundReadLimit: 1, OutboundReadLimit: 8, PrivateData: world}, evB.inc, accepted.done); err != nil {
		t.Fatal(err)
	}
	// The passive QP is at RTS before the REP leaves (cma_accept_ib).
	if h := qpB.History(); len(h) != 2 || h[0] != "rtr" || h[1] != "rts" {
		t.Fatalf("passive QP transitions %v", h)
	}
	p.clk.RunUntil(connected.called, time.Minute)
	if n, err := connected.get(); n != 1 || err != nil {
		t.Fatalf("connect completed %d times: %v", n, err)
	}
	if accepted.called() {
		t.Fatal("accept completed before CompleteConnect")
	}
	d, err = active.ConnectionData()
	if err != nil {
		t.Fatal(err)
	}
	// Effective limits: the passive grants min(1, 3) inbound and min(8, 2)
	// outbound; the active side sees them mirrored.
	if d.InboundReadLimit != 2 || d.OutboundReadLimit != 1 || len(d.PrivateData) != cm.MaxCalleeData || !bytes.HasPrefix(d.PrivateData, world) {
		t.Fatalf("active connection data %+v", d)
	}
	if err := active.CompleteConnect(evA.inc); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(accepted.called, time.Minute)
	if n, err := accepted.get(); n != 1 || err != nil {
		t.Fatalf("accept completed %d times: %v", n, err)
	}
	d, _ = passive.ConnectionData()
	if d.InboundReadLimit != 1 || d.OutboundReadLimit != 2 {
		t.Fatalf("passive effective limits %+v", d)
	}

	ra, rb := qpA.Remote(), qpB.Remote()
	fl := rocev2.CMAFlowLabel(la.Port(), 7174)
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"A remote QPN", uint64(ra.QPN), 0x2c},
		{"A expected PSN", uint64(ra.PSN), 0xABCDEF},
		{"B remote QPN", uint64(rb.QPN), 0x11},
		{"B expected PSN", uint64(rb.PSN), 0x123456},
		{"A path MTU", uint64(ra.PathMTU), uint64(rocev2.MTU1024)},
		{"B path MTU", uint64(rb.PathMTU), uint64(rocev2.MTU1024)},
		{"A inbound", uint64(ra.InboundReadLimit), 2},
		{"A outbound", uint64(ra.OutboundReadLimit), 1},
		{"B inbound", uint64(rb.InboundReadLimit), 1},
		{"B outbound", uint64(rb.OutboundReadLimit), 2},
		{"A retry", uint64(ra.RetryCount), 7},
		{"A RNR retry", uint64(ra.RNRRetry), 7},
		{"B retry", uint64(rb.RetryCount), 7},
		{"B RNR retry", uint64(rb.RNRRetry), 7},
		{"A ack timeout", uint64(ra.AckTimeout), 17},
		{"B ack timeout", uint64(rb.AckTimeout), 17},
		{"A flow label", uint64(ra.FlowLabel), uint64(fl)},
		{"B flow label", uint64(rb.FlowLabel), uint64(fl)},
		{"A UDP sport", uint64(ra.UDPSourcePort), uint64(rocev2.UDPSourcePort(fl, 0x11, 0x2c))},
		{"B UDP sport", uint64(rb.UDPSourcePort), uint64(rocev2.UDPSourcePort(fl, 0x2c, 0x11))},
		{"REQs", uint64(p.link.A.Sent(rocev2.AttrREQ)), 1},
		{"REPs", uint64(p.link.B.Sent(rocev2.AttrREP)), 1},
		{"RTUs", uint64(p.link.A.Sent(rocev2.AttrRTU)), 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if ra.Path.RemoteMAC != p.link.B.MAC || rb.Path.RemoteMAC != p.link.A.MAC || rb.Path.RemoteIP != ipA {
		t.Errorf("paths: A %+v B %+v", ra.Path, rb.Path)
	}
	if d := ra.AckTimeoutDuration(); d != 4096*(1<<17)*time.Nanosecond {
		t.Errorf("ack timeout duration %v", d)
	}
	if qpA.State() != "rts" || qpB.State() != "rts" {
		t.Errorf("QP states %s %s", qpA.State(), qpB.State())
	}
	if evA.get()+evB.get() != 0 {
		t.Error("disconnect event without a disconnect")
	}
}

// TestConnectTimeout: REQs that are never answered end in IO_TIMEOUT after
// exactly 1 + MaxCMRetries REQs, spaced as Linux spaces them.
func TestConnectTimeout(t *testing.T) {
	for _, retries := range []uint8{15, 3, 0} {
		params := cm.DefaultParams()
		params.MaxCMRetries = retries
		p := newPair(t, cmtest.Faults{DropIf: func(from string, a rocev2.AttributeID, _ int) bool { return from == "A" }}, params)
		var connected result
		start := p.clk.Now()
		if err := p.a.NewConnector().Connect(cmtest.NewQP(5, 1), p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 9), cm.ConnectParams{}, connected.done); err != nil {
			t.Fatal(err)
		}
		p.clk.RunUntil(connected.called, 10*time.Minute)
		n, err := connected.get()
		if n != 1 {
			t.Fatalf("retries %d: connect completed %d times", retries, n)
		}
		wantStatus(t, "connect", err, ndkpi.StatusIOTimeout)
		if !errors.Is(err, ndkpi.ErrIOTimeout) {
			t.Errorf("errors.Is(%v, ErrIOTimeout) is false", err)
		}
		if got := p.link.A.Sent(rocev2.AttrREQ); got != 1+int(retries) {
			t.Errorf("retries %d: %d REQs sent, want %d", retries, got, 1+int(retries))
		}
		// cm.c: 2 × 2^(16-8) ms + 2^(20-8) ms between REQs.
		per := 2*256*time.Millisecond + 4096*time.Millisecond
		if el := p.clk.Now().Sub(start); el != time.Duration(1+int(retries))*per {
			t.Errorf("retries %d: gave up after %v, want %v", retries, el, time.Duration(1+int(retries))*per)
		}
		if got := p.a.Stats().Retransmits; got != uint64(retries) {
			t.Errorf("stats: %d retransmits", got)
		}
	}
}

// TestNoListener: a port nobody listens on, or a paused listener, gives
// REJ 8 and CONNECTION_REFUSED; resuming lets the next connect through.
func TestNoListener(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	try := func(port uint16) error {
		var r result
		if err := p.a.NewConnector().Connect(cmtest.NewQP(uint32(port), 1), p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, port), cm.ConnectParams{}, r.done); err != nil {
			t.Fatal(err)
		}
		p.clk.RunUntil(r.called, time.Minute)
		_, err := r.get()
		return err
	}
	err := try(4000)
	wantStatus(t, "connect to nobody", err, ndkpi.StatusConnectionRefused)
	if reason, _, ok := rejectReason(err); !ok || reason != rocev2.RejInvalidServiceID {
		t.Fatalf("reject reason %v (%v)", reason, ok)
	}
	if p.link.A.Sent(rocev2.AttrREQ) != 1 {
		t.Errorf("REQ resent after REJ")
	}

	ls := listen(t, p.b, netip.AddrPortFrom(ipB, 4001))
	ls.l.ControlConnectEvents(true)
	err = try(4001)
	if reason, _, _ := rejectReason(err); reason != rocev2.RejInvalidServiceID || ls.count() != 0 {
		t.Fatalf("paused listener: %v, %d events", err, ls.count())
	}
	ls.l.ControlConnectEvents(false)
	ls.onConnect = func(c *cm.Connector) { _ = c.Reject([]byte("go away")) }
	err = try(4001)
	if reason, pd, _ := rejectReason(err); reason != rocev2.RejConsumerDefined || !bytes.HasPrefix(pd, []byte("go away")) || ls.count() != 1 {
		t.Fatalf("resumed listener: %v, %d events", err, ls.count())
	}
	// A listener on another address of the same port is not a listener
	// for this one: rdma_cm answers with a consumer-defined REJ.
	ls2 := listen(t, p.b, netip.AddrPortFrom(netip.MustParseAddr("198.18.0.3"), 4002))
	err = try(4002)
	if reason, _, _ := rejectReason(err); reason != rocev2.RejConsumerDefined || ls2.count() != 0 {
		t.Fatalf("address mismatch: %v", err)
	}
}

// TestRejectBothWays: the passive side rejects a request, and the active
// side rejects an accepted connection; private data crosses both times.
func TestRejectBothWays(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	ls := listen(t, p.b, netip.AddrPortFrom(ipB, 5000))
	pd := bytes.Repeat([]byte{0xA5}, cm.MaxRejectData)

	// Passive rejects.
	ls.onConnect = func(c *cm.Connector) {
		if err := c.Reject(pd); err != nil {
			t.Errorf("reject: %v", err)
		}
		if err := c.Reject(nil); err == nil {
			t.Error("second reject succeeded")
		}
	}
	active := p.a.NewConnector()
	var r result
	if err := active.Connect(cmtest.NewQP(1, 1), p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 5000), cm.ConnectParams{}, r.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(r.called, time.Minute)
	_, err := r.get()
	wantStatus(t, "connect", err, ndkpi.StatusConnectionRefused)
	if reason, got, _ := rejectReason(err); reason != rocev2.RejConsumerDefined || !bytes.Equal(got, pd) {
		t.Fatalf("REJ reason %v data %x", reason, got)
	}
	if d, err := active.ConnectionData(); err != nil || !bytes.Equal(d.PrivateData, pd) {
		t.Fatalf("connection data after reject: %v %x", err, d.PrivateData)
	}
	if err := p.b.NewConnector().Reject(make([]byte, cm.MaxRejectData+1)); !errors.Is(err, ndkpi.ErrInvalidParameter) {
		t.Fatalf("oversized reject data: %v", err)
	}

	// Active rejects after Connect completed.
	ls.onConnect = nil
	qpB := cmtest.NewQP(2, 2)
	qpA := cmtest.NewQP(3, 3)
	active = p.a.NewConnector()
	var connected, accepted result
	if err := active.Connect(qpA, p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 5000), cm.ConnectParams{}, connected.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(func() bool { return ls.count() == 2 }, time.Minute)
	if err := ls.conn(1).Accept(qpB, cm.AcceptParams{}, nil, accepted.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(connected.called, time.Minute)
	if err := active.Reject([]byte("changed my mind")); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(accepted.called, time.Minute)
	_, err = accepted.get()
	wantStatus(t, "accept", err, ndkpi.StatusConnectionAborted)
	if reason, got, _ := rejectReason(err); reason != rocev2.RejConsumerDefined || !bytes.HasPrefix(got, []byte("changed my mind")) {
		t.Fatalf("passive saw reason %v data %q", reason, got)
	}
	if qpA.State() != "error" || qpB.State() != "error" {
		t.Fatalf("QPs after reject: %s %s", qpA.State(), qpB.State())
	}
	if err := active.CompleteConnect(nil); err == nil {
		t.Fatal("CompleteConnect after Reject succeeded")
	}
}

// TestAcceptTimeoutAndImplicitRTU: without RTU the REP is resent
// 1 + MaxCMRetries times and Accept ends in IO_TIMEOUT; the first packet
// on the QP (CommEstablished) stands in for a lost RTU.
func TestAcceptTimeoutAndImplicitRTU(t *testing.T) {
	dropRTU := cmtest.Faults{DropIf: func(_ string, a rocev2.AttributeID, _ int) bool { return a == rocev2.AttrRTU }}
	p := newPair(t, dropRTU, cm.Params{})
	ls := listen(t, p.b, netip.AddrPortFrom(ipB, 6000))
	c := &conn{qpA: cmtest.NewQP(7, 7), qpB: cmtest.NewQP(8, 8)}
	c.active = p.a.NewConnector()
	if err := c.active.Connect(c.qpA, p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 6000), cm.ConnectParams{}, c.connected.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(func() bool { return ls.count() == 1 }, time.Minute)
	if err := ls.conn(0).Accept(c.qpB, cm.AcceptParams{}, c.eventB.inc, c.accepted.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(c.connected.called, time.Minute)
	if err := c.active.CompleteConnect(c.eventA.inc); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(c.accepted.called, 10*time.Minute)
	_, err := c.accepted.get()
	wantStatus(t, "accept without RTU", err, ndkpi.StatusIOTimeout)
	if n := p.link.B.Sent(rocev2.AttrREP); n != 16 {
		t.Errorf("%d REPs, want 1 + 15", n)
	}
	// The passive side's REJ (timeout) aborts the active side, once.
	p.clk.Drain(time.Minute)
	if c.eventA.get() != 1 || c.qpA.State() != "error" || c.qpB.State() != "error" {
		t.Errorf("after accept timeout: %d active events, QPs %s %s", c.eventA.get(), c.qpA.State(), c.qpB.State())
	}

	// Same again, but data arrives on the passive QP.
	c2 := &conn{qpA: cmtest.NewQP(17, 7), qpB: cmtest.NewQP(18, 8)}
	c2.active = p.a.NewConnector()
	if err := c2.active.Connect(c2.qpA, p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 6000), cm.ConnectParams{}, c2.connected.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(func() bool { return ls.count() == 2 }, time.Minute)
	if err := ls.conn(1).Accept(c2.qpB, cm.AcceptParams{}, nil, c2.accepted.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(c2.connected.called, time.Minute)
	if err := c2.active.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	p.clk.Advance(time.Second)
	if c2.accepted.called() {
		t.Fatal("accept completed with every RTU dropped")
	}
	p.b.CommEstablished(18)
	if n, err := c2.accepted.get(); n != 1 || err != nil {
		t.Fatalf("implicit RTU: accept %d, %v", n, err)
	}
	p.b.CommEstablished(18) // a second packet changes nothing
	if n, _ := c2.accepted.get(); n != 1 {
		t.Fatal("accept completed twice")
	}
}

// TestDuplicatesAnsweredNotExecuted duplicates every MAD: each connection
// still forms once; REQ duplicates are answered with the REP, REP
// duplicates with the RTU, DREQ duplicates with the DREP.
func TestDuplicatesAnsweredNotExecuted(t *testing.T) {
	p := newPair(t, cmtest.Faults{Duplicate: 1, Seed: 3}, cm.Params{})
	ls := listen(t, p.b, netip.AddrPortFrom(ipB, 7000))
	c := p.connect(t, ls, 100, netip.AddrPortFrom(ipB, 7000))
	p.clk.Drain(time.Minute)
	if ls.count() != 1 {
		t.Fatalf("%d connect events for one connection", ls.count())
	}
	if n, _ := c.connected.get(); n != 1 {
		t.Fatalf("connect completed %d times", n)
	}
	if n, _ := c.accepted.get(); n != 1 {
		t.Fatalf("accept completed %d times", n)
	}
	// One REQ, two copies: the copy finds REP_SENT and gets the REP again.
	if a, b := p.link.A.Sent(rocev2.AttrREQ), p.link.B.Sent(rocev2.AttrREP); a != 1 || b != 2 {
		t.Errorf("REQ %d, REP %d; want 1 and 2", a, b)
	}
	if h := c.qpB.History(); len(h) != 2 {
		t.Errorf("passive QP transitions %v: the duplicate was executed", h)
	}
	var done result
	if err := c.active.Disconnect(done.done); err != nil {
		t.Fatal(err)
	}
	p.clk.Drain(time.Minute)
	if n, err := done.get(); n != 1 || err != nil {
		t.Fatalf("disconnect %d, %v", n, err)
	}
	if c.eventB.get() != 1 || c.eventA.get() != 0 {
		t.Fatalf("events: active %d passive %d", c.eventA.get(), c.eventB.get())
	}
	if got := p.link.B.Sent(rocev2.AttrDREP); got != 2 {
		t.Errorf("%d DREPs for two DREQ copies", got)
	}
	if p.b.Stats().Duplicates == 0 || p.a.Stats().Duplicates == 0 {
		t.Errorf("duplicates not counted: %+v / %+v", p.a.Stats(), p.b.Stats())
	}
}

// TestMRA: a request the consumer sits on is answered with MRA when the
// REQ is repeated, and the active side then waits the MRA's service time
// instead of resending.
func TestMRA(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	ls := listen(t, p.b, netip.AddrPortFrom(ipB, 7100))
	var connected result
	active := p.a.NewConnector()
	if err := active.Connect(cmtest.NewQP(1, 1), p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 7100), cm.ConnectParams{}, connected.done); err != nil {
		t.Fatal(err)
	}
	p.clk.Advance(5 * time.Second) // one REQ timeout: the REQ goes again
	if p.link.A.Sent(rocev2.AttrREQ) != 2 || p.link.B.Sent(rocev2.AttrMRA) != 1 || ls.count() != 1 {
		t.Fatalf("REQ %d MRA %d events %d", p.link.A.Sent(rocev2.AttrREQ), p.link.B.Sent(rocev2.AttrMRA), ls.count())
	}
	p.clk.Advance(60 * time.Second) // below 2^(24-8) + 2^(17-8) ms
	if n := p.link.A.Sent(rocev2.AttrREQ); n != 2 {
		t.Fatalf("REQ resent during the MRA's service time: %d", n)
	}
	var accepted result
	if err := ls.conn(0).Accept(cmtest.NewQP(2, 2), cm.AcceptParams{}, nil, accepted.done); err != nil {
		t.Fatal(err)
	}
	p.clk.RunUntil(connected.called, time.Minute)
	if _, err := connected.get(); err != nil {
		t.Fatal(err)
	}
}

// TestExactlyOnceUnderFaults forms and tears down connections over a link
// that drops, duplicates and reorders MADs, for several seeds.
func TestExactlyOnceUnderFaults(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		p := newPair(t, cmtest.Faults{Drop: 0.3, Duplicate: 0.3, Delay: time.Millisecond, Jitter: 300 * time.Millisecond, Seed: seed}, cm.Params{})
		ls := listen(t, p.b, netip.AddrPortFrom(ipB, 7200))
		const n = 10
		conns := make([]*conn, n)
		accepts := map[*cm.Connector]*conn{}
		for i := range conns {
			c := &conn{qpA: cmtest.NewQP(uint32(1000+i), rocev2.PSN(i)), qpB: cmtest.NewQP(uint32(2000+i), rocev2.PSN(i))}
			c.active = p.a.NewConnector()
			if err := c.active.Connect(c.qpA, p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 7200), cm.ConnectParams{}, c.connected.done); err != nil {
				t.Fatal(err)
			}
			conns[i] = c
		}
		// Accept whatever arrives, complete whatever connected.
		handled := 0
		completed := map[*conn]bool{}
		all := func() bool {
			for handled < ls.count() {
				pc := ls.conn(handled)
				c := &conn{qpB: cmtest.NewQP(uint32(3000+handled), 0)}
				accepts[pc] = c
				if err := pc.Accept(c.qpB, cm.AcceptParams{}, c.eventB.inc, c.accepted.done); err != nil {
					t.Fatalf("seed %d: accept: %v", seed, err)
				}
				handled++
			}
			done := true
			for _, c := range conns {
				if c.connected.called() && !completed[c] {
					if _, err := c.connected.get(); err != nil {
						t.Fatalf("seed %d: connect: %v", seed, err)
					}
					if err := c.active.CompleteConnect(c.eventA.inc); err != nil {
						t.Fatalf("seed %d: complete: %v", seed, err)
					}
					completed[c] = true
				}
				done = done && completed[c]
			}
			for _, c := range accepts {
				done = done && c.accepted.called()
			}
			return done && handled == n
		}
		if !p.clk.RunUntil(all, 10*time.Minute) {
			t.Fatalf("seed %d: %d of %d connect events, not all formed", seed, ls.count(), n)
		}
		p.clk.Advance(10 * time.Second) // let late copies land
		all()
		if ls.count() != n {
			t.Fatalf("seed %d: %d connect events for %d connections", seed, ls.count(), n)
		}
		for _, c := range conns {
			if k, err := c.connected.get(); k != 1 || err != nil {
				t.Fatalf("seed %d: connect completed %d times: %v", seed, k, err)
			}
		}
		for _, c := range accepts {
			if k, err := c.accepted.get(); k != 1 || err != nil {
				t.Fatalf("seed %d: accept completed %d times: %v", seed, k, err)
			}
		}
		// Tear down from alternating sides.
		var discs [n]result
		i := 0
		for pc, c := range accepts {
			var err error
			if i%2 == 0 {
				err = pc.Disconnect(discs[i].done)
			} else {
				for _, ac := range conns {
					if ac.qpA.Remote().QPN == c.qpB.QPN() {
						err = ac.active.Disconnect(discs[i].done)
					}
				}
			}
			if err != nil {
				t.Fatalf("seed %d: disconnect: %v", seed, err)
			}
			i++
		}
		p.clk.Drain(10 * time.Minute)
		for i := range discs {
			if k, err := discs[i].get(); k != 1 || err != nil {
				t.Fatalf("seed %d: disconnect %d completed %d times: %v", seed, i, k, err)
			}
		}
		events := 0
		for _, c := range conns {
			events += c.eventA.get()
		}
		for _, c := range accepts {
			events += c.eventB.get()
		}
		if events != n {
			t.Fatalf("seed %d: %d disconnect events for %d disconnects", seed, events, n)
		}
	}
}

// TestDisconnect covers both directions, a drain that lags, DREQ loss,
// DREP loss, a DREQ that never gets through, and both sides at once.
func TestDisconnect(t *testing.T) {
	t.Run("active", func(t *testing.T) {
		p := newPair(t, cmtest.Faults{}, cm.Params{})
		ls := listen(t, p.b, netip.AddrPortFrom(ipB, 1))
		c := p.connect(t, ls, 1, netip.AddrPortFrom(ipB, 1))
		c.qpA.HoldDrain = true
		var d result
		if err := c.active.Disconnect(d.done); err != nil {
			t.Fatal(err)
		}
		p.clk.Drain(time.Minute)
		if d.called() {
			t.Fatal("disconnect completed before the QP drained")
		}
		c.qpA.Drain()
		if k, err := d.get(); k != 1 || err != nil {
			t.Fatalf("disconnect %d %v", k, err)
		}
		// The peer's DREQ leaves the passive QP alone (NDKPI: the
		// provider does not flush because of a disconnect event).
		if c.eventB.get() != 1 || c.eventA.get() != 0 || c.qpA.State() != "error" || c.qpB.State() != "rts" {
			t.Fatalf("events %d %d, QPs %s %s; want 0 1, error rts", c.eventA.get(), c.eventB.get(), c.qpA.State(), c.qpB.State())
		}
		// The passive side may still call Disconnect: it succeeds, and
		// its QP moves to error then.
		var d2 result
		if err := c.passive.Disconnect(d2.done); err != nil {
			t.Fatal(err)
		}
		if k, err := d2.get(); k != 1 || err != nil || c.qpB.State() != "error" {
			t.Fatalf("disconnect after peer's: %d %v, QP %s", k, err, c.qpB.State())
		}
		if err := c.passive.Disconnect(d2.done); err == nil {
			t.Fatal("second disconnect accepted")
		}
	})
	t.Run("close after the peer's", func(t *testing.T) {
		// Closing the connector instead of disconnecting also ends the
		// QP the peer's disconnect left alone.
		p := newPair(t, cmtest.Faults{}, cm.Params{})
		ls := listen(t, p.b, netip.AddrPortFrom(ipB, 1))
		c := p.connect(t, ls, 1, netip.AddrPortFrom(ipB, 1))
		var d result
		if err := c.active.Disconnect(d.done); err != nil {
			t.Fatal(err)
		}
		p.clk.Drain(time.Minute)
		if c.eventB.get() != 1 || c.qpB.State() != "rts" {
			t.Fatalf("event %d, passive QP %s; want 1, rts", c.eventB.get(), c.qpB.State())
		}
		if !c.passive.Close(nil) {
			t.Fatal("close did not complete")
		}
		p.clk.Drain(time.Minute)
		if c.qpB.State() != "error" {
			t.Fatalf("passive QP %s after its connector closed, want error", c.qpB.State())
		}
	})
	t.Run("passive", func(t *testing.T) {
		p := newPair(t, cmtest.Faults{}, cm.Params{})
		ls := listen(t, p.b, netip.AddrPortFrom(ipB, 1))
		c := p.connect(t, ls, 1, netip.AddrPortFrom(ipB, 1))
		var d result
		if err := c.passive.Disconnect(d.done); err != nil {
			t.Fatal(err)
		}
		p.clk.Drain(time.Minute)
		if k, err := d.get(); k != 1 || err != nil || c.eventA.get() != 1 || c.eventB.get() != 0 {
			t.Fatalf("disconnect %d %v, events %d %d", k, err, c.eventA.get(), c.eventB.get())
		}
	})
	t.Run("DREQ loss", func(t *testing.T) {
		p := newPair(t, cmtest.Faults{DropIf: func(_ string, a rocev2.AttributeID, n int) bool { return a == rocev2.AttrDREQ && n < 2 }}, cm.Params{})
		ls := listen(t, p.b, netip.AddrPortFrom(ipB, 1))
		c := p.connect(t, ls, 1, netip.AddrPortFrom(ipB, 1))
		var d result
		_ = c.active.Disconnect(d.done)
		p.clk.Drain(time.Minute)
		if k, err := d.get(); k != 1 || err != nil || p.link.A.Sent(rocev2.AttrDREQ) != 3 || c.eventB.get() != 1 {
			t.Fatalf("disconnect %d %v after %d DREQs, %d events", k, err, p.link.A.Sent(rocev2.AttrDREQ), c.eventB.get())
		}
	})
	t.Run("DREP loss", func(t *testing.T) {
		p := newPair(t, cmtest.Faults{DropIf: func(_ string, a rocev2.AttributeID, n int) bool { return a == rocev2.AttrDREP && n == 0 }}, cm.Params{})
		ls := listen(t, p.b, netip.AddrPortFrom(ipB, 1))
		c := p.connect(t, ls, 1, netip.AddrPortFrom(ipB, 1))
		var d result
		_ = c.active.Disconnect(d.done)
		p.clk.Drain(time.Minute)
		if k, err := d.get(); k != 1 || err != nil || p.link.B.Sent(rocev2.AttrDREP) != 2 || c.eventB.get() != 1 {
			t.Fatalf("disconnect %d %v, %d DREPs, %d events", k, err, p.link.B.Sent(rocev2.AttrDREP), c.eventB.get())
		}
	})
	t.Run("no answer", func(t *testing.T) {
		p := newPair(t, cmtest.Faults{DropIf: func(_ string, a rocev2.AttributeID, _ int) bool { return a == rocev2.AttrDREQ }}, cm.Params{})
		ls := listen(t, p.b, netip.AddrPortFrom(ipB, 1))
		c := p.connect(t, ls, 1, netip.AddrPortFrom(ipB, 1))
		var d result
		_ = c.active.Disconnect(d.done)
		p.clk.Drain(10 * time.Minute)
		k, err := d.get()
		if k != 1 || p.link.A.Sent(rocev2.AttrDREQ) != 16 {
			t.Fatalf("disconnect %d after %d DREQs", k, p.link.A.Sent(rocev2.AttrDREQ))
		}
		wantStatus(t, "disconnect", err, ndkpi.StatusIOTimeout)
	})
	t.Run("both at once", func(t *testing.T) {
		p := newPair(t, cmtest.Faults{}, cm.Params{})
		ls := listen(t, p.b, netip.AddrPortFrom(ipB, 1))
		c := p.connect(t, ls, 1, netip.AddrPortFrom(ipB, 1))
		var da, db result
		_ = c.active.Disconnect(da.done)
		_ = c.passive.Disconnect(db.done)
		p.clk.Drain(time.Minute)
		ka, ea := da.get()
		kb, eb := db.get()
		if ka != 1 || kb != 1 || ea != nil || eb != nil || c.eventA.get()+c.eventB.get() != 0 {
			t.Fatalf("disconnects %d %v / %d %v, events %d %d", ka, ea, kb, eb, c.eventA.get(), c.eventB.get())
		}
	})
}
