package cq

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/queue"
)

// Entry is one completion: NDK_RESULT_EX plus what the notification logic
// needs to know about it.
type Entry struct {
	Status                       ndkpi.Status
	BytesTransferred             uint32
	Type                         ndkpi.OperationType
	ProviderErrorCode            uint32
	TypeSpecificCompletionOutput uint64 // the invalidated token for ReceiveAndInvalidate
	QPContext                    any
	RequestContext               any
	// Solicited marks a receive completion of a send that carried
	// NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT (the BTH SE bit).
	Solicited bool
	// HasImmediate marks a receive completion of a SEND or RDMA WRITE
	// with immediate; Immediate is the ImmDt value as it travelled.
	HasImmediate bool
	Immediate    uint32
}

// Arm levels, ordered so that combining two arms is taking the larger: the
// NDKPI.md §8 table makes ANY absorb everything and SOLICITED absorb ERRORS.
const (
	armNone      = 0
	armErrors    = 1
	armSolicited = 2
	armAny       = 3
	armMask      = 3

	// countUnit is one completion in the arm word's upper 62 bits.
	countUnit = 4
)

// MaxDepth bounds New's depth.
const MaxDepth = queue.MaxCapacity

// CQ is a completion queue. Push may be called from any number of engine
// goroutines; Pop and Arm by one consumer at a time (NDKPI: the consumer
// serializes GetCqResults, GetCqResultsEx and ArmCq per CQ).
type CQ struct {
	// The completions are in a chain of rings: producers push into tail,
	// the consumer pops from head, and the two differ only after Resize,
	// which appends a ring and seals the old one (see Resize).
	tail   atomic.Pointer[segment]
	head   atomic.Pointer[segment] // stored by the consumer only
	resize sync.Mutex              // serializes Resize

	// word is count<<2 | arm level. count is the number of completions
	// pushed; producers add countUnit after publishing, so one atomic add
	// both counts and reads the arm, and a consumer that sets the arm reads
	// the count in the same operation. That pairing is what makes a
	// completion and a concurrent arm always see each other.
	word atomic.Uint64
	// solicited counts pushed completions that satisfy a SOLICITED arm; a
	// producer adds to it before its add to word.
	solicited atomic.Uint64

	// Snapshot at the last notification: the count in word when its arm was
	// cleared and the solicited count read right after.
	notifiedCount     atomic.Uint64
	notifiedSolicited atomic.Uint64

	popped uint64 // consumer-owned: completions taken by Pop

	errStatus   atomic.Uint32 // first CQ error, 0 while healthy
	errReported atomic.Bool

	// Notifications cleared from the arm but not yet delivered.
	pendingNormal atomic.Int64
	pendingError  atomic.Int64

	// Interrupt moderation (NdkControlCqInterruptModeration, moderation.go):
	// modCount and modInterval are set by the consumer and read by the
	// dispatcher; modTarget is the completion count that releases a held
	// notification, published by the dispatcher while it holds one, so
	// that the producer whose completion reaches it wakes the dispatcher.
	modCount    atomic.Uint64
	modInterval atomic.Int64 // nanoseconds
	modTarget   atomic.Uint64
	delivered   uint64      // dispatcher-owned: the count at the last normal callback
	timer       *time.Timer // dispatcher-owned: the moderation interval

	notify func(status ndkpi.Status)
	wake   chan struct{}
	stop   chan struct{}
	exited chan struct{}
	closed atomic.Bool
}

// New returns a CQ holding at least depth completions (rounded up to a power
// of two). notify is called once per fired arm with the CQ status
// (STATUS_SUCCESS, or the CQ error); nil makes a CQ that is only polled.
func New(depth int, notify func(status ndkpi.Status)) (*CQ, error) {
	if depth < 1 || depth > MaxDepth {
		return nil, fmt.Errorf("cq depth %d out of range [1, %d]", depth, MaxDepth)
	}
	ring, err := queue.NewMPSC[Entry](depth)
	if err != nil {
		return nil, fmt.Errorf("cq ring: %w", err)
	}
	c := &CQ{
		notify: notify,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	seg := &segment{ring: ring}
	c.tail.Store(seg)
	c.head.Store(seg)
	if notify != nil {
		go c.dispatch()
	} else {
		close(c.exited)
	}
	return c, nil
}

// segment is one ring of the chain; next is set before the ring is
// sealed, so a consumer that finds it sealed finds next.
type segment struct {
	ring *queue.MPSC[Entry]
	next atomic.Pointer[segment]
}

// Cap returns the number of completions the CQ holds before it overruns.
func (c *CQ) Cap() int { return c.tail.Load().ring.Cap() }

// Len returns the number of completions queued (approximate while producers
// are pushing).
func (c *CQ) Len() int {
	n := 0
	for s := c.head.Load(); s != nil; s = s.next.Load() {
		n += s.ring.Len()
	}
	return n
}

// ErrResizeTooSmall is Resize's refusal of a depth below the completions
// the CQ holds (verbs' ib_resize_cq refuses it too: EINVAL).
var ErrResizeTooSmall = errors.New("cq: new depth is below the completions queued")

// Resize makes the CQ hold at least depth completions (NdkResizeCq;
// rounded up to a power of two), keeping the queued ones in order. It
// fails if depth is out of range or below Len. A ring's capacity is
// fixed, so a resize appends a new ring and seals the old one: producers
// that find it sealed push into the new one, and the consumer moves on
// once the old one is drained, so order holds without moving an entry and
// without a lock on Push or Pop. Until the old ring is drained the CQ may
// briefly hold more than depth. Notification state (counts, arms,
// moderation) counts completions, not ring positions, and carries over
// unchanged. Safe to call from any goroutine.
func (c *CQ) Resize(depth int) error {
	if depth < 1 || depth > MaxDepth {
		return fmt.Errorf("cq depth %d out of range [1, %d]", depth, MaxDepth)
	}
	c.resize.Lock()
	defer c.resize.Unlock()
	if n := c.Len(); depth < n {
		return fmt.Errorf("%w: depth %d, %d queued", ErrResizeTooSmall, depth, n)
	}
	ring, err := queue.NewMPSC[Entry](depth)
	if err != nil {
		return fmt.Errorf("cq ring: %w", err)
	}
	old := c.tail.Load()
	s := &segment{ring: ring}
	old.next.Store(s)
	c.tail.Store(s)
	old.ring.Seal()
	return nil
}

// Err returns the CQ error status (STATUS_BUFFER_OVERFLOW after an overrun,
// or what Fail set), 0 while the CQ is healthy.
func (c *CQ) Err() ndkpi.Status { return ndkpi.Status(c.errStatus.Load()) }

// Push queues a completion. It returns false if the CQ is full: the entry is
// dropped and the CQ enters the overrun state (STATUS_BUFFER_OVERFLOW,
// NDKPI.md §4: the CQ and its QPs are unusable). Safe for concurrent
// producers; allocates nothing.
func (c *CQ) Push(e *Entry) bool {
	for {
		ok, sealed := c.tail.Load().ring.TryPushOpen(e)
		if ok {
			break
		}
		if !sealed {
			c.Fail(ndkpi.StatusBufferOverflow)
			return false
		}
		// A Resize sealed the ring after we loaded it: the new tail is
		// stored already.
	}
	sol := e.Solicited || e.Status != ndkpi.StatusSuccess
	if sol {
		c.solicited.Add(1)
	}
	w := c.word.Add(countUnit)
	if t := c.modTarget.Load(); t != 0 && w>>2 >= t {
		c.releaseHeld(t)
	}
	if w&armMask == armNone {
		return true
	}
	c.notifyArmed(w, sol)
	return true
}

// notifyArmed is Push's slow path: the CQ was armed when this completion
// was counted.
func (c *CQ) notifyArmed(w uint64, sol bool) {
	for {
		switch lvl := w & armMask; {
		case lvl == armNone, lvl == armErrors, lvl == armSolicited && !sol:
			return
		}
		if c.word.CompareAndSwap(w, w&^armMask) {
			c.fireNormal(w)
			return
		}
		w = c.word.Load() // another completion counted, or the consumer re-armed
	}
}

// Fail puts the CQ into the error state with status (the engine uses
// STATUS_INTERNAL_ERROR for a fatal failure) and notifies an armed consumer.
// Only the first error is kept.
func (c *CQ) Fail(status ndkpi.Status) {
	if status == ndkpi.StatusSuccess || !c.errStatus.CompareAndSwap(0, uint32(status)) {
		return
	}
	for w := c.word.Load(); w&armMask != armNone; w = c.word.Load() {
		if c.word.CompareAndSwap(w, w&^armMask) {
			c.fireError()
			return
		}
	}
	// Not armed: the next Arm reports it. A notification that moderation
	// holds goes out now, so that the consumer drains and re-arms.
	c.kick()
}

// Arm requests one notification of kind n. It reports false if n is not an
// NDK_CQ_NOTIFY_* value, the CQ has no callback, or it is closed. Consumer
// only (serialized with Pop).
func (c *CQ) Arm(n ndkpi.CQNotify) bool {
	var lvl uint64
	switch n {
	case ndkpi.CQNotifyErrors:
		lvl = armErrors
	case ndkpi.CQNotifySolicited:
		lvl = armSolicited
	case ndkpi.CQNotifyAny:
		lvl = armAny
	default:
		return false
	}
	if c.notify == nil || c.closed.Load() {
		return false
	}
	w := c.word.Load()
	for {
		nw := w&^armMask | max(w&armMask, lvl)
		if c.word.CompareAndSwap(w, nw) {
			w = nw
			break
		}
		w = c.word.Load()
	}
	// Fire at once for what arrived before the arm (seed 002).
	for {
		lvl := w & armMask
		if lvl == armNone {
			return true // a producer fired it meanwhile
		}
		errPending := c.errStatus.Load() != 0 && !c.errReported.Load()
		if !errPending && !c.arrivedSinceNotification(w) {
			return true
		}
		if c.word.CompareAndSwap(w, w&^armMask) {
			if errPending {
				c.fireError()
			} else {
				c.fireNormal(w)
			}
			return true
		}
		w = c.word.Load()
	}
}

// arrivedSinceNotification reports whether the CQ holds completions and one
// that satisfies the arm in w arrived after the last notification. Counting
// by arrival is conservative: a new completion that was consumed while
// older ones are still queued may fire too, which the seed permits ("may
// fire at once otherwise").
func (c *CQ) arrivedSinceNotification(w uint64) bool {
	count := w >> 2
	if int64(count-c.popped) <= 0 { // popped can briefly lead count: pop before the producer's add
		return false
	}
	switch w & armMask {
	case armAny:
		return count > c.notifiedCount.Load()
	case armSolicited:
		return c.solicited.Load() > c.notifiedSolicited.Load()
	}
	return false
}

// fireNormal records the notification snapshot and hands a STATUS_SUCCESS
// callback to the dispatcher; w is the word whose arm the caller cleared.
func (c *CQ) fireNormal(w uint64) {
	c.notifiedCount.Store(w >> 2)
	c.notifiedSolicited.Store(c.solicited.Load())
	c.pendingNormal.Add(1)
	c.kick()
}

func (c *CQ) fireError() {
	c.errReported.Store(true)
	c.pendingError.Add(1)
	c.kick()
}

func (c *CQ) kick() {
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is already pending; the dispatcher drains all
	}
}

// dispatch runs the callbacks, one at a time, off the engine goroutines.
func (c *CQ) dispatch() {
	defer close(c.exited)
	for {
		select {
		case <-c.wake:
		case <-c.stop:
			return
		}
		for !c.closed.Load() {
			if c.pendingNormal.Load() > 0 {
				if !c.moderate() || c.closed.Load() {
					return // closed while moderation held it: dropped, as Close says
				}
				c.pendingNormal.Add(-1)
				c.delivered = c.word.Load() >> 2
				c.notify(ndkpi.StatusSuccess)
				continue
			}
			if c.pendingError.Load() > 0 {
				c.pendingError.Add(-1)
				c.notify(c.Err())
				continue
			}
			break
		}
	}
}

// Pop moves the oldest completion into *e; false if none is ready. Consumer
// only; allocates nothing.
func (c *CQ) Pop(e *Entry) bool {
	s := c.head.Load()
	for !s.ring.TryPop(e) {
		// Empty (or its oldest entry still being written): move on only
		// from a ring a Resize sealed and that gave up its last entry.
		n := s.next.Load()
		if n == nil || !s.ring.Drained() {
			return false
		}
		c.head.Store(n)
		s = n
	}
	c.popped++
	return true
}

// Close disarms the CQ, waits for a running callback to return and stops the
// callback goroutine; callbacks not yet started are dropped. It must not be
// called from the CQ's own callback (it would wait for itself). Completions
// may still be pushed and popped after Close (a QP that outlives its CQ's
// close still completes into it, NDKPI.md §8 object lifetime).
func (c *CQ) Close() {
	if c.closed.CompareAndSwap(false, true) {
		for w := c.word.Load(); w&armMask != armNone; w = c.word.Load() {
			if c.word.CompareAndSwap(w, w&^armMask) {
				break
			}
		}
		close(c.stop)
	}
	<-c.exited
}
