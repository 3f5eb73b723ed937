package daemon_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// exConn is a connection made with the NDKPI 2.1 calls: the client
// (through the daemon) with CompleteConnectEx, B with AcceptEx; each
// side's disconnect reasons arrive on its channel.
type exConn struct {
	pr               *peer
	x, bx            *ndk.Connector
	reasonC, reasonB chan ndk.DisconnectReason
}

func (bd *bed) connectEx(t *testing.T, c *client, port uint16) *exConn {
	t.Helper()
	b := bd.b
	e := &exConn{pr: &peer{mem: make([]byte, 1<<16)}, reasonC: make(chan ndk.DisconnectReason, 4), reasonB: make(chan ndk.DisconnectReason, 4)}
	var err error
	if e.pr.qp, err = b.PD.CreateQP(ndk.QPConfig{ReceiveCQ: b.RCQ, InitiatorCQ: b.ICQ, ReceiveQueueDepth: 64, InitiatorQueueDepth: 64,
		MaxReceiveRequestSGE: 2, MaxInitiatorRequestSGE: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.pr.qp.Close() })
	if e.pr.mr, err = b.PD.RegisterMR(e.pr.mem, ndk.MRFlagAllowLocalWrite); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	l, err := b.Adapter.CreateListener(func(x *ndk.Connector) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.bx = x
		accepted <- x.AcceptEx(ctx, e.pr.qp, 4, 4, nil, func(r ndk.DisconnectReason) { e.reasonB <- r })
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	dst := netip.AddrPortFrom(bd.pair.B.IPv4, port)
	if err := l.Listen(dst); err != nil {
		t.Fatal(err)
	}
	if e.x, err = c.a.CreateConnector(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.x.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.x.Connect(ctx, c.qp, netip.AddrPort{}, dst, 4, 4, nil); err != nil {
		t.Fatalf("connect through the daemon: %v", err)
	}
	if err := e.x.CompleteConnectEx(func(r ndk.DisconnectReason) { e.reasonC <- r }); err != nil {
		t.Fatalf("complete connect: %v", err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(e.bx.Close)
	return e
}

func reasonOf(t *testing.T, ch chan ndk.DisconnectReason, who string) ndk.DisconnectReason {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no disconnect callback", who)
	}
	return 0
}

// Seed 004 through the daemon: B sends a SendAndInvalidate whose token the
// daemon-backed QP cannot invalidate; the daemon's provider aborts the
// connection, and both consumers' 2.1 callbacks fire, the client's with
// the reason the daemon's CM gave.
func TestSeedInvalidTokenAbortsThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	e := bd.connectEx(t, c, 7101)
	sge, _ := c.mr.SGE(0, 64)
	if err := c.qp.Receive("r", []ndk.SGE{sge}); err != nil {
		t.Fatal(err)
	}
	bs, _ := e.pr.mr.SGE(0, 8)
	if err := e.pr.qp.SendAndInvalidate("s", []ndk.SGE{bs}, 0, 0xdeadbeef); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c.rcq, "client receive"); r.Status == ndk.StatusSuccess {
		t.Fatalf("receive of an invalid token succeeded: %+v", r)
	}
	if r := reasonOf(t, e.reasonC, "client"); r != ndk.DisconnectReasonRemoteInvalidRequest {
		t.Fatalf("client's reason %v, want %v", r, ndk.DisconnectReasonRemoteInvalidRequest)
	}
	if r := reasonOf(t, e.reasonB, "peer"); r != ndk.DisconnectReasonPeer && r != ndk.DisconnectReasonRemoteInvalidRequest {
		t.Fatalf("peer's reason %v", r)
	}
}

// The abortive disconnect through the daemon: the peer's callback says the
// peer disconnected.
func TestAbortiveDisconnectThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	e := bd.connectEx(t, c, 7102)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.x.DisconnectEx(ctx, true); err != nil {
		t.Fatal(err)
	}
	if r := reasonOf(t, e.reasonB, "peer"); r != ndk.DisconnectReasonPeer {
		t.Fatalf("peer's reason %v, want %v", r, ndk.DisconnectReasonPeer)
	}
}

// NdkControlCqInterruptModeration through the daemon: the relay holds a
// satisfied arm until the count (and through a resize).
func TestModerationThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	calls := make(chan ndk.Status, 16)
	var cq *ndk.CQ
	cq, err := c.a.CreateCQ(64, func(s ndk.Status) { calls <- s })
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.Resize(128); err != nil {
		t.Errorf("Resize through the daemon: %v", err)
	}
	qp, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: c.icq, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.qp = qp
	e := bd.connectEx(t, c, 7103)
	if err := cq.ControlInterruptModeration(ndk.ModerationIntervalUnbounded, 4); err != nil {
		t.Fatal(err)
	}
	if err := cq.Arm(ndk.CQNotifyAny); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		sge, _ := c.mr.SGE(i*64, 64)
		if err := qp.Receive(i, []ndk.SGE{sge}); err != nil {
			t.Fatal(err)
		}
	}
	bs, _ := e.pr.mr.SGE(0, 8)
	for i := range 4 {
		if err := e.pr.qp.Send(i, []ndk.SGE{bs}, 0); err != nil {
			t.Fatal(err)
		}
		wait(t, bd.b.ICQ, "peer send")
		if i < 3 {
			select {
			case s := <-calls:
				t.Fatalf("callback (%v) after %d completions, moderation count 4", s, i+1)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	select {
	case s := <-calls:
		if s != ndk.StatusSuccess {
			t.Fatalf("callback status %v", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no callback after the fourth completion")
	}
	var rs [8]ndk.ResultEx
	if n := cq.GetResultsEx(rs[:]); n != 4 {
		t.Fatalf("%d completions at the callback, want 4", n)
	}

	// By time alone: one completion, the callback an interval later, even
	// if the engine that runs the relay sleeps meanwhile.
	const interval = 30 * time.Millisecond
	if err := cq.ControlInterruptModeration(interval, ndk.ModerationUnbounded); err != nil {
		t.Fatal(err)
	}
	if err := cq.Arm(ndk.CQNotifyAny); err != nil {
		t.Fatal(err)
	}
	sge, _ := c.mr.SGE(0, 64)
	if err := qp.Receive("late", []ndk.SGE{sge}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.pr.qp.Send("late", []ndk.SGE{bs}, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-calls:
		if d := time.Since(start); d < interval {
			t.Fatalf("callback after %v, before the %v interval", d, interval)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no callback after the interval")
	}
}
