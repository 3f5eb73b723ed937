package cm

import (
	"container/heap"
	"time"
)

// Clock is the Manager's source of time and of timer callbacks. The real
// clock is SystemClock; tests inject a fake one (cmtest.Clock) so that CM
// timeouts of seconds run in microseconds and in a fixed order.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, on some goroutine, d after now, unless the
	// returned timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop cancels the call; it reports whether it did so before f ran.
	Stop() bool
}

// SystemClock is the wall clock of package time.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// timerEntry is one connection's pending deadline. A connection owns at
// most one entry (retransmission or time-wait), which rearming moves and
// cancelling removes (Connector.timerAt), so the heap holds no connection
// longer than its timer: a time-wait ended early frees its connection at
// once. gen still guards against an entry outliving its arming.
type timerEntry struct {
	at   time.Time
	conn *Connector
	gen  uint64
}

// deadlines is a min-heap of timer entries ordered by time, then by
// insertion, so that equal deadlines fire in the order they were set.
type deadlines struct {
	items []timerEntry
	seq   []uint64
	next  uint64
}

func (d *deadlines) Len() int { return len(d.items) }
func (d *deadlines) Less(i, j int) bool {
	if !d.items[i].at.Equal(d.items[j].at) {
		return d.items[i].at.Before(d.items[j].at)
	}
	return d.seq[i] < d.seq[j]
}
func (d *deadlines) Swap(i, j int) {
	d.items[i], d.items[j] = d.items[j], d.items[i]
	d.seq[i], d.seq[j] = d.seq[j], d.seq[i]
	d.items[i].conn.timerAt, d.items[j].conn.timerAt = i+1, j+1
}
func (d *deadlines) Push(x any) {
	e := x.(timerEntry)
	d.items = append(d.items, e)
	d.seq = append(d.seq, d.next)
	d.next++
	e.conn.timerAt = len(d.items)
}
func (d *deadlines) Pop() any {
	n := len(d.items) - 1
	e := d.items[n]
	d.items[n] = timerEntry{}
	d.items, d.seq = d.items[:n], d.seq[:n]
	e.conn.timerAt = 0
	return e
}

// set arms c's one entry for at: the entry moves if c has one.
func (d *deadlines) set(c *Connector, at time.Time) {
	if c.timerAt == 0 {
		heap.Push(d, timerEntry{at: at, conn: c, gen: c.timerGen})
		return
	}
	i := c.timerAt - 1
	d.items[i].at, d.items[i].gen = at, c.timerGen
	d.seq[i] = d.next // equal deadlines fire in the order they were set
	d.next++
	heap.Fix(d, i)
}

// remove drops c's entry, if it has one.
func (d *deadlines) remove(c *Connector) {
	if c.timerAt != 0 {
		heap.Remove(d, c.timerAt-1)
	}
}

func (d *deadlines) push(e timerEntry) { heap.Push(d, e) }
func (d *deadlines) peek() (timerEntry, bool) {
	if len(d.items) == 0 {
		return timerEntry{}, false
	}
	return d.items[0], true
}
func (d *deadlines) pop() timerEntry { return heap.Pop(d).(timerEntry) }

// imsOf converts an IBA time exponent to the milliseconds Linux's CM waits:
// 1 << max(t-8, 0), an approximation of 4.096 µs × 2^t (torvalds/linux
// drivers/infiniband/core/cm.c cm_convert_to_ms).
func imsOf(ibaTime uint8) time.Duration {
	shift := int(ibaTime) - 8
	if shift < 0 {
		shift = 0
	}
	return time.Duration(1<<shift) * time.Millisecond
}

// ackTimeout combines a CA's ACK delay and a path's packet lifetime into
// the local ACK timeout exponent, as cm.c cm_ack_timeout does: the larger of
// ack_delay and life_time+1, incremented when the other is within 50%.
func ackTimeout(caAckDelay, packetLifeTime uint8) uint8 {
	t := int(packetLifeTime) + 1
	d := int(caAckDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		inc := 0
		if t >= d-1 {
			inc = 1
		}
		t = d + inc
	}
	return uint8(min(31, t))
}
