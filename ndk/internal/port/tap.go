package port

import (
	"slices"
	"sync/atomic"
	"time"
)

// TapRing holds copies of the frames a set of ports moves, for a live
// capture (ndkxdp dump) that runs off the data path: each queue's engine
// copies a frame into a free slot of its own ring (single producer, single
// consumer: no lock, no engine waits for another) and goes on; a consumer
// takes the slots at its own pace. When a queue's ring is full, the frame
// is dropped and counted instead of waiting.
type TapRing struct {
	queues []tapQueue
	snap   int
	wake   chan struct{}
	drops  atomic.Uint64
	seen   atomic.Uint64
}

// tapQueue is one queue's ring: the engine of the queue produces, Take
// consumes. Slot i%len(meta) is the producer's while tail-head < len.
type tapQueue struct {
	buf        []byte // slots of snap bytes
	meta       []TapFrame
	head, tail atomic.Uint64
}

// TapFrame describes one captured frame. Data is the first Snap bytes
// (at most) of a frame of Length bytes.
type TapFrame struct {
	Time   time.Time
	Queue  int
	Out    bool // transmitted (else received)
	Length int
	Data   []byte
}

// NewTapRing returns a ring for the ports of queues queues, each with
// slots frames, each keeping the first snap bytes of a frame. Frames of a
// port tapped with a higher queue number are dropped.
func NewTapRing(queues, slots, snap int) *TapRing {
	r := &TapRing{snap: snap, queues: make([]tapQueue, queues), wake: make(chan struct{}, 1)}
	for i := range r.queues {
		r.queues[i] = tapQueue{buf: make([]byte, slots*snap), meta: make([]TapFrame, slots)}
	}
	return r
}

// Drops returns how many frames did not fit.
func (r *TapRing) Drops() uint64 { return r.drops.Load() }

// Seen returns how many frames the ports offered to the ring.
func (r *TapRing) Seen() uint64 { return r.seen.Load() }

// Wake returns a channel that receives after frames are added.
func (r *TapRing) Wake() <-chan struct{} { return r.wake }

// put copies the frame made of segs into queue's ring, from that queue's
// engine only. It never waits.
func (r *TapRing) put(queue int, out bool, segs ...[]byte) {
	r.seen.Add(1)
	if queue >= len(r.queues) {
		r.drops.Add(1)
		return
	}
	q := &r.queues[queue]
	n := uint64(len(q.meta))
	t := q.tail.Load()
	if t-q.head.Load() == n { // acquire: Take is done with the slot
		r.drops.Add(1)
		return
	}
	i := int(t % n)
	slot := q.buf[i*r.snap : (i+1)*r.snap]
	k, total := 0, 0
	for _, s := range segs {
		total += len(s)
		k += copy(slot[k:], s)
	}
	q.meta[i] = TapFrame{Time: time.Now(), Queue: queue, Out: out, Length: total, Data: slot[:k]}
	q.tail.Store(t + 1) // release: the slot is written
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Take moves up to len(dst) frames into dst, in time order within the
// batch, copying their bytes into fresh slices, and returns how many.
// One goroutine at a time may call it.
func (r *TapRing) Take(dst []TapFrame) int {
	k := 0
	for qi := range r.queues {
		q := &r.queues[qi]
		n := uint64(len(q.meta))
		h, t := q.head.Load(), q.tail.Load()
		for ; h != t && k < len(dst); h++ {
			m := q.meta[h%n]
			m.Data = append([]byte(nil), m.Data...)
			dst[k] = m
			k++
		}
		q.head.Store(h) // release: the slots are the producer's again
	}
	slices.SortStableFunc(dst[:k], func(a, b TapFrame) int { return a.Time.Compare(b.Time) })
	return k
}

// Tap wraps p so that, while *ring holds a ring, each frame p receives or
// transmits is offered to it. Off, it costs one atomic load per Receive
// batch and per Transmit.
func Tap(p Port, queue int, ring *atomic.Pointer[TapRing]) Port {
	return &tapPort{Port: p, queue: queue, ring: ring}
}

type tapPort struct {
	Port
	queue int
	ring  *atomic.Pointer[TapRing]
}

func (t *tapPort) Receive(out [][]byte) int {
	n := t.Port.Receive(out)
	if n > 0 {
		if r := t.ring.Load(); r != nil {
			for _, f := range out[:n] {
				r.put(t.queue, false, f)
			}
		}
	}
	return n
}

func (t *tapPort) Transmit(segs [][]byte) error {
	err := t.Port.Transmit(segs)
	if err == nil {
		if r := t.ring.Load(); r != nil {
			r.put(t.queue, true, segs...)
		}
	}
	return err
}

// Unwrap returns the port t wraps.
func (t *tapPort) Unwrap() Port { return t.Port }
