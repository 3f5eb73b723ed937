package queue

import (
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// MPSC is a bounded multi-producer single-consumer ring of T: Dmitry
// Vyukov's bounded queue with a sequence number per slot. Producers claim a
// position with a CAS on the tail and publish the slot by storing its
// sequence; the single consumer needs no CAS.
//
// Producers may call TryPush concurrently; one goroutine at a time calls
// TryPop. Len and Cap may be called from anywhere.
type MPSC[T any] struct {
	_    cpu.CacheLinePad
	tail atomic.Uint64 // next position to claim; CAS by producers
	_    cpu.CacheLinePad
	head atomic.Uint64 // next position to read; stored by the consumer
	_    cpu.CacheLinePad

	mask  uint64
	slots []mpscSlot[T]
}

type mpscSlot[T any] struct {
	// seq == pos: free for the producer of pos; seq == pos+1: holds the
	// element of pos for the consumer.
	seq atomic.Uint64
	val T
}

// NewMPSC returns a ring holding capacity elements; capacity is rounded up
// to a power of two, and to at least 2: with one slot, a full slot's
// sequence (pos+1) would equal the next position's and read as free.
func NewMPSC[T any](capacity int) (*MPSC[T], error) {
	n, err := roundCapacity(capacity)
	if err != nil {
		return nil, err
	}
	n = max(n, 2)
	q := &MPSC[T]{mask: n - 1, slots: make([]mpscSlot[T], n)}
	for i := range q.slots {
		q.slots[i].seq.Store(uint64(i))
	}
	return q, nil
}

// Cap returns the number of elements the ring holds when full.
func (q *MPSC[T]) Cap() int { return len(q.slots) }

// Len returns the number of claimed, not yet consumed positions; it counts
// an element whose producer is still writing it.
func (q *MPSC[T]) Len() int {
	h := q.head.Load()
	t := q.tail.Load() &^ sealBit
	if t < h { // tail read after a concurrent pop moved head past it
		return 0
	}
	return int(t - h)
}

// TryPush copies *v into the ring; false if the ring is full. Safe for
// concurrent producers. The CAS loop retries only when another producer
// claimed the same position, so it makes progress system-wide.
func (q *MPSC[T]) TryPush(v *T) bool {
	pos := q.tail.Load()
	for {
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load() // acquire: the consumer has released this slot
		switch d := int64(seq - pos); {
		case d == 0:
			if q.tail.CompareAndSwap(pos, pos+1) {
				s.val = *v
				s.seq.Store(pos + 1) // release: publish to the consumer
				return true
			}
			pos = q.tail.Load()
		case d < 0:
			// The slot still holds the element of pos-cap: full.
			return false
		default:
			pos = q.tail.Load() // another producer got there first
		}
	}
}

// TryPop moves the oldest element into *dst; false if the ring is empty or
// the oldest position's producer has not finished writing it. Consumer only.
func (q *MPSC[T]) TryPop(dst *T) bool {
	pos := q.head.Load()
	s := &q.slots[pos&q.mask]
	if s.seq.Load() != pos+1 { // acquire: the producer's write is visible
		return false
	}
	*dst = s.val
	var zero T
	s.val = zero                  // drop references for the GC
	s.seq.Store(pos + q.mask + 1) // release: free for the producer of pos+cap
	q.head.Store(pos + 1)
	return true
}

// sealBit marks a sealed ring in its tail. Positions never reach it (2^63
// pushes), and a producer checks it before it claims a position.
const sealBit = 1 << 63

// Seal closes the ring to producers: every later TryPushOpen reports
// sealed and pushes nothing. Elements whose producers claimed a position
// before stay, and are popped as usual. A sealed ring takes only
// TryPushOpen (TryPush would take the seal for a full ring). The CQ seals
// the ring it replaces on a resize, so that no producer adds to it after
// the consumer has moved on.
func (q *MPSC[T]) Seal() {
	for {
		t := q.tail.Load()
		if t&sealBit != 0 || q.tail.CompareAndSwap(t, t|sealBit) {
			return
		}
	}
}

// TryPushOpen is TryPush on a ring that may be sealed: ok reports the
// push, sealed that Seal came first (and nothing was pushed); neither
// means full.
func (q *MPSC[T]) TryPushOpen(v *T) (ok, sealed bool) {
	pos := q.tail.Load()
	for {
		if pos&sealBit != 0 {
			return false, true
		}
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load()
		switch d := int64(seq - pos); {
		case d == 0:
			if q.tail.CompareAndSwap(pos, pos+1) {
				s.val = *v
				s.seq.Store(pos + 1)
				return true, false
			}
			pos = q.tail.Load()
		case d < 0:
			return false, false
		default:
			pos = q.tail.Load()
		}
	}
}

// Drained reports whether the ring is sealed and every element pushed
// before the seal has been popped: nothing more will come out of it.
// Consumer only.
func (q *MPSC[T]) Drained() bool {
	t := q.tail.Load()
	return t&sealBit != 0 && q.head.Load() == t&^sealBit
}
