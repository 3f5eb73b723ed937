package queue

import (
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// MPMC is a bounded multi-producer multi-consumer ring of T: Dmitry
// Vyukov's bounded queue, as MPSC, with the consumers also claiming their
// position by a CAS on the head. It serves a shared receive queue, whose
// receives the engines of several device queues take at once.
//
// TryPush and TryPop may each be called from any number of goroutines.
type MPMC[T any] struct {
	_    cpu.CacheLinePad
	tail atomic.Uint64 // next position to claim for a push
	_    cpu.CacheLinePad
	head atomic.Uint64 // next position to claim for a pop
	_    cpu.CacheLinePad

	mask  uint64
	slots []mpscSlot[T]
}

// NewMPMC returns a ring holding capacity elements, rounded up to a power
// of two and to at least 2 (see NewMPSC).
func NewMPMC[T any](capacity int) (*MPMC[T], error) {
	n, err := roundCapacity(capacity)
	if err != nil {
		return nil, err
	}
	n = max(n, 2)
	q := &MPMC[T]{mask: n - 1, slots: make([]mpscSlot[T], n)}
	for i := range q.slots {
		q.slots[i].seq.Store(uint64(i))
	}
	return q, nil
}

// Cap returns the number of elements the ring holds when full.
func (q *MPMC[T]) Cap() int { return len(q.slots) }

// Len returns the number of claimed, not yet popped positions.
func (q *MPMC[T]) Len() int {
	h := q.head.Load()
	t := q.tail.Load()
	if t < h {
		return 0
	}
	return int(t - h)
}

// TryPush copies *v into the ring; false if the ring is full.
func (q *MPMC[T]) TryPush(v *T) bool {
	pos := q.tail.Load()
	for {
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load() // acquire: the slot's last consumer released it
		switch d := int64(seq - pos); {
		case d == 0:
			if q.tail.CompareAndSwap(pos, pos+1) {
				s.val = *v
				s.seq.Store(pos + 1) // release: publish to the consumers
				return true
			}
			pos = q.tail.Load()
		case d < 0:
			return false // still holds the element of pos-cap: full
		default:
			pos = q.tail.Load()
		}
	}
}

// TryPop moves the oldest element into *dst; false if the ring is empty
// or the oldest position's producer has not finished writing it. A CAS
// loop that retries only when another consumer took the same position.
func (q *MPMC[T]) TryPop(dst *T) bool {
	pos := q.head.Load()
	for {
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load() // acquire: the producer's write is visible
		switch d := int64(seq - (pos + 1)); {
		case d == 0:
			if q.head.CompareAndSwap(pos, pos+1) {
				*dst = s.val
				var zero T
				s.val = zero                  // drop references for the GC
				s.seq.Store(pos + q.mask + 1) // release: free for the producer of pos+cap
				return true
			}
			pos = q.head.Load()
		case d < 0:
			return false // empty, or its producer is still writing
		default:
			pos = q.head.Load()
		}
	}
}
