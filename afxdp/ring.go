package afxdp

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Desc is one entry of an RX or TX ring (struct xdp_desc): the UMEM address
// of the bytes, their length, and option bits such as PktContd.
type Desc = unix.XDPDesc

// PktContd in Desc.Options says the packet continues in the next descriptor
// (XDP_PKT_CONTD, include/uapi/linux/if_xdp.h). A multi-buffer packet is a
// run of descriptors ending at the first one without it.
const PktContd = unix.XDP_PKT_CONTD

// The four rings share one protocol (kernel net/xdp/xsk_queue.h, the
// producer/consumer comment): the producer acquire-loads the peer's consumer
// index, writes entries, then release-stores its producer index; the consumer
// acquire-loads the producer index, reads entries, then release-stores its
// consumer index. sync/atomic loads and stores are sequentially consistent,
// which is at least acquire/release. Indices run freely over uint32 and wrap
// at 2^32; an entry lives at index & mask. The shared indices and flags are
// words in the ring's memory, mmap'd from the kernel; the rings view them as
// *atomic.Uint32 (xdp_unsafe.go), so no plain load or store of a shared
// word compiles.
//
// Each side caches the peer's index and refreshes it only when the cache
// cannot satisfy a request, so a batch costs one atomic load and one atomic
// store however many entries it moves.

// producerRing is our side of a ring we fill and the kernel drains (fill, TX).
type producerRing[T uint64 | Desc] struct {
	entries    []T
	mask       uint32
	producer   *atomic.Uint32 // ours; release-stored by Submit
	consumer   *atomic.Uint32 // the kernel's; acquire-loaded
	flags      *atomic.Uint32 // XDP_RING_NEED_WAKEUP, set by the kernel
	cachedProd uint32         // next index Reserve hands out
	cachedCons uint32         // kernel consumer index as last loaded
	submitted  uint32         // value last stored to *producer
}

func (r *producerRing[T]) init(prod, cons, flags *atomic.Uint32, entries []T) {
	r.entries = entries
	r.mask = uint32(len(entries)) - 1
	r.producer, r.consumer, r.flags = prod, cons, flags
	r.submitted = prod.Load()
	r.cachedProd = r.submitted
	r.cachedCons = cons.Load()
}

// Size is the number of entries in the ring.
func (r *producerRing[T]) Size() uint32 { return uint32(len(r.entries)) }

// Free returns how many entries can be reserved now.
func (r *producerRing[T]) Free() uint32 {
	r.cachedCons = r.consumer.Load()
	return uint32(len(r.entries)) - (r.cachedProd - r.cachedCons)
}

// Reserve claims up to n entries for writing and returns the index of the
// first and how many it got (possibly 0). Write them with Set at start,
// start+1, ... and publish them with Submit.
func (r *producerRing[T]) Reserve(n uint32) (start, got uint32) {
	size := uint32(len(r.entries))
	free := size - (r.cachedProd - r.cachedCons)
	if free < n {
		r.cachedCons = r.consumer.Load()
		free = size - (r.cachedProd - r.cachedCons)
	}
	got = min(n, free)
	start = r.cachedProd
	r.cachedProd += got
	return start, got
}

// Set writes the entry at ring index i (as returned by Reserve, plus an
// offset); the index wraps onto the ring.
func (r *producerRing[T]) Set(i uint32, v T) { r.entries[i&r.mask] = v }

// Cancel gives back the last n reserved entries that were not submitted,
// for a caller that reserved more than it used.
func (r *producerRing[T]) Cancel(n uint32) {
	r.cachedProd -= min(n, r.cachedProd-r.submitted)
}

// Submit publishes every reserved entry to the kernel.
func (r *producerRing[T]) Submit() {
	if r.cachedProd == r.submitted {
		return
	}
	r.submitted = r.cachedProd
	r.producer.Store(r.submitted)
}

// Pending returns how many submitted entries the kernel has not consumed.
func (r *producerRing[T]) Pending() uint32 {
	return r.submitted - r.consumer.Load()
}

// NeedWakeup reports whether the kernel asks for a syscall before it looks
// at this ring again (XDP_RING_NEED_WAKEUP, bound with XDP_USE_NEED_WAKEUP).
func (r *producerRing[T]) NeedWakeup() bool {
	return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0
}

// consumerRing is our side of a ring the kernel fills and we drain (RX,
// completion).
type consumerRing[T uint64 | Desc] struct {
	entries    []T
	mask       uint32
	producer   *atomic.Uint32 // the kernel's; acquire-loaded
	consumer   *atomic.Uint32 // ours; release-stored by Release
	flags      *atomic.Uint32
	cachedProd uint32 // kernel producer index as last loaded
	cachedCons uint32 // next index Peek hands out
	released   uint32 // value last stored to *consumer
}

func (r *consumerRing[T]) init(prod, cons, flags *atomic.Uint32, entries []T) {
	r.entries = entries
	r.mask = uint32(len(entries)) - 1
	r.producer, r.consumer, r.flags = prod, cons, flags
	r.released = cons.Load()
	r.cachedCons = r.released
	r.cachedProd = prod.Load()
}

// Size is the number of entries in the ring.
func (r *consumerRing[T]) Size() uint32 { return uint32(len(r.entries)) }

// Peek returns the index of the first of up to n entries ready to read and
// how many there are (possibly 0). Each entry is handed out once: the next
// Peek starts after them. Read them with Get, then Release them.
func (r *consumerRing[T]) Peek(n uint32) (start, got uint32) {
	avail := r.cachedProd - r.cachedCons
	if avail < n {
		r.cachedProd = r.producer.Load()
		avail = r.cachedProd - r.cachedCons
	}
	got = min(n, avail)
	start = r.cachedCons
	r.cachedCons += got
	return start, got
}

// Get returns the entry at ring index i; the index wraps onto the ring.
func (r *consumerRing[T]) Get(i uint32) T { return r.entries[i&r.mask] }

// Cancel un-peeks the last n peeked entries that were not released, so the
// next Peek returns them again.
func (r *consumerRing[T]) Cancel(n uint32) {
	r.cachedCons -= min(n, r.cachedCons-r.released)
}

// Release hands the oldest n peeked entries back to the kernel; it never
// releases more than were peeked.
func (r *consumerRing[T]) Release(n uint32) {
	n = min(n, r.cachedCons-r.released)
	if n == 0 {
		return
	}
	r.released += n
	r.consumer.Store(r.released)
}

// FillQueue is the fill ring of one queue: frames we lend the kernel to
// receive into. It is not safe for concurrent use.
type FillQueue struct{ producerRing[uint64] }

// CompletionQueue is the completion ring of one queue: frames the kernel
// has finished transmitting and gives back. It is not safe for concurrent use.
type CompletionQueue struct{ consumerRing[uint64] }

// RxQueue is the RX ring of one socket: received packets. It is not safe for
// concurrent use.
type RxQueue struct{ consumerRing[Desc] }

// TxQueue is the TX ring of one socket: packets to transmit. It is not safe
// for concurrent use.
type TxQueue struct{ producerRing[Desc] }

// Ring memory that is not the kernel's, for tests that play the kernel's
// side. Each constructor takes the producer, consumer and flags words and
// the entry slice, whose length must be a power of two.

func newFillQueue(prod, cons, flags *atomic.Uint32, entries []uint64) *FillQueue {
	q := &FillQueue{}
	q.init(prod, cons, flags, entries)
	return q
}

func newCompletionQueue(prod, cons, flags *atomic.Uint32, entries []uint64) *CompletionQueue {
	q := &CompletionQueue{}
	q.init(prod, cons, flags, entries)
	return q
}

func newRxQueue(prod, cons, flags *atomic.Uint32, entries []Desc) *RxQueue {
	q := &RxQueue{}
	q.init(prod, cons, flags, entries)
	return q
}

func newTxQueue(prod, cons, flags *atomic.Uint32, entries []Desc) *TxQueue {
	q := &TxQueue{}
	q.init(prod, cons, flags, entries)
	return q
}

// FillFrom reserves up to limit fill entries, fills them with frames from a
// and submits them. It returns how many frames it lent the kernel; it stops
// early when the ring is full or a runs out.
func (q *FillQueue) FillFrom(a *FrameAllocator, limit uint32) uint32 {
	start, got := q.Reserve(min(limit, a.Available()))
	for i := uint32(0); i < got; i++ {
		addr, _ := a.Alloc() // cannot fail: got <= a.Available()
		q.Set(start+i, addr)
	}
	q.Submit()
	return got
}

// ReclaimTo takes up to limit completed frames off the ring, frees each into
// a and releases the entries. It returns how many it took and the first
// error from a.Free (a frame a did not hand out), after still freeing and
// releasing the rest.
func (q *CompletionQueue) ReclaimTo(a *FrameAllocator, limit uint32) (uint32, error) {
	start, got := q.Peek(limit)
	var first error
	for i := uint32(0); i < got; i++ {
		if err := a.Free(q.Get(start + i)); err != nil && first == nil {
			first = err
		}
	}
	q.Release(got)
	return got, first
}

// NextPacket returns how many of the leading descriptors form the first
// packet: the run up to and including the first without PktContd. It
// returns 0 when descs is empty or ends inside a packet.
func NextPacket(descs []Desc) int {
	for i := range descs {
		if descs[i].Options&PktContd == 0 {
			return i + 1
		}
	}
	return 0
}

// NextPacket is NextPacket over ring entries: of the avail peeked entries
// from index start, how many form the first packet, or 0 when they end
// inside a packet (Cancel those and Peek again later).
func (q *RxQueue) NextPacket(start, avail uint32) uint32 {
	for i := uint32(0); i < avail; i++ {
		if q.Get(start+i).Options&PktContd == 0 {
			return i + 1
		}
	}
	return 0
}

// SetPacket writes frags as one packet at ring index start, marking every
// descriptor but the last with PktContd and clearing it on the last,
// whatever the caller's Options said. Reserve len(frags) entries first; a
// chain needs a socket bound with MultiBuffer. It returns len(frags).
func (q *TxQueue) SetPacket(start uint32, frags []Desc) uint32 {
	last := len(frags) - 1
	for i, d := range frags {
		if i < last {
			d.Options |= PktContd
		} else {
			d.Options &^= PktContd
		}
		q.Set(start+uint32(i), d)
	}
	return uint32(len(frags))
}
