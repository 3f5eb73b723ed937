package shm

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// CacheLine is the alignment of everything two processes write in a
// segment: rings, their indices and doorbells each start on a line of
// their own, so one side's stores do not invalidate the other's line.
const CacheLine = 64

// Bounds on a ring's geometry. They keep every offset computation well
// inside an int and a ring's slots addressable by a uint32 index.
const (
	MaxSlots    = 1 << 20
	MaxSlotSize = 1 << 16
	// RingHeaderSize is the producer index's cache line, then the
	// consumer index's.
	RingHeaderSize = 2 * CacheLine
)

// ErrBroken says a ring's peer wrote an index no correct peer could have
// written. The ring is dead for good: tear the connection down.
var ErrBroken = errors.New("shm: ring broken by its peer")

// RingLayout places a ring in a segment. Both sides must use the same
// layout; send it with the segment, and let the receiver check it against
// the segment (NewProducer and NewConsumer do). In memory, a ring is its
// producer index (a host-endian uint32) at Offset, its consumer index at
// Offset+CacheLine, and Slots records of SlotSize bytes from
// Offset+RingHeaderSize.
type RingLayout struct {
	Offset   int // from the start of the segment, a multiple of CacheLine
	SlotSize int // bytes per record, a multiple of 8 up to MaxSlotSize
	Slots    int // records the ring holds, a power of two up to MaxSlots
}

// Size returns the bytes the ring takes from Offset: the header, then the
// slots.
func (l RingLayout) Size() int { return RingHeaderSize + l.SlotSize*l.Slots }

// End returns the first cache-line-aligned offset after the ring, where
// the next ring or doorbell may start.
func (l RingLayout) End() int { return (l.Offset + l.Size() + CacheLine - 1) &^ (CacheLine - 1) }

func (l RingLayout) check(s *Segment) error {
	if l.SlotSize <= 0 || l.SlotSize%8 != 0 || l.SlotSize > MaxSlotSize {
		return fmt.Errorf("shm: ring slot size %d: must be a multiple of 8 up to %d", l.SlotSize, MaxSlotSize)
	}
	if l.Slots <= 0 || l.Slots&(l.Slots-1) != 0 || l.Slots > MaxSlots {
		return fmt.Errorf("shm: ring of %d slots: must be a power of two up to %d", l.Slots, MaxSlots)
	}
	return s.region("ring", l.Offset, l.Size(), CacheLine)
}

// The ring protocol is afxdp's (and the kernel's, net/xdp/xsk_queue.h):
// the producer loads the consumer index, writes slots, then stores its
// producer index; the consumer loads the producer index, reads slots, then
// stores its consumer index. sync/atomic is sequentially consistent, at
// least acquire/release, and the hardware keeps that across processes
// mapping the same pages. Indices run freely over uint32 and wrap at 2^32;
// a record lives in slot index & mask. Each side caches the peer's index
// and reloads it only when the cache cannot satisfy a request.
//
// The peer is another process and may be hostile. Each side therefore
// never reads back its own shared index (it keeps the value it stored),
// checks every load of the peer's index against what a correct peer could
// have stored, and only ever touches slots through index & mask. A bad
// index marks the ring broken (ErrBroken) instead of being believed.

// ring is what both sides share: the slots and the geometry.
type ring struct {
	slots    []byte
	slotSize uint32
	size     uint32 // number of slots
	mask     uint32
	err      error // why the ring is broken, or nil
}

func (r *ring) init(s *Segment, l RingLayout) {
	r.slotSize, r.size, r.mask = uint32(l.SlotSize), uint32(l.Slots), uint32(l.Slots)-1
	start := l.Offset + RingHeaderSize
	end := start + l.SlotSize*l.Slots
	r.slots = s.Bytes()[start:end:end]
}

// slot returns the slot for ring index i.
func (r *ring) slot(i uint32) []byte {
	off := (i & r.mask) * r.slotSize
	return r.slots[off : off+r.slotSize : off+r.slotSize]
}

// SlotSize returns the bytes of one record.
func (r *ring) SlotSize() int { return int(r.slotSize) }

// Slots returns the number of records the ring holds.
func (r *ring) Slots() int { return int(r.size) }

// Err returns nil, or why the ring is broken (wrapping ErrBroken).
func (r *ring) Err() error { return r.err }

// broken marks the ring broken; kept out of line so the fast paths carry
// no fmt.
//
//go:noinline
func (r *ring) broken(side string, got, lo, hi uint32) {
	r.err = fmt.Errorf("%w: %s index %d outside [%d, %d]", ErrBroken, side, got, lo, hi)
}

// Producer is the side of a ring that writes records. It is not safe for
// concurrent use.
type Producer struct {
	ring
	producer  *atomic.Uint32 // ours; stored by Publish, never read back
	consumer  *atomic.Uint32 // the peer's; loaded and checked
	next      uint32         // index the next Reserve hands out
	published uint32         // value last stored to *producer
	cons      uint32         // consumer index as last loaded and checked
}

// NewProducer attaches the producing side of the ring l in s. It takes the
// indices as it finds them, zero in a fresh segment, and fails if they are
// already inconsistent.
func NewProducer(s *Segment, l RingLayout) (*Producer, error) {
	if err := l.check(s); err != nil {
		return nil, err
	}
	p := &Producer{
		producer: word(s.Bytes(), l.Offset),
		consumer: word(s.Bytes(), l.Offset+CacheLine),
	}
	p.init(s, l)
	p.published = p.producer.Load()
	p.next = p.published
	p.cons = p.published - p.size // everything may still be unconsumed
	if !p.refresh() {
		return nil, p.err
	}
	return p, nil
}

// refresh loads the consumer index. A correct consumer only moves it
// forward, and never past what was published.
func (p *Producer) refresh() bool {
	if p.err != nil {
		return false
	}
	c := p.consumer.Load()
	if c-p.cons > p.published-p.cons {
		p.broken("consumer", c, p.cons, p.published)
		return false
	}
	p.cons = c
	return true
}

// Reserve returns the next free slot, SlotSize bytes to fill in place, or
// nil when the ring is full or broken (Err). Several Reserves may precede
// one Publish, which makes all their records visible at once.
func (p *Producer) Reserve() []byte {
	if p.next-p.cons == p.size && (!p.refresh() || p.next-p.cons == p.size) {
		return nil
	}
	s := p.slot(p.next)
	p.next++
	return s
}

// Publish makes every reserved record visible to the consumer.
func (p *Producer) Publish() {
	if p.next == p.published || p.err != nil {
		return
	}
	p.published = p.next
	p.producer.Store(p.published)
}

// TryPush copies rec into the next free slot and publishes it (with any
// records reserved before). It returns false when the ring is full or
// broken. A rec shorter than SlotSize leaves the rest of the slot as it
// was; a longer one is a bug and panics.
func (p *Producer) TryPush(rec []byte) bool {
	if len(rec) > int(p.slotSize) {
		panic("shm: TryPush: record longer than the ring's slot size")
	}
	s := p.Reserve()
	if s == nil {
		return false
	}
	copy(s, rec)
	p.Publish()
	return true
}

// Free returns how many records could be reserved now.
func (p *Producer) Free() int {
	p.refresh()
	if p.err != nil {
		return 0
	}
	return int(p.size - (p.next - p.cons))
}

// Consumer is the side of a ring that reads records. It is not safe for
// concurrent use.
type Consumer struct {
	ring
	producer *atomic.Uint32 // the peer's; loaded and checked
	consumer *atomic.Uint32 // ours; stored by Release, never read back
	next     uint32         // index the next Peek hands out
	released uint32         // value last stored to *consumer
	prod     uint32         // producer index as last loaded and checked
}

// NewConsumer attaches the consuming side of the ring l in s. It takes the
// indices as it finds them, zero in a fresh segment, and fails if they are
// already inconsistent.
func NewConsumer(s *Segment, l RingLayout) (*Consumer, error) {
	if err := l.check(s); err != nil {
		return nil, err
	}
	c := &Consumer{
		producer: word(s.Bytes(), l.Offset),
		consumer: word(s.Bytes(), l.Offset+CacheLine),
	}
	c.init(s, l)
	c.released = c.consumer.Load()
	c.next, c.prod = c.released, c.released
	if !c.refresh() {
		return nil, c.err
	}
	return c, nil
}

// refresh loads the producer index. A correct producer only moves it
// forward, and never more than a ring's worth past what was released.
func (c *Consumer) refresh() bool {
	if c.err != nil {
		return false
	}
	p := c.producer.Load()
	if p-c.prod > c.released+c.size-c.prod {
		c.broken("producer", p, c.prod, c.released+c.size)
		return false
	}
	c.prod = p
	return true
}

// Peek returns the next unread record in place, SlotSize bytes, or nil
// when the ring is empty or broken (Err). Each record is handed out once;
// Release gives the slots back to the producer, after which their bytes
// may change. A hostile producer may change them before that too: copy a
// record before validating it (TryPop does).
func (c *Consumer) Peek() []byte {
	if c.next == c.prod && (!c.refresh() || c.next == c.prod) {
		return nil
	}
	s := c.slot(c.next)
	c.next++
	return s
}

// Release gives every peeked record's slot back to the producer.
func (c *Consumer) Release() {
	if c.next == c.released || c.err != nil {
		return
	}
	c.released = c.next
	c.consumer.Store(c.released)
}

// TryPop copies the next record into dst (up to len(dst) bytes) and
// releases its slot, with any peeked before. It returns false when the
// ring is empty or broken.
func (c *Consumer) TryPop(dst []byte) bool {
	s := c.Peek()
	if s == nil {
		return false
	}
	copy(dst, s)
	c.Release()
	return true
}

// Len returns how many records are ready to peek now.
func (c *Consumer) Len() int {
	c.refresh()
	if c.err != nil {
		return 0
	}
	return int(c.prod - c.next)
}
