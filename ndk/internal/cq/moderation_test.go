package cq

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// A count-moderated notification waits for its count of completions since
// the last callback, then goes out once.
func TestModerationCountHoldsUntilCount(t *testing.T) {
	c, calls := newCQ(t, 64)
	c.Moderate(0, 16)
	c.Arm(ndkpi.CQNotifyAny)
	for range 15 {
		c.Push(&Entry{})
	}
	expectNoCall(t, calls)
	c.Push(&Entry{})
	expectCall(t, calls, ndkpi.StatusSuccess)
	expectNoCall(t, calls)
}

// A time-moderated notification goes out the interval after it fired,
// not before, even with a single completion.
func TestModerationIntervalReleasesAfterInterval(t *testing.T) {
	const interval = 30 * time.Millisecond
	c, calls := newCQ(t, 64)
	c.Moderate(interval, 0)
	c.Arm(ndkpi.CQNotifyAny)
	start := time.Now()
	c.Push(&Entry{})
	expectCall(t, calls, ndkpi.StatusSuccess)
	if d := time.Since(start); d < interval {
		t.Fatalf("callback after %v, before the %v interval", d, interval)
	}
}

// With both, the first to be met releases the notification: the count
// long before a 10 s interval, the interval long before a count of 1000.
func TestModerationCountOrIntervalWhicheverFirst(t *testing.T) {
	t.Run("CountFirst", func(t *testing.T) {
		c, calls := newCQ(t, 64)
		c.Moderate(10*time.Second, 4)
		c.Arm(ndkpi.CQNotifyAny)
		start := time.Now()
		for range 4 {
			c.Push(&Entry{})
		}
		expectCall(t, calls, ndkpi.StatusSuccess)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("callback after %v: waited for the interval", d)
		}
	})
	t.Run("IntervalFirst", func(t *testing.T) {
		c, calls := newCQ(t, 64)
		c.Moderate(20*time.Millisecond, 1000)
		c.Arm(ndkpi.CQNotifyAny)
		c.Push(&Entry{})
		expectCall(t, calls, ndkpi.StatusSuccess)
	})
}

// A CQ error is not held back: the held notification goes out so that the
// consumer drains, and its next Arm reports the error.
func TestModerationDoesNotHoldErrors(t *testing.T) {
	c, calls := newCQ(t, 64)
	c.Moderate(0, 1000)
	c.Arm(ndkpi.CQNotifyAny)
	c.Push(&Entry{})
	expectNoCall(t, calls)
	c.Fail(ndkpi.StatusInternalError)
	expectCall(t, calls, ndkpi.StatusSuccess)
	c.Arm(ndkpi.CQNotifyAny)
	expectCall(t, calls, ndkpi.StatusInternalError)
}

// TestModerationCoalescesCallbacks measures what moderation is for: a
// consumer that drains and re-arms in its callback, fed one completion at
// a time, gets about one callback per completion without moderation and
// one per count completions with it.
func TestModerationCoalescesCallbacks(t *testing.T) {
	const n, count = 1024, 16
	run := func(t *testing.T, interval time.Duration, count uint64) (callbacks, popped int64) {
		var c *CQ
		var cbs, pops atomic.Int64
		var err error
		c, err = New(n, func(ndkpi.Status) {
			cbs.Add(1)
			var e Entry
			for c.Pop(&e) {
				pops.Add(1)
			}
			c.Arm(ndkpi.CQNotifyAny)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Moderate(interval, count)
		c.Arm(ndkpi.CQNotifyAny)
		for range n {
			before := cbs.Load()
			c.Push(&Entry{})
			// Give the callback the chance to run and re-arm, as a
			// completion stream slower than the consumer would.
			for deadline := time.Now().Add(200 * time.Microsecond); cbs.Load() == before && time.Now().Before(deadline); {
				time.Sleep(10 * time.Microsecond)
			}
		}
		waitFor(t, 5*time.Second, "every completion popped", func() bool { return pops.Load() == n })
		return cbs.Load(), pops.Load()
	}
	const interval = 2 * time.Millisecond
	off, _ := run(t, 0, 0)
	// A count releases a notification once count completions arrived
	// since the last one delivered, so a completion pushed while the
	// callback still runs moves every later boundary: the last few can
	// stay held, as they do on a NIC with a count and no period. The
	// one-second interval releases that tail only; each held batch
	// fills far sooner.
	on, _ := run(t, time.Second, count)
	start := time.Now()
	timed, _ := run(t, interval, 0)
	elapsed := time.Since(start)
	t.Logf("%d completions: %d callbacks without moderation, %d with count %d (%.1f completions per callback), %d with interval %v over %v (%.1f per callback)",
		n, off, on, count, float64(n)/float64(on), timed, interval, elapsed.Round(time.Millisecond), float64(n)/float64(timed))
	if off < n/4 {
		t.Errorf("without moderation: %d callbacks for %d completions, want about one each", off, n)
	}
	if on > n/count+1 {
		t.Errorf("with count %d: %d callbacks for %d completions, want at most %d", count, on, n, n/count+1)
	}
	// At most one callback per interval, plus the first.
	if limit := int64(elapsed/interval) + 1; timed > limit {
		t.Errorf("with interval %v: %d callbacks in %v, want at most %d", interval, timed, elapsed, limit)
	}
}

// Resize keeps the queued completions in order and refuses a depth below
// them.
func TestResizeKeepsQueuedCompletions(t *testing.T) {
	c, err := New(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 10 {
		c.Push(&Entry{BytesTransferred: uint32(i)})
	}
	if err := c.Resize(8); err == nil {
		t.Fatal("resize to 8 with 10 queued succeeded")
	}
	if err := c.Resize(1000); err != nil || c.Cap() != 1024 {
		t.Fatalf("resize to 1000: %v, cap %d", err, c.Cap())
	}
	for i := 10; i < 1000; i++ {
		if !c.Push(&Entry{BytesTransferred: uint32(i)}) {
			t.Fatalf("push %d into the grown CQ failed", i)
		}
	}
	var e Entry
	for i := range 1000 {
		if !c.Pop(&e) || e.BytesTransferred != uint32(i) {
			t.Fatalf("pop %d: %v, got %d", i, c.Len(), e.BytesTransferred)
		}
	}
	if err := c.Resize(10); err != nil || c.Cap() != 16 {
		t.Fatalf("shrink to 10: %v, cap %d", err, c.Cap())
	}
}

// Resizing while two producers push loses, duplicates and reorders
// nothing.
func TestResizeUnderConcurrentPush(t *testing.T) {
	const per = 1500 // both together fit the smaller depth: no overrun
	c, err := New(8192, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				for !c.Push(&Entry{Type: ndkpi.OperationType(p), BytesTransferred: uint32(i)}) {
					t.Error("overrun")
					return
				}
			}
		}()
	}
	// Resizes from the consumer and from a goroutine of their own.
	stop := make(chan struct{})
	resized := make(chan struct{})
	go func() {
		defer close(resized)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.Resize(4096 << (i % 2))
			time.Sleep(50 * time.Microsecond)
		}
	}()
	defer func() { close(stop); <-resized }()
	var next [2]uint32
	var e Entry
	deadline := time.Now().Add(30 * time.Second)
	for got, i := 0, 0; got < 2*per; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("popped %d of %d", got, 2*per)
		}
		if i%97 == 0 {
			_ = c.Resize(8192 >> (i / 97 % 2)) // 8192 and 4096; too small is refused
		}
		for c.Pop(&e) {
			if e.BytesTransferred != next[e.Type] {
				t.Fatalf("producer %d: got %d, want %d", e.Type, e.BytesTransferred, next[e.Type])
			}
			next[e.Type]++
			got++
		}
	}
	wg.Wait()
}

// Count 1 releases at the completion that fired the arm, whatever the
// interval.
func TestModerationCountOneIsImmediate(t *testing.T) {
	c, calls := newCQ(t, 64)
	c.Moderate(10*time.Second, 1)
	c.Arm(ndkpi.CQNotifyAny)
	start := time.Now()
	c.Push(&Entry{})
	expectCall(t, calls, ndkpi.StatusSuccess)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("callback after %v: count 1 waited for the interval", d)
	}
}
