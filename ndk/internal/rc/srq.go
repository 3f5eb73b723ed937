package rc

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/queue"
)

// SRQ is a shared receive queue (NdkCreateSrq): receives posted once and
// taken by whichever QP on it receives a SEND first. Its completions go
// to the receive CQ of the QP that took it.
//
// The QPs on one SRQ may run on different engines (one per device queue),
// so several engine goroutines take receives at once while the consumer
// posts. The rings are lock-free MPMCs (queue.MPMC) rather than a ring
// under a per-SRQ lock: the take happens on the per-packet path (the FIRST
// or ONLY packet of every SEND), where a lock contended between engines
// would stall one engine behind another's packet.
//
// The receives themselves stay in a slab and the rings carry slot
// numbers: the consumer fills a free slot in place and queues its number,
// the engine that takes it scatters into the slot in place and, when the
// receive completes, returns the number to the free ring. A ring of whole
// WQEs copied each receive's 400 bytes of SGEs in and out, and measured
// 0.80 of per-QP receive queues' 64-byte rate; the slab measures 0.89-1.07
// (ndk's BenchmarkSRQReceiveRate, median of paired rounds).
type SRQ struct {
	regions     *memreg.Table
	pd          uint32
	maxSGE      int
	maxTransfer uint32
	slab        []recvWQE
	ring        *queue.MPMC[uint32] // posted receives, oldest first
	free        *queue.MPMC[uint32] // slab slots to post into

	// depth is the number of receives that may be outstanding, queued or
	// taken and not yet completed: the free ring holds depth minus those.
	// Bounding posts by the free ring keeps the post path off the ring's
	// indices, which the engines write on every take.
	depth    atomic.Int64
	modifyMu sync.Mutex // serializes Modify's depth changes
	// shelf holds the slab slots out of circulation (beyond the depth);
	// Modify only, under modifyMu.
	shelf     []uint32
	threshold atomic.Int64 // NotifyThreshold; 0: none
	armed     atomic.Bool
	events    chan struct{}
	closed    atomic.Bool
}

// SRQConfig describes an SRQ to create.
type SRQConfig struct {
	Regions *memreg.Table
	PD      uint32
	Depth   int
	MaxSGE  int
	// NotifyThreshold arms the limit event at creation (0: not armed); it
	// fires once a take leaves fewer receives queued.
	NotifyThreshold int
	MaxTransfer     uint32 // 0: 2^32-1
}

// NewSRQ creates an SRQ. Its ring holds Depth receives rounded up to a
// power of two; Modify can change the depth within that.
func NewSRQ(cfg SRQConfig) (*SRQ, error) {
	switch {
	case cfg.Regions == nil:
		return nil, fmt.Errorf("%w: SRQ needs a token table", ErrBadConfig)
	case cfg.Depth < 1 || cfg.Depth > queue.MaxCapacity:
		return nil, fmt.Errorf("%w: SRQ depth %d", ErrBadConfig, cfg.Depth)
	case cfg.MaxSGE < 0 || cfg.MaxSGE > MaxSGE:
		return nil, fmt.Errorf("%w: SRQ SGE limit %d above %d", ErrBadConfig, cfg.MaxSGE, MaxSGE)
	case cfg.NotifyThreshold < 0 || cfg.NotifyThreshold > cfg.Depth:
		return nil, fmt.Errorf("%w: SRQ threshold %d outside [0, depth %d]", ErrBadConfig, cfg.NotifyThreshold, cfg.Depth)
	}
	ring, err := queue.NewMPMC[uint32](cfg.Depth)
	if err != nil {
		return nil, fmt.Errorf("rc: SRQ ring: %w", err)
	}
	free, _ := queue.NewMPMC[uint32](ring.Cap())
	for i := range uint32(cfg.Depth) {
		free.TryPush(&i)
	}
	shelf := make([]uint32, 0, ring.Cap())
	for i := uint32(ring.Cap()); i > uint32(cfg.Depth); i-- {
		shelf = append(shelf, i-1)
	}
	s := &SRQ{regions: cfg.Regions, pd: cfg.PD, maxSGE: cfg.MaxSGE, maxTransfer: cfg.MaxTransfer,
		slab: make([]recvWQE, ring.Cap()), ring: ring, free: free, shelf: shelf, events: make(chan struct{}, 1)}
	segSlots(s.slab, cfg.MaxSGE)
	s.depth.Store(int64(cfg.Depth))
	if cfg.NotifyThreshold > 0 {
		// Armed, but not checked now: a new SRQ is empty, below any
		// threshold, and an event before the consumer could post would
		// spend the arm. It fires when a take leaves fewer receives.
		s.threshold.Store(int64(cfg.NotifyThreshold))
		s.armed.Store(true)
	}
	return s, nil
}

// Cap is the most receives the SRQ's ring can hold: the largest depth
// Modify accepts.
func (s *SRQ) Cap() int { return s.ring.Cap() }

// Len is the number of receives queued and not yet taken.
func (s *SRQ) Len() int { return s.ring.Len() }

// Events delivers one value each time the armed limit fires: the number of
// queued receives dropped below the threshold. The channel has room for
// one event; the consumer's notification goroutine reads it.
func (s *SRQ) Events() <-chan struct{} { return s.events }

// PostReceive queues a receive buffer (NdkSrqReceive). It returns Success,
// InvalidParameter (too many SGEs or bytes), AccessViolation (an SGE
// without local write in the SRQ's PD), InsufficientResources (depth
// receives outstanding: queued, or taken by a QP and not yet completed) or InvalidHandle (closed). One goroutine posts at a time
// (NDKPI.md §8); it allocates nothing.
func (s *SRQ) PostReceive(ctx any, sgl []SGE) ndkpi.Status {
	if s.closed.Load() {
		return ndkpi.StatusInvalidHandle
	}
	if len(sgl) > s.maxSGE {
		return ndkpi.StatusInvalidParameter
	}
	var total uint64
	for i := range sgl {
		total += uint64(sgl[i].Length)
	}
	if s.maxTransfer != 0 && total > uint64(s.maxTransfer) {
		return ndkpi.StatusInvalidParameter
	}
	var slot uint32
	if !s.free.TryPop(&slot) {
		return ndkpi.StatusInsufficientResources // depth receives outstanding
	}
	w := &s.slab[slot]
	for i := range sgl {
		g := &sgl[i]
		b, f := s.regions.CheckLocal(s.pd, g.Token, g.Addr, g.Length, memreg.AccessLocalWrite)
		if f != memreg.OK {
			clear(w.seg[:i])
			s.free.TryPush(&slot) // never full: the slot came from it
			return ndkpi.StatusAccessViolation
		}
		w.seg[i] = b
	}
	w.nseg = uint8(len(sgl))
	w.length = uint32(min(total, 1<<32-1))
	w.ctx = ctx
	s.ring.TryPush(&slot) // never full: it holds at most the slab's slots
	return ndkpi.StatusSuccess
}

// Modify changes the depth (0 keeps it) and the notify threshold (0 keeps
// the threshold and its arming; NdkModifySrq). A non-zero threshold arms
// the limit event, which fires at once if fewer receives are queued. It
// returns InvalidParameter for a depth below the receives outstanding,
// above Cap, or a threshold above the depth.
func (s *SRQ) Modify(depth, threshold int) ndkpi.Status {
	if s.closed.Load() {
		return ndkpi.StatusInvalidHandle
	}
	s.modifyMu.Lock()
	defer s.modifyMu.Unlock()
	old := int(s.depth.Load())
	d := old
	if depth != 0 {
		d = depth
	}
	if depth < 0 || threshold < 0 || d > s.ring.Cap() || threshold > d || !s.resize(old, d) {
		return ndkpi.StatusInvalidParameter
	}
	s.depth.Store(int64(d))
	if threshold != 0 {
		s.threshold.Store(int64(threshold))
		s.armed.Store(true)
		s.checkLimit()
	}
	return ndkpi.StatusSuccess
}

// resize moves the depth from old to d by moving slab slots between the
// free ring and the shelf; false, with nothing moved, if shrinking needs
// more free slots than there are, that is, if more than d receives are
// outstanding.
func (s *SRQ) resize(old, d int) bool {
	for ; old < d; old++ {
		slot := s.shelf[len(s.shelf)-1]
		s.shelf = s.shelf[:len(s.shelf)-1]
		s.free.TryPush(&slot) // never full: it holds at most the slab's slots
	}
	var slot uint32
	for n := 0; n < old-d; n++ {
		if !s.free.TryPop(&slot) {
			for ; n > 0; n-- { // undo
				slot = s.shelf[len(s.shelf)-1]
				s.shelf = s.shelf[:len(s.shelf)-1]
				s.free.TryPush(&slot)
			}
			return false
		}
		s.shelf = append(s.shelf, slot)
	}
	return true
}

// Close refuses further posts and drops the receives no QP took: with no
// QP left there is no CQ to complete them on (the caller closes the SRQ
// after its QPs, NDKPI.md §8).
func (s *SRQ) Close() {
	s.closed.Store(true)
	var slot uint32
	for s.ring.TryPop(&slot) {
		s.release(slot)
	}
}

// take takes the oldest queued receive, whose slab slot the taker owns
// until release; false if none is queued, which makes the responder send
// an RNR NAK. Engine goroutines only.
func (s *SRQ) take(slot *uint32) bool {
	if !s.ring.TryPop(slot) {
		return false
	}
	if s.armed.Load() {
		s.checkLimit()
	}
	return true
}

// checkLimit fires the armed limit event once if fewer receives than the
// threshold are queued: the arm is cleared first, so exactly one event per
// arm (NDKPI.md §3, NdkModifySrq). It never blocks.
func (s *SRQ) checkLimit() {
	if int64(s.ring.Len()) < s.threshold.Load() && s.armed.CompareAndSwap(true, false) {
		select {
		case s.events <- struct{}{}:
		default: // an event is already waiting to be delivered
		}
	}
}

// release clears a taken receive's slot and makes it free for posting.
func (s *SRQ) release(slot uint32) {
	w := &s.slab[slot]
	w.ctx = nil
	clear(w.seg[:w.nseg])
	s.free.TryPush(&slot) // never full: it holds at most the slab's slots
}
