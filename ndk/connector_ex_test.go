package ndk

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// exPair is a connection made with the NDKPI 2.1 calls (CompleteConnectEx
// on x, AcceptEx on y); each side's disconnect reasons arrive on its
// channel.
type exPair struct {
	x, y             *side
	active, passive  *Connector
	reasonX, reasonY chan DisconnectReason
}

func connectEx(t *testing.T, x, y *side, port uint16) *exPair {
	t.Helper()
	p := &exPair{x: x, y: y, reasonX: make(chan DisconnectReason, 4), reasonY: make(chan DisconnectReason, 4)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	passive := make(chan *Connector, 1)
	l, err := y.a.CreateListener(func(c *Connector) {
		passive <- c
		accepted <- c.AcceptEx(ctx, y.qp, 4, 4, nil, func(r DisconnectReason) { p.reasonY <- r })
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	addr := netip.AddrPortFrom(pipeIPB, port)
	if err := l.Listen(addr); err != nil {
		t.Fatal(err)
	}
	if p.active, err = x.a.CreateConnector(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.active.Close)
	if err := p.active.Connect(ctx, x.qp, netip.AddrPort{}, addr, 4, 4, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.active.CompleteConnectEx(func(r DisconnectReason) { p.reasonX <- r }); err != nil {
		t.Fatal(err)
	}
	p.passive = <-passive
	t.Cleanup(p.passive.Close)
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	return p
}

// reason waits for one disconnect callback on ch.
func reason(t *testing.T, ch chan DisconnectReason, who string) DisconnectReason {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no disconnect callback", who)
	}
	return 0
}

// expectAborted checks what seed 004 asks when a transport error ends a
// connection: both QPs in error, the side that detected it (or both)
// told with its reason, a DREQ on the wire, and each consumer's own
// Disconnect afterwards succeeding.
func (p *exPair) expectAborted(t *testing.T, detector *side, want DisconnectReason) {
	t.Helper()
	rx := reason(t, p.reasonX, "active side")
	ry := reason(t, p.reasonY, "passive side")
	got := map[*side]DisconnectReason{p.x: rx, p.y: ry}
	if got[detector] != want {
		t.Errorf("the side that detected the error got reason %v, want %v", got[detector], want)
	}
	for s, r := range got {
		if r != want && r != DisconnectReasonPeer {
			t.Errorf("a side got reason %v, want %v or %v", r, want, DisconnectReasonPeer)
		}
		if s.qp.Connected() {
			t.Error("a QP is still connected after the abort")
		}
	}
	if n := detector.a.CMStats().Sent[rocev2.AttrDREQ]; n == 0 {
		t.Error("the side that detected the error sent no DREQ: the CM connection was not torn down")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []*Connector{p.active, p.passive} {
		if err := c.Disconnect(ctx); err != nil {
			t.Errorf("Disconnect after the abort: %v", err)
		}
	}
	select {
	case r := <-p.reasonX:
		t.Errorf("a second disconnect callback on the active side: %v", r)
	case r := <-p.reasonY:
		t.Errorf("a second disconnect callback on the passive side: %v", r)
	case <-time.After(quiet):
	}
}

// Seed 004: "The NDK provider at the receiving peer must abort the
// connection ... if an invalid token was specified by the sending peer."
// Both QPs go to error, the receiver's CM tears the connection down and
// both consumers' disconnect callbacks fire.
func TestSeedSendAndInvalidate_InvalidTokenAbortsConnection(t *testing.T) {
	x, y := cmPipePair(t, nil, cm.Params{})
	p := connectEx(t, x, y, 7601)
	src := []byte("invalidate this")
	dst := make([]byte, 64)
	smr, _ := x.pd.RegisterMR(src, 0)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ss, _ := smr.SGE(0, len(src))
	ds, _ := dmr.SGE(0, len(dst))
	if err := y.qp.Receive("r", []SGE{ds}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.SendAndInvalidate("s", []SGE{ss}, 0, 0xdeadbeef); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, y.rcq); r.Status == StatusSuccess {
		t.Fatalf("receive of an invalid token succeeded: %+v", r)
	}
	if r := waitResult(t, x.icq); r.Status == StatusSuccess {
		t.Fatalf("send with an invalid token succeeded: %+v", r)
	}
	p.expectAborted(t, y, DisconnectReasonRemoteInvalidRequest)
}

// A WRITE the peer refuses (bad token) ends the connection the same way.
func TestRemoteAccessErrorAbortsConnection(t *testing.T) {
	x, y := cmPipePair(t, nil, cm.Params{})
	p := connectEx(t, x, y, 7602)
	src := []byte("write me")
	smr, _ := x.pd.RegisterMR(src, 0)
	ss, _ := smr.SGE(0, len(src))
	if err := x.qp.Write("w", []SGE{ss}, 0x1000, 0xbadbad, 0); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, x.icq); r.Status != StatusAccessViolation {
		t.Fatalf("write with a bad token completed %+v, want STATUS_ACCESS_VIOLATION", r)
	}
	p.expectAborted(t, y, DisconnectReasonRemoteAccess)
}

// Retries exhausted (the peer never acknowledges) ends the connection:
// the requester's CM sends a DREQ, and the peer hears of it.
func TestRetryExhaustedAbortsConnection(t *testing.T) {
	var cut atomic.Bool
	params := cm.DefaultParams()
	params.PacketLifeTime, params.AckDelay = 8, 12 // ACK timeout about 17 ms
	params.RetryCount = 1
	x, y := cmPipePair(t, func(d porttest.Direction, f []byte) porttest.Verdict {
		if cut.Load() && d == porttest.AtoB && madAttr(f) == 0 {
			return porttest.Drop // data only: the CM's MADs still pass
		}
		return porttest.Pass
	}, params)
	p := connectEx(t, x, y, 7603)
	cut.Store(true)
	src := []byte("into the void")
	smr, _ := x.pd.RegisterMR(src, 0)
	ss, _ := smr.SGE(0, len(src))
	if err := x.qp.Send("s", []SGE{ss}, 0); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, x.icq); r.Status != StatusIOTimeout {
		t.Fatalf("send completed %+v, want STATUS_IO_TIMEOUT", r)
	}
	if r := reason(t, p.reasonX, "active side"); r != DisconnectReasonRetryExceeded {
		t.Fatalf("active side's reason %v, want %v", r, DisconnectReasonRetryExceeded)
	}
	if r := reason(t, p.reasonY, "passive side"); r != DisconnectReasonPeer {
		t.Fatalf("passive side's reason %v, want %v", r, DisconnectReasonPeer)
	}
}

// NDK_FN_DISCONNECT_EX with Abortive: it returns without the peer's
// answer (every DREP is lost here, which a graceful Disconnect waits out),
// the QP is down, and the peer's 2.1 callback says the peer disconnected.
func TestAbortiveDisconnect(t *testing.T) {
	params := cm.DefaultParams()
	params.CMResponseTimeout = 14 // a graceful DREQ would retry for seconds
	x, y := cmPipePair(t, func(_ porttest.Direction, f []byte) porttest.Verdict {
		if madAttr(f) == rocev2.AttrDREP {
			return porttest.Drop
		}
		return porttest.Pass
	}, params)
	p := connectEx(t, x, y, 7604)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.active.DisconnectEx(ctx, true); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("abortive disconnect took %v: it waited for the peer", d)
	}
	if x.qp.Connected() {
		t.Error("QP connected after an abortive disconnect")
	}
	if r := reason(t, p.reasonY, "passive side"); r != DisconnectReasonPeer {
		t.Fatalf("passive side's reason %v, want %v", r, DisconnectReasonPeer)
	}
	select {
	case r := <-p.reasonX:
		t.Fatalf("the side that disconnected got a callback: %v", r)
	case <-time.After(quiet):
	}
	if s := x.a.CMStats(); s.Sent[rocev2.AttrDREQ] != 1 {
		t.Errorf("sent %d DREQs, want exactly 1 (no retransmission)", s.Sent[rocev2.AttrDREQ])
	}
	if err := p.active.DisconnectEx(ctx, true); !errors.Is(err, ErrConnectionInvalid) {
		t.Errorf("second abortive disconnect: %v, want STATUS_CONNECTION_INVALID", err)
	}
}

// NdkQueryExtension answers STATUS_NOT_SUPPORTED for an unknown interface
// on every object: NDKPI defines none.
func TestQueryExtensionNotSupported(t *testing.T) {
	x, _ := cmPipePair(t, nil, cm.Params{})
	mr, err := x.pd.RegisterMR(make([]byte, 64), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := x.a.CreateListener(func(*Connector) {})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	se, err := x.a.CreateSharedEndpoint(netip.AddrPortFrom(pipeIPA, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer se.Close()
	id := GUID{0x12, 0x34, 0x56, 0x78}
	for name, q := range map[string]func(GUID, Version) (any, error){
		"adapter": x.a.QueryExtension, "cq": x.rcq.QueryExtension, "pd": x.pd.QueryExtension,
		"mr": mr.QueryExtension, "qp": x.qp.QueryExtension, "connector": c.QueryExtension,
		"listener": l.QueryExtension, "shared endpoint": se.QueryExtension,
	} {
		if iface, err := q(id, Version{Major: 1}); iface != nil || !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s: QueryExtension = %v, %v; want nil, STATUS_NOT_SUPPORTED", name, iface, err)
		}
	}
}

// reqRep records the REQ and REP a pipe carried.
type reqRep struct {
	mu  sync.Mutex
	req *rocev2.CMReq
	rep *rocev2.CMRep
}

func (r *reqRep) filter(_ porttest.Direction, f []byte) porttest.Verdict {
	var p rocev2.Packet
	if _, _, mad, err := cm.ParseGSI(f, &p); err == nil {
		if d, err := rocev2.DecodeMAD(mad); err == nil {
			r.mu.Lock()
			switch m := d.Message.(type) {
			case *rocev2.CMReq:
				r.req = m
			case *rocev2.CMRep:
				r.rep = m
			}
			r.mu.Unlock()
		}
	}
	return porttest.Pass
}

// The retry counts are part of the connect options, as rdma_cm's
// consumers set them: per connection (SetRetryCounts) into the REQ and
// REP, and into the QPs on both sides; the adapter's CMOptions give the
// default.
func TestRetryCountsCarriedInREQAndREP(t *testing.T) {
	var seen reqRep
	x, y := cmPipePair(t, seen.filter, cm.Params{})
	addr := netip.AddrPortFrom(pipeIPB, 7605)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	passive := make(chan *Connector, 1)
	l, err := y.a.CreateListener(func(c *Connector) {
		if err := c.SetRetryCounts(0, 2); err != nil {
			t.Error(err)
		}
		if err := c.Accept(ctx, y.qp, 1, 1, nil, nil); err != nil {
			t.Error(err)
		}
		passive <- c
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Listen(addr); err != nil {
		t.Fatal(err)
	}
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, bad := range [][2]int{{-1, 0}, {8, 0}, {0, 8}} {
		if err := c.SetRetryCounts(bad[0], bad[1]); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("SetRetryCounts(%d, %d) = %v, want STATUS_INVALID_PARAMETER", bad[0], bad[1], err)
		}
	}
	if err := c.SetRetryCounts(3, 5); err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(ctx, x.qp, netip.AddrPort{}, addr, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	pc := <-passive
	defer pc.Close()
	seen.mu.Lock()
	req, rep := seen.req, seen.rep
	seen.mu.Unlock()
	if req == nil || rep == nil {
		t.Fatal("REQ or REP not seen on the wire")
	}
	if req.RetryCount != 3 || req.RNRRetryCount != 5 {
		t.Errorf("REQ retry %d, RNR retry %d; want 3, 5", req.RetryCount, req.RNRRetryCount)
	}
	if rep.RNRRetryCount != 2 {
		t.Errorf("REP RNR retry %d, want 2", rep.RNRRetryCount)
	}
	// cm.c: the active QP retries as it asked and waits out RNR NAKs as
	// the REP says; the passive QP does both as the REQ says.
	if ri := c.be.(*inprocConnector).c.RemoteInfo(); ri.RetryCount != 3 || ri.RNRRetry != 2 {
		t.Errorf("active QP retry %d, RNR retry %d; want 3, 2", ri.RetryCount, ri.RNRRetry)
	}
	if ri := pc.be.(*inprocConnector).c.RemoteInfo(); ri.RetryCount != 3 || ri.RNRRetry != 5 {
		t.Errorf("passive QP retry %d, RNR retry %d; want 3, 5", ri.RetryCount, ri.RNRRetry)
	}
}

func TestCMOptionsRetryCounts(t *testing.T) {
	one, six, eight := 1, 6, 8
	p, err := CMOptions{RetryCount: &one, RNRRetry: &six}.params()
	if err != nil || p.RetryCount != 1 || p.RNRRetry != 6 {
		t.Fatalf("params() = %+v, %v; want RetryCount 1, RNRRetry 6", p, err)
	}
	if p, err := (CMOptions{}).params(); err != nil || p.RetryCount != 7 || p.RNRRetry != 7 {
		t.Fatalf("default params() = %+v, %v; want 7/7 as rdma_cm's consumers ask", p, err)
	}
	if _, err := (CMOptions{RetryCount: &eight}).params(); err == nil {
		t.Fatal("RetryCount 8 accepted")
	}
}
