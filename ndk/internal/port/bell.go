package port

import "sync/atomic"

// Bell is the lost-wake-up-free doorbell of XSK and of porttest.Pipe. A ring
// costs the ringer two atomic operations while the owner is awake; only a
// ring that finds the owner asleep has to wake it through something
// heavier (a channel send, an eventfd write), which Ring reports. It is
// exported for porttest.Pipe, a Port outside this package.
//
// The protocol is the classic "announce, then re-check" handshake (the
// futex pattern; compare the sleeping/wakeup flags of Go's netpoller):
//
//	ringer: post work; pending = 1; if sleeping == 1 { wake the owner }
//	owner:  sleeping = 1; if pending { don't sleep } else { sleep }
//
// sync/atomic operations are sequentially consistent, so in the one total
// order either the owner's swap of pending comes after the ringer's store
// (the owner sees the ring and does not sleep) or the ringer's load of
// sleeping comes after the owner's store (the ringer wakes it). A ring
// that finds pending already set returns at once: that earlier ring is
// not consumed yet, so the owner's consuming swap, and the work check
// the owner makes after Wait returns, both come after this ringer's post.
type Bell struct {
	pending  atomic.Uint32
	sleeping atomic.Uint32
}

// Ring records a ring and reports whether the owner is asleep (or about to
// be) and must be woken by the caller.
func (b *Bell) Ring() bool {
	if b.pending.Load() != 0 {
		return false // an unconsumed ring is already on its way
	}
	if b.pending.Swap(1) != 0 {
		return false
	}
	return b.sleeping.Load() != 0
}

// Sleep announces that the owner is about to block. It returns false if a
// ring came first: the owner must not block then, and is awake again.
// After true the owner blocks and calls Awake when it resumes.
func (b *Bell) Sleep() bool {
	b.sleeping.Store(1)
	if b.pending.Swap(0) != 0 {
		b.sleeping.Store(0)
		return false
	}
	return true
}

// Awake ends a sleep. It consumes rings that arrived meanwhile: the owner
// checks its work after Wait returns, which covers their posts.
func (b *Bell) Awake() {
	b.sleeping.Store(0)
	b.pending.Store(0)
}
