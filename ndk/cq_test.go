package ndk

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
)

// notifications records callback statuses for a test CQ.
type notifications chan Status

func newNotifyingCQ(t *testing.T, depth int) (*CQ, notifications) {
	t.Helper()
	a := newTestAdapter(t, nil)
	calls := make(notifications, 64)
	c, err := a.CreateCQ(depth, func(s Status) { calls <- s })
	if err != nil {
		t.Fatal(err)
	}
	return c, calls
}

func (n notifications) expect(t *testing.T, want Status) {
	t.Helper()
	select {
	case s := <-n:
		if s != want {
			t.Fatalf("callback with %v, want %v", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no callback (want %v)", want)
	}
}

func (n notifications) expectNone(t *testing.T) {
	t.Helper()
	select {
	case s := <-n:
		t.Fatalf("unexpected callback with %v", s)
	case <-time.After(quiet):
	}
}

// complete plays the engine: it pushes a completion into c.
func complete(t *testing.T, c *CQ, e cq.Entry) {
	t.Helper()
	if !c.core().Push(&e) {
		t.Fatal("CQ full")
	}
}

var (
	plain     = cq.Entry{Type: OpSend}
	solicited = cq.Entry{Type: OpReceive, Solicited: true, BytesTransferred: 8}
	failed    = cq.Entry{Type: OpSend, Status: StatusCancelled}
)

func mustArm(t *testing.T, c *CQ, n CQNotify) {
	t.Helper()
	if err := c.Arm(n); err != nil {
		t.Fatal(err)
	}
}

func drain(c *CQ) int {
	var rs [16]Result
	total := 0
	for n := c.GetResults(rs[:]); n > 0; n = c.GetResults(rs[:]) {
		total += n
	}
	return total
}

// Seed 002: "the provider must call NdkCqNotificationCallback only once,
// and only after the consumer armed it".
func TestSeedCompletion_OneCallbackPerArm(t *testing.T) {
	c, calls := newNotifyingCQ(t, 64)
	complete(t, c, plain)
	calls.expectNone(t) // never armed: no callback
	drain(c)
	mustArm(t, c, CQNotifyAny)
	for range 5 {
		complete(t, c, plain)
	}
	calls.expect(t, StatusSuccess)
	calls.expectNone(t) // five completions, one arm, one callback
}

// Seed 002: "the provider must clear the arm and then call". Inside the
// callback the CQ is disarmed: a completion there fires nothing, and a
// re-arm from the callback is a fresh arm.
func TestSeedCompletion_ArmClearedBeforeCallback(t *testing.T) {
	a := newTestAdapter(t, nil)
	calls := make(notifications, 8)
	var c *CQ
	var round atomic.Int32
	c, err := a.CreateCQ(64, func(s Status) {
		switch round.Add(1) {
		case 1:
			complete(t, c, plain) // arm already cleared: must not fire
			calls <- s
		case 2:
			drain(c)
			if err := c.Arm(CQNotifyAny); err != nil {
				t.Error(err)
			}
			calls <- s
		default:
			calls <- s
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	mustArm(t, c, CQNotifyAny)
	complete(t, c, plain)
	calls.expect(t, StatusSuccess)
	calls.expectNone(t)
	// Round 2: arm from outside; the callback re-arms; the next completion
	// reaches round 3.
	drain(c)
	mustArm(t, c, CQNotifyAny)
	complete(t, c, plain)
	calls.expect(t, StatusSuccess)
	complete(t, c, plain)
	calls.expect(t, StatusSuccess)
	if n := round.Load(); n != 3 {
		t.Fatalf("%d callbacks, want 3", n)
	}
}

// Seed 002: "if a callback is in progress the provider must defer a new
// one until the running one returns". A slow callback holds while new arms
// fire; the deferred ones run after it, never overlapping.
func TestSeedCompletion_CallbacksSerialized(t *testing.T) {
	a := newTestAdapter(t, nil)
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	var running, overlaps, total atomic.Int32
	c, err := a.CreateCQ(64, func(Status) {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		entered <- struct{}{}
		if total.Add(1) == 1 {
			<-release
		}
		running.Add(-1)
	})
	if err != nil {
		t.Fatal(err)
	}
	mustArm(t, c, CQNotifyAny)
	complete(t, c, plain)
	<-entered // first callback is running and blocked
	for range 3 {
		mustArm(t, c, CQNotifyAny) // new arm, fired by the next completion
		complete(t, c, plain)
	}
	select {
	case <-entered:
		t.Fatal("a second callback started while the first was running")
	case <-time.After(quiet):
	}
	close(release)
	for range 3 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("deferred callback never ran")
		}
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping callbacks", overlaps.Load())
	}
}

// DESIGN.md: callbacks run outside the engine goroutine, so a callback
// that blocks never stalls completions.
func TestSeedCompletion_SlowCallbackDoesNotStallPush(t *testing.T) {
	a := newTestAdapter(t, nil)
	release := make(chan struct{})
	entered := make(chan struct{})
	c, err := a.CreateCQ(4096, func(Status) {
		close(entered)
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	mustArm(t, c, CQNotifyAny)
	done := make(chan struct{})
	go func() { // the engine
		defer close(done)
		for range 1000 {
			c.core().Push(&plain)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("pushes stalled behind a blocked callback")
	}
	<-entered
}

// Seed 002: an arm made while the CQ holds completions that arrived after
// the last notification must fire at once.
func TestSeedCompletion_ArmFiresAtOnceForNewCompletions(t *testing.T) {
	c, calls := newNotifyingCQ(t, 64)
	complete(t, c, plain) // arrives before any arm
	mustArm(t, c, CQNotifyAny)
	calls.expect(t, StatusSuccess)

	complete(t, c, plain) // arrives after that notification, before the next arm
	mustArm(t, c, CQNotifyAny)
	calls.expect(t, StatusSuccess)

	complete(t, c, solicited)
	mustArm(t, c, CQNotifySolicited)
	calls.expect(t, StatusSuccess)
}

// Seed 002 lets the provider choose when every queued completion was
// already there at the last notification; ndkxdp waits for a new one.
func TestSeedCompletion_ArmDoesNotRefireForNotifiedCompletions(t *testing.T) {
	c, calls := newNotifyingCQ(t, 64)
	mustArm(t, c, CQNotifyAny)
	complete(t, c, plain)
	calls.expect(t, StatusSuccess)
	mustArm(t, c, CQNotifyAny) // the CQ still holds the notified completion
	calls.expectNone(t)
	complete(t, c, plain)
	calls.expect(t, StatusSuccess)
}

// An arm made after the consumer drained everything waits for the next
// completion.
func TestSeedCompletion_ArmOnEmptyCQWaits(t *testing.T) {
	c, calls := newNotifyingCQ(t, 64)
	complete(t, c, plain)
	drain(c)
	mustArm(t, c, CQNotifyAny)
	calls.expectNone(t)
	complete(t, c, plain)
	calls.expect(t, StatusSuccess)
}

// Seed 002 table: the effective type when NdkArmCq is called a second time
// before the first arm fired (row = first, column = second).
func TestSeedCompletion_ArmCombinationTable(t *testing.T) {
	table := map[[2]CQNotify]CQNotify{
		{CQNotifyAny, CQNotifyAny}:             CQNotifyAny,
		{CQNotifyAny, CQNotifyErrors}:          CQNotifyAny,
		{CQNotifyAny, CQNotifySolicited}:       CQNotifyAny,
		{CQNotifyErrors, CQNotifyAny}:          CQNotifyAny,
		{CQNotifyErrors, CQNotifyErrors}:       CQNotifyErrors,
		{CQNotifyErrors, CQNotifySolicited}:    CQNotifySolicited,
		{CQNotifySolicited, CQNotifyAny}:       CQNotifyAny,
		{CQNotifySolicited, CQNotifyErrors}:    CQNotifySolicited,
		{CQNotifySolicited, CQNotifySolicited}: CQNotifySolicited,
	}
	for arms, want := range table {
		t.Run(fmt.Sprintf("%v_then_%v", arms[0], arms[1]), func(t *testing.T) {
			c, calls := newNotifyingCQ(t, 64)
			mustArm(t, c, arms[0])
			mustArm(t, c, arms[1])
			if got := effectiveArm(t, c, calls); got != want {
				t.Fatalf("effective arm %v, want %v", got, want)
			}
			calls.expectNone(t) // two arms combined: one callback
		})
	}
}

// effectiveArm probes an armed CQ with ever stronger events: a plain
// completion fires only ANY, a solicited receive fires SOLICITED too, a CQ
// error fires every arm.
func effectiveArm(t *testing.T, c *CQ, calls notifications) CQNotify {
	t.Helper()
	wait := func() (Status, bool) {
		select {
		case s := <-calls:
			return s, true
		case <-time.After(quiet):
			return 0, false
		}
	}
	complete(t, c, plain)
	if _, ok := wait(); ok {
		return CQNotifyAny
	}
	complete(t, c, solicited)
	if _, ok := wait(); ok {
		return CQNotifySolicited
	}
	c.core().Fail(StatusInternalError)
	if s, ok := wait(); ok && s == StatusInternalError {
		return CQNotifyErrors
	}
	t.Fatal("no probe fired the arm")
	return 0
}

// Seeds 003/000/004: a send with SEND_AND_SOLICIT_EVENT makes the peer's CQ
// notify after the receive completes, if the peer armed SOLICITED.
func TestSeedSend_SolicitedReceiveFiresSolicitedArm(t *testing.T) {
	c, calls := newNotifyingCQ(t, 64)
	mustArm(t, c, CQNotifySolicited)
	complete(t, c, cq.Entry{Type: OpReceive}) // earlier sends of the group
	complete(t, c, cq.Entry{Type: OpReceive})
	calls.expectNone(t)
	complete(t, c, solicited) // the last send carried the flag
	calls.expect(t, StatusSuccess)
	if n := drain(c); n != 3 {
		t.Fatalf("peer received %d completions, want all 3", n)
	}
}

// Seeds 003/000/004: the flag has no meaning to the receiver unless it
// armed SOLICITED: an ERRORS arm ignores it.
func TestSeedSend_SolicitedReceiveIgnoredWithoutSolicitedArm(t *testing.T) {
	c, calls := newNotifyingCQ(t, 64)
	mustArm(t, c, CQNotifyErrors)
	complete(t, c, solicited)
	calls.expectNone(t)
}

// Seeds 003/000/004: "requests that complete with an error always match
// the NDK_CQ_NOTIFY_SOLICITED type".
func TestSeedSend_ErrorCompletionMatchesSolicited(t *testing.T) {
	for _, status := range []Status{StatusCancelled, StatusAccessViolation, StatusBufferOverflow, StatusIOTimeout} {
		c, calls := newNotifyingCQ(t, 64)
		mustArm(t, c, CQNotifySolicited)
		complete(t, c, cq.Entry{Type: OpSend, Status: status})
		calls.expect(t, StatusSuccess)
	}
}

// NDKPI.md §6: ERRORS fires on CQ errors only, never on completions, not
// even error completions.
func TestSeedCompletion_ErrorsArmFiresOnlyOnCQError(t *testing.T) {
	c, calls := newNotifyingCQ(t, 64)
	mustArm(t, c, CQNotifyErrors)
	complete(t, c, plain)
	complete(t, c, solicited)
	complete(t, c, failed)
	calls.expectNone(t)
	c.core().Fail(StatusInternalError)
	calls.expect(t, StatusInternalError)
}

// NDKPI.md §4: overrun is reported with STATUS_BUFFER_OVERFLOW.
func TestSeedCompletion_OverrunNotifiesBufferOverflow(t *testing.T) {
	c, calls := newNotifyingCQ(t, 4)
	mustArm(t, c, CQNotifyErrors)
	for range c.Depth() {
		complete(t, c, plain)
	}
	calls.expectNone(t)
	if c.core().Push(&plain) {
		t.Fatal("push beyond depth accepted")
	}
	calls.expect(t, StatusBufferOverflow)
}

// Seed 002: a ReceiveAndInvalidate completion must be retrievable with
// NdkGetCqResults (without its Ex information) as well as with
// NdkGetCqResultsEx (Type and the invalidated token).
func TestSeedCompletion_ReceiveAndInvalidateVisibleToGetResults(t *testing.T) {
	c, _ := newNotifyingCQ(t, 8)
	qpCtx, reqCtx := "qp-1", &struct{ id int }{42}
	rai := cq.Entry{Type: OpReceiveAndInvalidate, BytesTransferred: 512,
		TypeSpecificCompletionOutput: 0x12345678, QPContext: qpCtx, RequestContext: reqCtx}

	complete(t, c, rai)
	var rs [2]Result
	if n := c.GetResults(rs[:]); n != 1 {
		t.Fatalf("GetResults returned %d results, want 1", n)
	}
	if rs[0] != (Result{Status: StatusSuccess, BytesTransferred: 512, QPContext: qpCtx, RequestContext: reqCtx}) {
		t.Fatalf("GetResults: %+v", rs[0])
	}

	complete(t, c, rai)
	var xs [2]ResultEx
	if n := c.GetResultsEx(xs[:]); n != 1 {
		t.Fatalf("GetResultsEx returned %d results, want 1", n)
	}
	x := xs[0]
	if x.Type != OpReceiveAndInvalidate || x.TypeSpecificCompletionOutput != 0x12345678 ||
		x.BytesTransferred != 512 || x.QPContext != qpCtx || x.RequestContext != reqCtx || x.Status != StatusSuccess {
		t.Fatalf("GetResultsEx: %+v", x)
	}
}

// Seed 002: the ReceiveAndInvalidate still invalidates the token at the
// receiver, and a later NdkInvalidate of that token fails. The engine does
// the invalidation through the adapter's token table when it completes the
// receive; this is that step, on fast-registered (invalidatable) memory.
func TestSeedCompletion_InvalidatedTokenStaysInvalid(t *testing.T) {
	a := newTestAdapter(t, nil)
	pd, _ := a.CreatePD()
	buf := make([]byte, 64)
	tok, err := a.regions.Register(memreg.Region{PD: pd.id, VA: addrOf(buf), Buf: buf,
		Access: memreg.AccessLocalWrite | memreg.AccessRemoteWrite, Invalidatable: true})
	if err != nil {
		t.Fatal(err)
	}
	if f := a.regions.Invalidate(pd.id, tok.Remote); f != memreg.OK { // the peer's IETH token
		t.Fatal(f)
	}
	if _, f := a.regions.CheckRemote(pd.id, tok.Remote, addrOf(buf), 8, memreg.AccessRemoteWrite); f == memreg.OK {
		t.Error("peer access with an invalidated token succeeded")
	}
	if f := a.regions.Invalidate(pd.id, tok.Remote); f == memreg.OK { // the later NdkInvalidate
		t.Error("a second invalidation of the token succeeded")
	}
}

// Seed 002: the consumer serializes GetResults, GetResultsEx and Arm per CQ
// but may call them from different goroutines; the provider needs no lock
// among them. Three goroutines take turns (a token passed on a channel)
// while two engine goroutines complete; -race checks the hand-offs.
func TestSeedCompletion_SerializedConsumerCallsFromManyGoroutines(t *testing.T) {
	const engines, per = 2, 5000
	a := newTestAdapter(t, nil)
	c, err := a.CreateCQ(engines*per, func(Status) {})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				c.core().Push(&plain)
			}
		}()
	}
	var got atomic.Int64
	turn := make(chan struct{}, 1)
	turn <- struct{}{}
	deadline := time.Now().Add(20 * time.Second)
	var cwg sync.WaitGroup
	for g := range 3 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			var rs [7]Result
			var xs [5]ResultEx
			for got.Load() < engines*per && time.Now().Before(deadline) {
				<-turn
				switch g {
				case 0:
					got.Add(int64(c.GetResults(rs[:])))
				case 1:
					got.Add(int64(c.GetResultsEx(xs[:])))
				case 2:
					if err := c.Arm(CQNotifyAny); err != nil {
						t.Error(err)
					}
				}
				turn <- struct{}{}
			}
		}()
	}
	wg.Wait()
	cwg.Wait()
	if got.Load() != engines*per {
		t.Fatalf("consumed %d of %d", got.Load(), engines*per)
	}
}

func TestCQArmErrors(t *testing.T) {
	a := newTestAdapter(t, nil)
	c, _ := a.CreateCQ(8, func(Status) {})
	if err := c.Arm(CQNotify(3)); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("Arm(3): %v", err)
	}
	polled, _ := a.CreateCQ(8, nil)
	if err := polled.Arm(CQNotifyAny); !errors.Is(err, ErrInvalidDeviceRequest) {
		t.Errorf("Arm on a CQ without callback: %v", err)
	}
	c.Close()
	if err := c.Arm(CQNotifyAny); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("Arm after Close: %v", err)
	}
	c.Close() // second close is a no-op
}

// Seed 002 / NDKPI.md §8: closing the CQ waits for a running callback, and
// none follows.
func TestCQCloseWaitsForCallbackAndNoneFollows(t *testing.T) {
	a := newTestAdapter(t, nil)
	entered := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	c, _ := a.CreateCQ(8, func(Status) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
	})
	mustArm(t, c, CQNotifyAny)
	complete(t, c, plain)
	<-entered
	mustArm(t, c, CQNotifyAny) // would fire after the first returns
	complete(t, c, plain)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned during the callback")
	case <-time.After(quiet):
	}
	close(release)
	<-closed
	n := calls.Load()
	complete(t, c, plain)
	time.Sleep(quiet)
	if calls.Load() != n || n != 1 {
		t.Fatalf("%d callbacks, want 1 (the pending one is dropped by Close)", calls.Load())
	}
}

// The data path allocates nothing: engine push plus consumer GetResults
// and GetResultsEx, armed or not.
func TestCQPushAndGetResultsAllocateNothing(t *testing.T) {
	a := newTestAdapter(t, nil)
	c, _ := a.CreateCQ(64, func(Status) {})
	e := cq.Entry{Type: OpReceive, RequestContext: any(new(int)), QPContext: any(new(int))}
	var rs [4]Result
	var xs [4]ResultEx
	if n := testing.AllocsPerRun(1000, func() {
		c.core().Push(&e)
		c.core().Push(&e)
		c.GetResults(rs[:])
		c.GetResultsEx(xs[:])
	}); n != 0 {
		t.Fatalf("unarmed: %.1f allocs per push+get", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		_ = c.Arm(CQNotifyAny)
		c.core().Push(&e)
		c.GetResults(rs[:])
	}); n != 0 {
		t.Fatalf("armed: %.1f allocs per arm+push+get", n)
	}
}

func BenchmarkCQPushGetResults(b *testing.B) {
	a, _ := newAdapter(defaultConfig())
	defer a.Close()
	c, _ := a.CreateCQ(1024, nil)
	e := cq.Entry{Type: OpReceive}
	var rs [16]Result
	b.ReportAllocs()
	for b.Loop() {
		for range 16 {
			c.core().Push(&e)
		}
		c.GetResults(rs[:])
	}
}
