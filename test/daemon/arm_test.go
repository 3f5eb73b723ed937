package daemon_test

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestWriteArmOnEveryQueue: the relay runs in queue 0's engine, and a QP
// of the daemon's may live on another queue, whose engine places its
// peer's WRITEs. A write arm on such a QP still fires when queue 0's
// engine sleeps (the relay arms that QP's placed-write notification
// before it sleeps).
func TestWriteArmOnEveryQueue(t *testing.T) {
	bd := newQueuesBed(t, 2)
	c := dial(t, bd.sock)
	qps := []*ndk.QP{c.qp}
	// Both adapters give their QPs to their engines in turn, so among
	// four connections some have both ends on queue 1: the peer's engine
	// sends on TX queue 1, which veth delivers to RX queue 1 of the
	// daemon's side, whose engine 1 places the WRITE while engine 0
	// sleeps (as RSS would spread flows on a NIC).
	for range 3 {
		q, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 8, InitiatorQueueDepth: 8,
			MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		qps = append(qps, q)
	}
	for i, qp := range qps {
		c.qp = qp
		pr := bd.connect(t, c, uint16(7701+i))
		ch := make(chan struct{}, 1)
		qp.ArmPeerWrites(ch)
		// Long enough for queue 0's engine to spin out and sleep.
		time.Sleep(20 * time.Millisecond)
		ps, _ := pr.mr.SGE(0, 64)
		copy(pr.mem, "written to a QP of either queue")
		if err := pr.qp.Write(nil, []ndk.SGE{ps}, c.mr.Addr()+512, c.mr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("QP %d: no token 5 s after the peer's WRITE (memory %q, PeerWrites %d)", i, c.mem[512:512+31], qp.PeerWrites())
		}
		if got := string(c.mem[512 : 512+31]); got != "written to a QP of either queue" {
			t.Fatalf("QP %d: memory after the token: %q", i, got)
		}
		wait(t, bd.b.ICQ, "peer write")
	}
}

// TestArmsLeaveTheEngineAsleep: arming a CQ with nothing to fire on, and
// a write arm with no WRITE placed since, wake no engine: the relay sees
// those arms when a completion or a WRITE next wakes it (proto.CQLayout).
// A consumer that arms before every blocking wait would otherwise cost
// the daemon a wake-up and a spin each time.
func TestArmsLeaveTheEngineAsleep(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	calls := make(chan ndk.Status, 8)
	ncq, err := c.a.CreateCQ(64, func(s ndk.Status) { calls <- s })
	if err != nil {
		t.Fatal(err)
	}
	defer ncq.Close()
	qp, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: ncq, InitiatorCQ: c.icq, ReceiveQueueDepth: 8, InitiatorQueueDepth: 8,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.qp = qp
	pr := bd.connect(t, c, 7711)
	rs, _ := c.mr.SGE(0, 64)
	if err := qp.Receive(nil, []ndk.SGE{rs}); err != nil {
		t.Fatal(err)
	}
	sleeps := func() (n uint64) {
		for _, s := range bd.a.Stats() {
			n += s.Sleeps
		}
		return n
	}
	ch := make(chan struct{}, 1)
	time.Sleep(20 * time.Millisecond)
	const arms = 50
	before := sleeps()
	for range arms {
		if err := ncq.Arm(ndk.CQNotifyAny); err != nil {
			t.Fatal(err)
		}
		qp.ArmPeerWrites(ch)
		time.Sleep(2 * time.Millisecond)
	}
	// Timers may wake the engine now and then; one wake per arm is what
	// ringing on every arm costs.
	if woke := sleeps() - before; woke > arms/5 {
		t.Errorf("%d arms with nothing to fire woke the daemon's engine %d times", arms, woke)
	}
	select {
	case s := <-calls:
		t.Fatalf("callback (%v) with no completion", s)
	case <-ch:
		t.Fatal("write token with no WRITE")
	default:
	}
	// The arms still fire when their event comes.
	ps, _ := pr.mr.SGE(0, 8)
	if err := pr.qp.Send(nil, []ndk.SGE{ps}, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-calls:
		if s != ndk.StatusSuccess {
			t.Fatalf("callback status %v", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no callback 5 s after a receive completed on an armed CQ")
	}
	if err := pr.qp.Write(nil, []ndk.SGE{ps}, c.mr.Addr()+1024, c.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no write token 5 s after the peer's WRITE")
	}
}

// memfdMappings counts this process's mappings of the daemon's segments.
func memfdMappings(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("/memfd:ndkxdp-"))
}

// TestClosedObjectsLeaveNoMapping: a client that makes and closes QPs,
// CQs and SRQs keeps no mapping of their segments (and so no memfd pages)
// once each close has completed (a QP's and an SRQ's when Closed says so,
// a CQ's when Close returns).
func TestClosedObjectsLeaveNoMapping(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	before := memfdMappings(t)
	for i := range 50 {
		cq, err := c.a.CreateCQ(16, func(ndk.Status) {})
		if err != nil {
			t.Fatal(err)
		}
		srq, err := c.pd.CreateSRQ(8, 1, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: 8, InitiatorQueueDepth: 8,
			MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if got := memfdMappings(t); got < before+3 {
				t.Fatalf("%d segment mappings with a CQ, an SRQ and a QP open, %d before: the count below would prove nothing", got, before)
			}
		}
		if err := qp.Close(); err != nil {
			t.Fatal(err)
		}
		<-qp.Closed()
		srq.Close()
		// An SRQ's close completes with the daemon's event (NdkCloseSrq is
		// asynchronous): its mapping goes then, not when Close returns.
		select {
		case <-srq.Closed():
		case <-time.After(5 * time.Second):
			t.Fatalf("cycle %d: the SRQ's close did not complete in 5 s", i)
		}
		cq.Close()
	}
	if got := memfdMappings(t); got != before {
		t.Fatalf("%d segment mappings after 50 CQs, SRQs and QPs were made and closed, %d before", got, before)
	}
}

// TestRelayLeavesTheEngineAsleep: on a one-queue daemon every completion
// of a client's QP is made in the loop that runs the relay, so nothing
// but a frame, a post that needs the engine, or a timer wakes it.
//   - Before it sleeps the relay arms its CQs for errors only: their
//     notifier never runs (Server.RelayRings), where an arm for any
//     completion ran it after every sleep.
//   - A receive posted while the engine sleeps does not wake it, as an
//     in-process PostReceive rings no engine: the SEND's frame does, and
//     the relay moves the receive into its QP before it handles the frame
//     (no RNR NAK).
//   - A receive posted on a QP in error does wake it: the engine cancels
//     the receive (STATUS_CANCELLED) at once.
func TestRelayLeavesTheEngineAsleep(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	pr := bd.connect(t, c, 7721)
	sleeps := func() (n uint64) {
		for _, s := range bd.a.Stats() {
			n += s.Sleeps
		}
		return n
	}
	rnr := func() (n uint64) {
		for _, s := range bd.a.Stats() {
			n += s.RNRSent
		}
		return n
	}
	rs, _ := c.mr.SGE(0, 64)
	ps, _ := pr.mr.SGE(0, 64)
	rings0, rnr0 := bd.srv.RelayRings(), rnr()
	const rounds = 20
	// Long enough for the engine to spin out and sleep. Reading the
	// counters wakes it once (a control call runs in its loop).
	time.Sleep(5 * time.Millisecond)
	before := sleeps()
	for range rounds {
		time.Sleep(2 * time.Millisecond)
		if err := c.qp.Receive(nil, []ndk.SGE{rs}); err != nil {
			t.Fatal(err)
		}
	}
	// A timer may wake the engine now and then; one wake a receive is what
	// ringing on every receive costs.
	if woke := sleeps() - before; woke > rounds/5 {
		t.Errorf("%d receives posted to a sleeping engine woke it %d times", rounds, woke)
	}
	for i := range rounds {
		if i%5 == 0 {
			time.Sleep(5 * time.Millisecond) // the SEND's frame finds the engine asleep
		}
		copy(pr.mem, fmt.Sprintf("send %02d", i))
		if err := pr.qp.Send(nil, []ndk.SGE{ps}, 0); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c.rcq, "receive"); r.Status != ndk.StatusSuccess || r.BytesTransferred != 64 {
			t.Fatalf("send %d: receive %v, %d bytes", i, r.Status, r.BytesTransferred)
		}
		if got := string(c.mem[:7]); got != fmt.Sprintf("send %02d", i) {
			t.Fatalf("send %d: received %q", i, got)
		}
		wait(t, bd.b.ICQ, "peer's send")
	}
	if n := rnr() - rnr0; n != 0 {
		t.Errorf("%d RNR NAKs: a receive posted without a ring was not in place for its SEND", n)
	}
	if n := bd.srv.RelayRings() - rings0; n != 0 {
		t.Errorf("the daemon CQs' notifier rang the relay %d times on a one-queue daemon", n)
	}

	c.qp.Flush()
	for c.qp.Connected() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond)
	if err := c.qp.Receive(nil, []ndk.SGE{rs}); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c.rcq, "receive on a flushed QP"); r.Status != ndk.StatusCancelled {
		t.Fatalf("receive posted on a flushed QP: %v, want %v", r.Status, ndk.StatusCancelled)
	}
}
