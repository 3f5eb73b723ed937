package porttest

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/queue"
)

// Direction names one way through a Pipe.
type Direction uint8

const (
	AtoB Direction = iota // frames end A transmits and end B receives
	BtoA                  // frames end B transmits and end A receives
)

func (d Direction) String() string {
	switch d {
	case AtoB:
		return "A->B"
	case BtoA:
		return "B->A"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// Verdict is a PipeConfig.Filter's decision about one frame.
type Verdict uint8

const (
	// Pass hands the frame to the random faults (Loss, Duplicate,
	// Reorder), which deliver it unchanged when none strikes.
	Pass Verdict = iota
	// Drop loses the frame.
	Drop
	// Duplicate delivers the frame twice in a row.
	Duplicate
)

// Pipe defaults.
const (
	DefaultPipeMaxFrame     = 10240 // a 9000-byte MTU frame and then some
	DefaultPipeDepth        = 256
	DefaultPipeReorderDepth = 3
)

// PipeConfig describes a Pipe. The zero value is a perfect link.
type PipeConfig struct {
	// Seed seeds each direction's PCG generator (math/rand/v2), so that
	// the same Seed and the same sequence of accepted Transmit calls give
	// the same deliveries, whatever the receiver's timing.
	Seed int64
	// Loss, Duplicate and Reorder are the probabilities that a frame the
	// Filter passes is lost, delivered twice in a row, or held back and
	// delivered after 1..ReorderDepth later transmitted frames. One draw
	// picks at most one of them, so their sum must not exceed 1.
	Loss, Duplicate, Reorder float64
	// ReorderDepth bounds how many later frames overtake a held-back one
	// (default DefaultPipeReorderDepth). A held frame waits for later
	// Transmit calls: if none come, it stays held.
	ReorderDepth int
	// MaxFrame is the largest frame (default DefaultPipeMaxFrame).
	MaxFrame int
	// Depth is how many frames each direction queues before Transmit
	// returns ErrTxFull (default DefaultPipeDepth). Only frames the peer
	// has not taken with Receive count; an accepted frame may still push
	// a duplicate or released held frames beyond Depth.
	Depth int
	// Filter, if set, sees every transmitted frame before the random
	// faults, on the transmitting goroutine, and decides its fate: a test
	// drops exactly the frame it wants. Frames it drops or duplicates
	// draw no random numbers. It must not keep frame.
	Filter func(dir Direction, frame []byte) Verdict
}

// PipeStats counts one direction's frames. Sent + Duplicated = Delivered +
// Dropped + frames currently held back for reordering.
type PipeStats struct {
	Sent       uint64 // frames Transmit accepted
	Delivered  uint64 // frames queued for the receiver, duplicates included
	Dropped    uint64 // frames lost by Filter, Loss, or a closed receiver
	Duplicated uint64 // extra copies delivered
	Reordered  uint64 // frames held back to be overtaken
	Full       uint64 // Transmit calls refused with ErrTxFull
}

// Pipe is two port.Ports joined in memory, for running engines without a
// network and without privileges. Each direction is a bounded queue of
// frames copied into buffers that are recycled through a free list, so
// that after warm-up no frame allocates. Each end is driven by its own
// goroutine; Stats may be read from anywhere at any time.
type Pipe struct {
	ends  [2]PipeEnd
	links [2]link
}

// NewPipe builds a pipe from cfg.
func NewPipe(cfg PipeConfig) (*Pipe, error) {
	for _, p := range []struct {
		name string
		v    float64
	}{{"Loss", cfg.Loss}, {"Duplicate", cfg.Duplicate}, {"Reorder", cfg.Reorder}} {
		if !(p.v >= 0 && p.v <= 1) {
			return nil, fmt.Errorf("porttest: pipe %s probability %v outside [0, 1]", p.name, p.v)
		}
	}
	if sum := cfg.Loss + cfg.Duplicate + cfg.Reorder; sum > 1 {
		return nil, fmt.Errorf("porttest: pipe Loss+Duplicate+Reorder = %v exceeds 1", sum)
	}
	if cfg.ReorderDepth < 0 || cfg.MaxFrame < 0 || cfg.Depth < 0 {
		return nil, fmt.Errorf("porttest: pipe ReorderDepth %d, MaxFrame %d, Depth %d: negative", cfg.ReorderDepth, cfg.MaxFrame, cfg.Depth)
	}
	if cfg.ReorderDepth == 0 {
		cfg.ReorderDepth = DefaultPipeReorderDepth
	}
	if cfg.MaxFrame == 0 {
		cfg.MaxFrame = DefaultPipeMaxFrame
	}
	if cfg.Depth == 0 {
		cfg.Depth = DefaultPipeDepth
	}
	if cfg.Depth > queue.MaxCapacity/4 {
		return nil, fmt.Errorf("porttest: pipe Depth %d exceeds %d", cfg.Depth, queue.MaxCapacity/4)
	}
	if cfg.ReorderDepth > cfg.Depth {
		return nil, fmt.Errorf("porttest: pipe ReorderDepth %d exceeds Depth %d", cfg.ReorderDepth, cfg.Depth)
	}
	p := &Pipe{}
	for d := range p.links {
		if err := p.links[d].init(Direction(d), &cfg); err != nil {
			return nil, err
		}
	}
	for i := range p.ends {
		e := &p.ends[i]
		e.maxFrame = cfg.MaxFrame
		e.tx, e.rx = &p.links[i], &p.links[1-i]
		e.peer = &p.ends[1-i]
		e.wake = make(chan struct{}, 1)
		e.timer = time.NewTimer(time.Hour)
		e.timer.Stop()
		e.batch = make([][]byte, 0, e.rx.wire.Cap())
	}
	return p, nil
}

// A returns end A, which transmits AtoB and receives BtoA.
func (p *Pipe) A() *PipeEnd { return &p.ends[0] }

// B returns end B, which transmits BtoA and receives AtoB.
func (p *Pipe) B() *PipeEnd { return &p.ends[1] }

// Stats returns the counters of one direction.
func (p *Pipe) Stats(dir Direction) PipeStats {
	if int(dir) >= len(p.links) {
		return PipeStats{}
	}
	c := &p.links[dir].stats
	return PipeStats{
		Sent:       c.sent.Load(),
		Delivered:  c.delivered.Load(),
		Dropped:    c.dropped.Load(),
		Duplicated: c.duplicated.Load(),
		Reordered:  c.reordered.Load(),
		Full:       c.full.Load(),
	}
}

// link is one direction. The transmitting end owns everything but wire's
// consumer side and free's producer side, which belong to the receiver.
type link struct {
	dir    Direction
	cfg    *PipeConfig
	faults bool // some probability is non-zero
	wire   *queue.SPSC[[]byte]
	free   *queue.SPSC[[]byte] // buffers the receiver released

	// Transmitter only.
	rng        *rand.Rand
	spare      [][]byte    // buffers the transmitter freed itself
	held       []heldFrame // frames held back, oldest first
	allocated  int
	maxBuffers int

	stats struct {
		sent, delivered, dropped, duplicated, reordered, full atomic.Uint64
	}
}

type heldFrame struct {
	frame []byte
	left  int // later Transmit calls before delivery
}

func (l *link) init(dir Direction, cfg *PipeConfig) error {
	var err error
	// Room for Depth-1 queued frames plus what one accepted Transmit may
	// add: the frame, its duplicate, every held frame.
	if l.wire, err = queue.NewSPSC[[]byte](cfg.Depth + 2 + cfg.ReorderDepth); err != nil {
		return fmt.Errorf("porttest: pipe %v queue: %w", dir, err)
	}
	// Buffers live on the wire, in the receiver's current batch (at most
	// a wire's worth), held back, or in one Transmit (two with a
	// duplicate). The free ring can take them all back.
	l.maxBuffers = 2*l.wire.Cap() + cfg.ReorderDepth + 2
	if l.free, err = queue.NewSPSC[[]byte](l.maxBuffers); err != nil {
		return fmt.Errorf("porttest: pipe %v free list: %w", dir, err)
	}
	l.dir = dir
	l.cfg = cfg
	l.faults = cfg.Loss+cfg.Duplicate+cfg.Reorder > 0
	l.rng = rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(dir)))
	l.spare = make([][]byte, 0, 2)
	l.held = make([]heldFrame, 0, cfg.ReorderDepth)
	return nil
}

// buffer returns an empty frame buffer of capacity MaxFrame, or nil when
// every buffer is out (which the sizing above rules out).
func (l *link) buffer() []byte {
	if n := len(l.spare); n > 0 {
		b := l.spare[n-1]
		l.spare = l.spare[:n-1]
		return b
	}
	var b []byte
	if l.free.TryPop(&b) {
		return b[:0]
	}
	if l.allocated < l.maxBuffers {
		l.allocated++
		return make([]byte, 0, l.cfg.MaxFrame)
	}
	return nil
}

func (l *link) drop(frame []byte) {
	l.stats.dropped.Add(1)
	l.spare = append(l.spare, frame[:0])
}

// deliver queues frame for the receiver; to a closed receiver it is lost.
func (l *link) deliver(frame []byte, to *PipeEnd) {
	if to.closed.Load() || !l.wire.TryPush(&frame) {
		l.drop(frame)
		return
	}
	l.stats.delivered.Add(1)
}

// fate decides what happens to a frame the Filter passed.
func (l *link) fate() (v Verdict, hold int) {
	if !l.faults {
		return Pass, 0
	}
	u := l.rng.Float64()
	switch c := l.cfg; {
	case u < c.Loss:
		return Drop, 0
	case u < c.Loss+c.Duplicate:
		return Duplicate, 0
	case u < c.Loss+c.Duplicate+c.Reorder:
		return Pass, 1 + l.rng.IntN(c.ReorderDepth)
	}
	return Pass, 0
}

// PipeEnd is one end of a Pipe; it implements port.Port.
type PipeEnd struct {
	tx, rx   *link
	peer     *PipeEnd
	maxFrame int
	closed   atomic.Bool

	bell  port.Bell
	wake  chan struct{} // the sleeping owner's wake-up, capacity 1
	timer *time.Timer

	batch [][]byte // buffers of the last Receive, at full length
}

var _ port.Port = (*PipeEnd)(nil)

// Receive implements port.Port. It releases the previous batch first.
func (e *PipeEnd) Receive(out [][]byte) int {
	e.Release()
	if e.closed.Load() {
		return 0
	}
	// The batch's capacity is a wire's worth, which the buffer count
	// assumes; a transmitter refilling the wire meanwhile waits.
	n, limit := 0, min(len(out), cap(e.batch))
	for n < limit {
		var f []byte
		if !e.rx.wire.TryPop(&f) {
			break
		}
		e.batch = append(e.batch, f)
		out[n] = f[:len(f):len(f)]
		n++
	}
	return n
}

// Release implements port.Port.
func (e *PipeEnd) Release() {
	for i, f := range e.batch {
		e.rx.free.TryPush(&f) // cannot fail: the ring holds every buffer
		e.batch[i] = nil
	}
	e.batch = e.batch[:0]
}

// Transmit implements port.Port. The frame's fate is decided here, on the
// caller's goroutine: Filter, then one random draw (and one more for the
// reorder distance).
func (e *PipeEnd) Transmit(segs [][]byte) error {
	if e.closed.Load() {
		return port.ErrClosed
	}
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	switch {
	case n == 0:
		return port.ErrEmptyFrame
	case n > e.maxFrame:
		return port.ErrTooLarge
	}
	l := e.tx
	if l.wire.Len() >= l.cfg.Depth {
		l.stats.full.Add(1)
		return port.ErrTxFull
	}
	f := l.buffer()
	if f == nil {
		l.stats.full.Add(1)
		return port.ErrTxFull
	}
	for _, s := range segs {
		f = append(f, s...) // within capacity: n <= MaxFrame
	}
	l.stats.sent.Add(1)

	v, hold := Pass, 0
	if l.cfg.Filter != nil {
		v = l.cfg.Filter(l.dir, f)
	}
	if v == Pass {
		v, hold = l.fate()
	}
	delivered := l.stats.delivered.Load()
	switch {
	case v == Drop:
		l.drop(f)
	case v == Duplicate:
		l.deliver(f, e.peer)
		if d := l.buffer(); d != nil {
			l.deliver(append(d, f...), e.peer)
			l.stats.duplicated.Add(1)
		}
	case hold == 0:
		l.deliver(f, e.peer)
	}
	// This frame was one more later frame for those held before it.
	kept := l.held[:0]
	for _, h := range l.held {
		if h.left--; h.left == 0 {
			l.deliver(h.frame, e.peer)
		} else {
			kept = append(kept, h)
		}
	}
	clear(l.held[len(kept):])
	l.held = kept
	if hold > 0 {
		l.held = append(l.held, heldFrame{frame: f, left: hold})
		l.stats.reordered.Add(1)
	}
	if l.stats.delivered.Load() != delivered {
		e.peer.Doorbell()
	}
	return nil
}

// Flush implements port.Port; a pipe's frames are in the peer's queue as soon
// as Transmit returns.
func (e *PipeEnd) Flush() error {
	if e.closed.Load() {
		return port.ErrClosed
	}
	return nil
}

// Wait implements port.Port.
func (e *PipeEnd) Wait(timeout time.Duration) error {
	return e.wait(timeout, true)
}

// WaitDoorbell implements port.DoorbellWaiter: Wait without looking at
// the wire. A delivery still ends it, since the sending end rings this
// end's doorbell for each (Transmit).
func (e *PipeEnd) WaitDoorbell(timeout time.Duration) error {
	return e.wait(timeout, false)
}

func (e *PipeEnd) wait(timeout time.Duration, rx bool) error {
	if e.closed.Load() {
		return port.ErrClosed
	}
	if timeout == 0 || (rx && e.rx.wire.Len() > 0) || !e.bell.Sleep() {
		return nil
	}
	// A frame queued between the check above and sleep rang the bell;
	// one queued before it is seen here.
	if rx && e.rx.wire.Len() > 0 {
		e.bell.Awake()
		return nil
	}
	if timeout < 0 {
		<-e.wake
	} else {
		e.timer.Reset(timeout)
		select {
		case <-e.wake:
			e.timer.Stop()
		case <-e.timer.C:
		}
	}
	e.bell.Awake()
	return nil
}

// Doorbell implements port.Port.
func (e *PipeEnd) Doorbell() {
	if e.bell.Ring() {
		select {
		case e.wake <- struct{}{}:
		default: // a wake-up is already waiting
		}
	}
}

// MaxFrame implements port.Port.
func (e *PipeEnd) MaxFrame() int { return e.maxFrame }

// Close implements port.Port. Frames sent to a closed end are dropped, as on a
// link nobody listens to.
func (e *PipeEnd) Close() error {
	e.closed.Store(true)
	e.Release()
	return nil
}
