package rc

import "sync/atomic"

// setTimer notes that q armed a timer that expires at d.
func (e *Engine) setTimer(q *QP, d int64) {
	if !q.t.timed {
		q.t.timed = true
		e.timed = append(e.timed, q)
	}
	if d < e.nextTimer {
		e.nextTimer = d
	}
}

// timers fires expired ACK, RNR and congestion timers, finds the next deadline and
// drops the QPs with no timer left from the timed list.
func (e *Engine) timers() {
	next := int64(noDeadline)
	// retry re-arms only q's own timers (q stays listed): compact in
	// place.
	n := 0
	for _, q := range e.timed {
		t := &q.t
		if t.ackHold != 0 {
			if e.now >= t.ackHold {
				t.ackHold = 0
				e.schedule(q)
			} else {
				next = min(next, t.ackHold)
			}
		}
		if t.rnrUntil != 0 {
			if e.now >= t.rnrUntil {
				t.rnrUntil = 0
				e.schedule(q)
			} else {
				next = min(next, t.rnrUntil)
			}
		}
		if t.rearmAt != 0 {
			if e.now >= t.rearmAt {
				t.rearmAt = 0
				e.reask(q) // may arm it again
			}
			if t.rearmAt != 0 {
				next = min(next, t.rearmAt)
			}
		}
		if t.ackDeadline != 0 && e.now >= t.ackDeadline {
			t.ackDeadline = 0
			atomic.AddUint64(&e.c.Timeouts, 1)
			t.n.Timeouts++
			e.retry(q, t.una, false)
		}
		if t.ackDeadline != 0 {
			next = min(next, t.ackDeadline)
		}
		cc := false
		if t.cc.limited || t.cc.paceWait {
			if d := e.ccTimers(q); d != noDeadline {
				next = min(next, d)
				cc = true
			}
		}
		if t.ackHold != 0 || t.rnrUntil != 0 || t.ackDeadline != 0 || t.rearmAt != 0 || cc {
			e.timed[n] = q
			n++
		} else {
			t.timed = false
		}
	}
	clear(e.timed[n:])
	e.timed = e.timed[:n]
	e.nextTimer = next
}
