package queue

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// MaxCapacity bounds ring sizes; it keeps index arithmetic far from
// overflow and allocation sizes sane.
const MaxCapacity = 1 << 24

// SPSC is a bounded single-producer single-consumer ring of T.
//
// One goroutine calls the producer methods (TryPush), one the consumer
// methods (TryPop, Front, Advance); Len and Cap may be called from anywhere.
// Indices are free-running uint64 counters, masked on access, so they never
// wrap in practice.
type SPSC[T any] struct {
	_    cpu.CacheLinePad
	tail atomic.Uint64 // next slot to write; stored by the producer
	head atomic.Uint64 // next slot to read; stored by the consumer
	_    cpu.CacheLinePad

	// Producer-owned.
	prodTail   uint64
	cachedHead uint64
	_          cpu.CacheLinePad

	// Consumer-owned.
	consHead   uint64
	cachedTail uint64
	_          cpu.CacheLinePad

	mask uint64
	buf  []T
}

// NewSPSC returns a ring holding capacity elements; capacity is rounded up
// to a power of two.
func NewSPSC[T any](capacity int) (*SPSC[T], error) {
	n, err := roundCapacity(capacity)
	if err != nil {
		return nil, err
	}
	return &SPSC[T]{mask: n - 1, buf: make([]T, n)}, nil
}

// Cap returns the number of elements the ring holds when full.
func (q *SPSC[T]) Cap() int { return len(q.buf) }

// Len returns the number of elements queued; from a third goroutine the
// answer may be stale by the time it is used.
func (q *SPSC[T]) Len() int {
	h := q.head.Load()
	return int(q.tail.Load() - h)
}

// TryPush copies *v into the ring and publishes it; false if the ring is
// full. Producer only.
func (q *SPSC[T]) TryPush(v *T) bool {
	t := q.prodTail
	if t-q.cachedHead == uint64(len(q.buf)) {
		q.cachedHead = q.head.Load() // acquire: the consumer is done with those slots
		if t-q.cachedHead == uint64(len(q.buf)) {
			return false
		}
	}
	q.buf[t&q.mask] = *v
	q.prodTail = t + 1
	q.tail.Store(t + 1) // release: the slot is written
	return true
}

// TryPop moves the oldest element into *dst and frees its slot; false if the
// ring is empty. Consumer only.
func (q *SPSC[T]) TryPop(dst *T) bool {
	p := q.Front()
	if p == nil {
		return false
	}
	*dst = *p
	q.Advance()
	return true
}

// Front returns the oldest element in place, or nil if the ring is empty.
// The pointer stays valid until Advance. Consumer only.
func (q *SPSC[T]) Front() *T {
	h := q.consHead
	if h == q.cachedTail {
		q.cachedTail = q.tail.Load() // acquire: see the producer's writes
		if h == q.cachedTail {
			return nil
		}
	}
	return &q.buf[h&q.mask]
}

// Advance frees the slot Front returned. Calling it on an empty ring does
// nothing. Consumer only.
func (q *SPSC[T]) Advance() {
	h := q.consHead
	if h == q.cachedTail {
		return
	}
	var zero T
	q.buf[h&q.mask] = zero // drop references (request contexts) for the GC
	q.consHead = h + 1
	q.head.Store(h + 1) // release: the slot may be reused
}

func roundCapacity(capacity int) (uint64, error) {
	if capacity < 1 || capacity > MaxCapacity {
		return 0, fmt.Errorf("queue capacity %d out of range [1, %d]", capacity, MaxCapacity)
	}
	n := uint64(1)
	for n < uint64(capacity) {
		n <<= 1
	}
	return n, nil
}
