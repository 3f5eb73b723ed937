package cq

import "time"

// Interrupt moderation (NdkControlCqInterruptModeration, verbs'
// ib_modify_cq with cq_count and cq_period): a normal notification that an
// arm fired is held by the dispatcher until count completions have arrived
// since the last notification, or interval has passed since it fired,
// whichever comes first. A CQ error is never held: it ends the wait, and
// the notification goes out with what arrived so far.
//
// The cost falls on the dispatcher, not on Push: a producer only compares
// the new count with modTarget, which is 0 unless the dispatcher holds a
// notification for a count, and wakes the dispatcher when it reaches it.

// Moderate sets the moderation: count > 0 releases a held notification
// once count completions arrived since the last one (count 1: at once),
// interval > 0 once interval passed since it fired. Both 0 turns
// moderation off (the default): every fired arm is delivered at once. It applies from the next
// notification the dispatcher takes up. Consumer only.
func (c *CQ) Moderate(interval time.Duration, count uint64) {
	c.modInterval.Store(int64(max(interval, 0)))
	c.modCount.Store(count)
}

// Moderation returns what Moderate set.
func (c *CQ) Moderation() (interval time.Duration, count uint64) {
	return time.Duration(c.modInterval.Load()), c.modCount.Load()
}

// releaseHeld wakes the dispatcher holding a notification for count t; the
// CAS makes only one of the producers that reach t do it.
func (c *CQ) releaseHeld(t uint64) {
	if c.modTarget.CompareAndSwap(t, 0) {
		c.kick()
	}
}

// moderate holds the pending normal notification as the moderation says.
// It reports false if the CQ closed meanwhile. Dispatcher only.
func (c *CQ) moderate() bool {
	interval := time.Duration(c.modInterval.Load())
	count := c.modCount.Load()
	if interval <= 0 && count <= 1 {
		return true
	}
	var target uint64
	if count > 0 {
		target = c.delivered + count // count 1: the completion that fired it
	}
	start := time.Now()
	for {
		if target != 0 {
			// Publish the target, then look at the count: a producer
			// adds to the count, then reads the target, so one of the
			// two sees the other (sequentially consistent atomics).
			c.modTarget.Store(target)
			if c.word.Load()>>2 >= target {
				c.modTarget.Store(0)
				return true
			}
		}
		if c.errStatus.Load() != 0 {
			c.modTarget.Store(0)
			return true
		}
		var expired <-chan time.Time
		if interval > 0 {
			left := interval - time.Since(start)
			if left <= 0 {
				c.modTarget.Store(0)
				return true
			}
			if c.timer == nil {
				c.timer = time.NewTimer(left)
			} else {
				c.timer.Reset(left)
			}
			expired = c.timer.C
		}
		select {
		case <-c.wake: // the target was reached, a CQ error, or a late kick: look again
		case <-expired:
		case <-c.stop:
			c.modTarget.Store(0)
			return false
		}
		if c.timer != nil {
			c.timer.Stop()
		}
	}
}
