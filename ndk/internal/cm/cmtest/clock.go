package cmtest

import (
	"container/heap"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
)

// Clock is a fake cm.Clock. Time stands still until Step or Advance moves
// it; timers then run in deadline order (ties in creation order) on the
// calling goroutine, without the clock's lock held.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers timerHeap
	seq    uint64
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now implements cm.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements cm.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) cm.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d < 0 {
		d = 0
	}
	t := &fakeTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.seq++
	heap.Push(&c.timers, t)
	return t
}

// Pending returns the number of timers not yet run or stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// Step runs the earliest pending timer, moving the clock to its deadline.
// It reports false when no timer is pending.
func (c *Clock) Step() bool {
	c.mu.Lock()
	for len(c.timers) > 0 {
		t := heap.Pop(&c.timers).(*fakeTimer)
		if t.stopped {
			continue
		}
		t.fired = true
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
		return true
	}
	c.mu.Unlock()
	return false
}

// next returns the deadline of the earliest pending timer.
func (c *Clock) next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers) > 0 {
		if t := c.timers[0]; !t.stopped {
			return t.at, true
		}
		heap.Pop(&c.timers)
	}
	return time.Time{}, false
}

// Advance runs every timer due within d, in order, and leaves the clock d
// later.
func (c *Clock) Advance(d time.Duration) {
	end := c.Now().Add(d)
	for {
		at, ok := c.next()
		if !ok || at.After(end) {
			break
		}
		c.Step()
	}
	c.mu.Lock()
	if end.After(c.now) {
		c.now = end
	}
	c.mu.Unlock()
}

// RunUntil steps timers until cond holds, no timer is pending, or the
// clock passed limit from now. It reports whether cond held.
func (c *Clock) RunUntil(cond func() bool, limit time.Duration) bool {
	end := c.Now().Add(limit)
	for !cond() {
		at, ok := c.next()
		if !ok || at.After(end) {
			return cond()
		}
		c.Step()
	}
	return true
}

// Drain runs timers until none is pending or the clock passed limit. It
// reports whether the queue emptied.
func (c *Clock) Drain(limit time.Duration) bool {
	return c.RunUntil(func() bool { return c.Pending() == 0 }, limit)
}

type fakeTimer struct {
	c       *Clock
	at      time.Time
	seq     uint64
	f       func()
	stopped bool
	fired   bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

type timerHeap []*fakeTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(*fakeTimer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
