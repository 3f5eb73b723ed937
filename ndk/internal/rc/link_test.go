package rc

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
)

// linkConfig sets the faults of one direction of a test link. Decisions
// come from a seeded generator in transmit order, so a seed replays the
// same fault pattern for the same frame sequence.
type linkConfig struct {
	Seed      uint64
	Loss      float64 // probability a frame is dropped
	Duplicate float64 // probability a frame is delivered twice
	Reorder   float64 // probability a frame is held back behind the next one
	// Filter, when set, sees every frame before the faults; returning
	// true drops it.
	Filter func(frame []byte) bool
}

const (
	linkSlots    = 8192
	linkMaxFrame = 4096 + 256
)

// inbox is one direction's delivery queue: a ring of fixed frame buffers,
// so the link itself allocates nothing after construction.
type inbox struct {
	mu     sync.Mutex
	bufs   [][]byte
	lens   []int
	head   int // next frame to receive
	n      int // frames queued
	lent   int // frames handed out by the last Receive
	wake   chan struct{}
	closed bool
}

func newInbox() *inbox {
	b := &inbox{bufs: make([][]byte, linkSlots), lens: make([]int, linkSlots), wake: make(chan struct{}, 1)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, linkMaxFrame)
	}
	return b
}

// testPort is one end of an in-memory link implementing port.Port.
type testPort struct {
	in, out *inbox
	cfg     linkConfig
	rng     *rand.Rand
	held    []byte // a frame held back for reordering
	heldBuf []byte
	scratch []byte
	timer   *time.Timer

	mu      sync.Mutex // guards the counters, read by tests
	dropped int
	duped   int
	moved   int
}

// newLink returns two connected ports; ab faults frames from a to b, ba
// from b to a.
func newLink(ab, ba linkConfig) (*testPort, *testPort) {
	x, y := newInbox(), newInbox()
	mk := func(in, out *inbox, c linkConfig) *testPort {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &testPort{in: in, out: out, cfg: c, rng: rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15)),
			heldBuf: make([]byte, linkMaxFrame), scratch: make([]byte, linkMaxFrame), timer: t}
	}
	return mk(x, y, ab), mk(y, x, ba)
}

var _ port.Port = (*testPort)(nil)

func (p *testPort) Receive(out [][]byte) int {
	b := p.in
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(out), b.n)
	for i := 0; i < n; i++ {
		s := (b.head + i) % linkSlots
		out[i] = b.bufs[s][:b.lens[s]]
	}
	b.lent = n
	return n
}

func (p *testPort) Release() {
	b := p.in
	b.mu.Lock()
	b.head = (b.head + b.lent) % linkSlots
	b.n -= b.lent
	b.lent = 0
	b.mu.Unlock()
}

// deliver copies a frame into the peer's inbox; false when it is full.
func (p *testPort) deliver(f []byte) bool {
	b := p.out
	b.mu.Lock()
	if b.n == linkSlots {
		b.mu.Unlock()
		return false
	}
	s := (b.head + b.n) % linkSlots
	b.lens[s] = copy(b.bufs[s], f)
	b.n++
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return true
}

func (p *testPort) room(k int) bool {
	b := p.out
	b.mu.Lock()
	defer b.mu.Unlock()
	return linkSlots-b.n >= k
}

func (p *testPort) Transmit(segs [][]byte) error {
	if len(segs) > port.MaxSegments {
		return port.ErrTooLarge
	}
	f := p.scratch[:0]
	for _, s := range segs {
		if len(f)+len(s) > linkMaxFrame {
			return port.ErrTooLarge
		}
		f = append(f, s...)
	}
	if !p.room(3) {
		return port.ErrTxFull
	}
	if p.cfg.Filter != nil && p.cfg.Filter(f) {
		p.count(&p.dropped)
		return nil
	}
	r := p.rng.Float64()
	switch {
	case r < p.cfg.Loss:
		p.count(&p.dropped)
		return nil
	case r < p.cfg.Loss+p.cfg.Duplicate:
		p.count(&p.duped)
		p.deliver(f)
	case r < p.cfg.Loss+p.cfg.Duplicate+p.cfg.Reorder && p.held == nil:
		p.count(&p.moved)
		p.held = p.heldBuf[:copy(p.heldBuf, f)]
		return nil
	}
	p.deliver(f)
	if p.held != nil {
		p.deliver(p.held)
		p.held = nil
	}
	return nil
}

func (p *testPort) count(c *int) {
	p.mu.Lock()
	*c++
	p.mu.Unlock()
}

func (p *testPort) faults() (dropped, duped, moved int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped, p.duped, p.moved
}

func (p *testPort) Flush() error {
	if p.held != nil {
		p.deliver(p.held)
		p.held = nil
	}
	return nil
}

func (p *testPort) Wait(timeout time.Duration) error {
	b := p.in
	b.mu.Lock()
	ready := b.n > 0
	b.mu.Unlock()
	if ready || timeout == 0 {
		return nil
	}
	if timeout < 0 {
		timeout = time.Hour
	}
	p.timer.Reset(timeout)
	select {
	case <-b.wake:
	case <-p.timer.C:
	}
	p.timer.Stop()
	return nil
}

func (p *testPort) Doorbell() {
	select {
	case p.in.wake <- struct{}{}:
	default:
	}
}

func (p *testPort) MaxFrame() int { return linkMaxFrame }
func (p *testPort) Close() error  { return nil }
