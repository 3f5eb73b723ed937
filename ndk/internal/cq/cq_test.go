package cq

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// waitFor polls cond for up to d; bounded so a lost notification fails the
// test instead of hanging it.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// quiet gives the dispatcher time to (wrongly) deliver a callback.
const quiet = 50 * time.Millisecond

func newCQ(t *testing.T, depth int) (*CQ, chan ndkpi.Status) {
	t.Helper()
	calls := make(chan ndkpi.Status, 64)
	c, err := New(depth, func(s ndkpi.Status) { calls <- s })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, calls
}

func expectCall(t *testing.T, calls chan ndkpi.Status, want ndkpi.Status) {
	t.Helper()
	select {
	case s := <-calls:
		if s != want {
			t.Fatalf("callback status %#x, want %#x", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no callback (want status %#x)", want)
	}
}

func expectNoCall(t *testing.T, calls chan ndkpi.Status) {
	t.Helper()
	select {
	case s := <-calls:
		t.Fatalf("unexpected callback with status %#x", s)
	case <-time.After(quiet):
	}
}

func TestNewRejectsBadDepth(t *testing.T) {
	for _, d := range []int{0, -5, MaxDepth + 1} {
		if _, err := New(d, nil); err == nil {
			t.Errorf("New(%d): no error", d)
		}
	}
}

func TestPushPopKeepsFieldsAndOrder(t *testing.T) {
	c, _ := newCQ(t, 4)
	ctx := &struct{ n int }{7}
	for i := range 3 {
		e := Entry{Status: ndkpi.Status(i), BytesTransferred: 10 + uint32(i), Type: 0x8001,
			ProviderErrorCode: 5, TypeSpecificCompletionOutput: 0xabcd, QPContext: "qp", RequestContext: ctx}
		if !c.Push(&e) {
			t.Fatalf("push %d refused", i)
		}
	}
	var e Entry
	for i := range 3 {
		if !c.Pop(&e) {
			t.Fatalf("pop %d: empty", i)
		}
		if e.Status != ndkpi.Status(i) || e.BytesTransferred != 10+uint32(i) || e.Type != 0x8001 ||
			e.ProviderErrorCode != 5 || e.TypeSpecificCompletionOutput != 0xabcd || e.QPContext != "qp" || e.RequestContext != ctx {
			t.Fatalf("pop %d: %+v", i, e)
		}
	}
	if c.Pop(&e) {
		t.Fatal("pop from empty CQ succeeded")
	}
}

func TestOverrunEntersErrorStateAndNotifiesOnce(t *testing.T) {
	c, calls := newCQ(t, 2)
	c.Arm(ndkpi.CQNotifyErrors)
	for range 2 {
		if !c.Push(&Entry{}) {
			t.Fatal("push below capacity refused")
		}
	}
	expectNoCall(t, calls) // ERRORS ignores completions
	if c.Push(&Entry{}) {
		t.Fatal("push into a full CQ succeeded")
	}
	if c.Err() != ndkpi.StatusBufferOverflow {
		t.Fatalf("Err = %#x, want STATUS_BUFFER_OVERFLOW", c.Err())
	}
	expectCall(t, calls, ndkpi.StatusBufferOverflow)
	c.Push(&Entry{}) // a second overrun is not a second error
	c.Arm(ndkpi.CQNotifyErrors)
	expectNoCall(t, calls)
}

func TestErrorBeforeArmFiresOnNextArm(t *testing.T) {
	for _, n := range []ndkpi.CQNotify{ndkpi.CQNotifyErrors, ndkpi.CQNotifyAny, ndkpi.CQNotifySolicited} {
		c, calls := newCQ(t, 2)
		for range c.Cap() + 1 { // the last one overruns; nobody is armed
			c.Push(&Entry{})
		}
		expectNoCall(t, calls)
		c.Arm(n)
		expectCall(t, calls, ndkpi.StatusBufferOverflow)
	}
}

func TestFailReportsFatalStatus(t *testing.T) {
	c, calls := newCQ(t, 4)
	c.Arm(ndkpi.CQNotifySolicited)
	c.Fail(ndkpi.StatusInternalError)
	expectCall(t, calls, ndkpi.StatusInternalError)
	c.Fail(ndkpi.StatusBufferOverflow) // the first error stays
	if c.Err() != ndkpi.StatusInternalError {
		t.Fatalf("Err = %#x after a second Fail", c.Err())
	}
}

func TestArmRejectsUnknownTypeAndPollOnlyCQ(t *testing.T) {
	c, _ := newCQ(t, 4)
	if c.Arm(ndkpi.CQNotify(3)) {
		t.Error("Arm(3) accepted")
	}
	p, err := New(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Arm(ndkpi.CQNotifyAny) {
		t.Error("Arm on a CQ without callback accepted")
	}
}

func TestCloseWaitsForRunningCallback(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var returned atomic.Bool
	c, err := New(4, func(ndkpi.Status) {
		close(entered)
		<-release
		returned.Store(true)
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Arm(ndkpi.CQNotifyAny)
	c.Push(&Entry{})
	<-entered
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while the callback was running")
	case <-time.After(quiet):
	}
	close(release)
	<-closed
	if !returned.Load() {
		t.Fatal("Close returned before the callback did")
	}
}

func TestNoCallbackAfterClose(t *testing.T) {
	var calls atomic.Int32
	c, err := New(4, func(ndkpi.Status) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	c.Arm(ndkpi.CQNotifyAny)
	c.Close()
	c.Push(&Entry{}) // a QP outliving the close still completes
	c.Fail(ndkpi.StatusInternalError)
	if c.Arm(ndkpi.CQNotifyAny) {
		t.Fatal("Arm after Close accepted")
	}
	time.Sleep(quiet)
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d callbacks after Close", n)
	}
	var e Entry
	if !c.Pop(&e) {
		t.Fatal("completion pushed after Close is not retrievable")
	}
	c.Close() // idempotent
}

// TestStressNoLostNotification drives several producers against a consumer
// that only drains inside its callback and re-arms there. A lost wake-up
// leaves completions behind and fails on the deadline.
func TestStressNoLostNotification(t *testing.T) {
	for _, mode := range []ndkpi.CQNotify{ndkpi.CQNotifyAny, ndkpi.CQNotifySolicited} {
		t.Run(map[ndkpi.CQNotify]string{ndkpi.CQNotifyAny: "ANY", ndkpi.CQNotifySolicited: "SOLICITED"}[mode], func(t *testing.T) {
			const producers, per = 3, 20_000
			var got atomic.Int64
			var c *CQ
			var inCallback, overlap atomic.Int32
			var err error
			c, err = New(producers*per, func(s ndkpi.Status) {
				if inCallback.Add(1) != 1 {
					overlap.Add(1)
				}
				var e Entry
				for c.Pop(&e) {
					got.Add(1)
				}
				c.Arm(mode)
				inCallback.Add(-1)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Arm(mode)
			var wg sync.WaitGroup
			for p := range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(p), 1))
					for i := range per {
						// Under SOLICITED only solicited completions wake the
						// consumer; make the last one solicited so all drain.
						sol := i == per-1 || r.IntN(16) == 0
						if !c.Push(&Entry{Solicited: sol}) {
							t.Error("overrun")
							return
						}
						if r.IntN(64) == 0 {
							runtime.Gosched()
						}
					}
				}()
			}
			wg.Wait()
			waitFor(t, 20*time.Second, "every completion drained by callbacks", func() bool {
				return got.Load() == producers*per
			})
			if overlap.Load() != 0 {
				t.Fatalf("callbacks overlapped %d times", overlap.Load())
			}
		})
	}
}

func TestPushPopAllocateNothing(t *testing.T) {
	var calls atomic.Int64
	c, err := New(64, func(ndkpi.Status) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := any(new(int))
	in := Entry{Type: 2, RequestContext: ctx, QPContext: ctx}
	var out Entry
	if a := testing.AllocsPerRun(1000, func() {
		c.Push(&in)
		c.Pop(&out)
	}); a != 0 {
		t.Fatalf("unarmed push+pop: %.1f allocs", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		c.Arm(ndkpi.CQNotifyAny)
		c.Push(&in) // fires: clears the arm, wakes the callback goroutine
		c.Pop(&out)
	}); a != 0 {
		t.Fatalf("armed push+pop: %.1f allocs", a)
	}
	waitFor(t, 5*time.Second, "callbacks", func() bool { return calls.Load() > 0 })
}

func BenchmarkPushPop(b *testing.B) {
	c, _ := New(1024, nil)
	defer c.Close()
	var e Entry
	b.ReportAllocs()
	for b.Loop() {
		c.Push(&e)
		c.Pop(&e)
	}
}
