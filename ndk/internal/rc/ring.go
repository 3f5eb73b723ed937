package rc

import (
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// workRing is a work queue: the consumer goroutine that posts is its single
// producer, the engine its single consumer. Unlike queue.SPSC the engine
// reads any slot between the retired head and the published tail in place,
// because a request stays in its slot from post until it is acknowledged:
// go-back-N rebuilds frames from it, and copying a WQE out would cost as
// much as posting it.
type workRing[T any] struct {
	_    cpu.CacheLinePad
	tail atomic.Uint64 // published by the producer (release)
	_    cpu.CacheLinePad
	head atomic.Uint64 // retired by the engine (release)
	_    cpu.CacheLinePad

	// Producer-owned.
	prodTail   uint64
	cachedHead uint64
	_          cpu.CacheLinePad

	mask  uint64
	slots []T
}

func newWorkRing[T any](depth int) *workRing[T] {
	n := 1
	for n < depth {
		n <<= 1
	}
	return &workRing[T]{mask: uint64(n - 1), slots: make([]T, n)}
}

// reserve returns the next free slot for the producer to fill, or nil if
// the ring is full. The slot is invisible to the engine until publish.
func (r *workRing[T]) reserve() *T {
	t := r.prodTail
	if t-r.cachedHead == uint64(len(r.slots)) {
		r.cachedHead = r.head.Load() // acquire: the engine is done with the slot
		if t-r.cachedHead == uint64(len(r.slots)) {
			return nil
		}
	}
	return &r.slots[t&r.mask]
}

// publish makes the reserved slot visible to the engine.
func (r *workRing[T]) publish() {
	r.prodTail++
	r.tail.Store(r.prodTail) // release: the slot is written
}

// at returns slot i (a free-running index). Engine only, for
// head <= i < tail.
func (r *workRing[T]) at(i uint64) *T { return &r.slots[i&r.mask] }

// retire frees slots up to (not including) i for the producer. Engine only.
func (r *workRing[T]) retire(i uint64) { r.head.Store(i) }
