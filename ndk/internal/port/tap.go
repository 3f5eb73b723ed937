package port

import (
	"sync"
	"sync/atomic"
	"time"
)

// TapRing holds copies of the frames a set of ports moves, for a live
// capture (ndkxdp dump) that runs off the data path: the engines copy a
// frame into a free slot and go on; a consumer takes the slots at its own
// pace. When the ring is full or another engine is copying at that
// moment, the frame is dropped and counted instead of waiting.
type TapRing struct {
	mu    sync.Mutex
	snap  int
	buf   []byte // slots of snap bytes
	meta  []TapFrame
	head  uint64 // next slot to consume (guarded by mu)
	tail  uint64 // next slot to fill (guarded by mu)
	wake  chan struct{}
	drops atomic.Uint64
	seen  atomic.Uint64
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

// NewTapRing returns a ring of slots frames, each keeping the first snap
// bytes of a frame.
func NewTapRing(slots, snap int) *TapRing {
	return &TapRing{snap: snap, buf: make([]byte, slots*snap), meta: make([]TapFrame, slots), wake: make(chan struct{}, 1)}
}

// Drops returns how many frames did not fit; Seen how many the ports
// offered.
func (r *TapRing) Drops() uint64 { return r.drops.Load() }

// Seen returns how many frames the ports offered to the ring.
func (r *TapRing) Seen() uint64 { return r.seen.Load() }

// Wake returns a channel that receives after frames are added.
func (r *TapRing) Wake() <-chan struct{} { return r.wake }

// put copies the frame made of segs. It never waits.
func (r *TapRing) put(queue int, out bool, segs ...[]byte) {
	r.seen.Add(1)
	if !r.mu.TryLock() {
		r.drops.Add(1)
		return
	}
	n := uint64(len(r.meta))
	if r.tail-r.head == n {
		r.mu.Unlock()
		r.drops.Add(1)
		return
	}
	i := int(r.tail % n)
	slot := r.buf[i*r.snap : (i+1)*r.snap]
	k, total := 0, 0
	for _, s := range segs {
		total += len(s)
		k += copy(slot[k:], s)
	}
	r.meta[i] = TapFrame{Time: time.Now(), Queue: queue, Out: out, Length: total, Data: slot[:k]}
	r.tail++
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Take moves up to len(dst) frames into dst, copying their bytes into
// fresh slices, and returns how many.
func (r *TapRing) Take(dst []TapFrame) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(len(r.meta))
	k := 0
	for k < len(dst) && r.head != r.tail {
		m := r.meta[r.head%n]
		m.Data = append([]byte(nil), m.Data...)
		dst[k] = m
		r.head++
		k++
	}
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

// Unwrap returns the port c wraps.
func (c *capturePort) Unwrap() Port { return c.Port }

// Inner returns the innermost port under the wrappers of this package
// (Capture, Tap).
func Inner(p Port) Port {
	for range 8 {
		w, ok := p.(interface{ Unwrap() Port })
		if !ok {
			break
		}
		p = w.Unwrap()
	}
	return p
}
