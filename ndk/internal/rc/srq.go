package rc

import (
	"fmt"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ntstatus"
	"github.com/ndkxdp/ndkxdp/ndk/internal/queue"
)

// SRQ is a shared receive queue (NdkCreateSrq): receives posted once and
// taken by whichever QP on it receives a SEND first. Its completions go
// to the receive CQ of the QP that took it.
//
// The QPs on one SRQ may run on different engines (one per device queue),
// so several engine goroutines take receives at once while the consumer
// posts. The ring is a lock-free MPMC (queue.MPMC) rather than a ring
// under a per-SRQ lock: the take happens on the per-packet path (the FIRST
// or ONLY packet of every SEND), where a lock contended between engines
// would stall one engine behind another's packet.
type SRQ struct {
	regions     *memreg.Table
	pd          uint32
	maxSGE      int
	maxTransfer uint32
	ring        *queue.MPMC[recvWQE]

	depth     atomic.Int64 // receives it may hold (NdkModifySrq may lower it)
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
	// NotifyThreshold arms the limit event at creation (0: not armed).
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
	ring, err := queue.NewMPMC[recvWQE](cfg.Depth)
	if err != nil {
		return nil, fmt.Errorf("rc: SRQ ring: %w", err)
	}
	s := &SRQ{regions: cfg.Regions, pd: cfg.PD, maxSGE: cfg.MaxSGE, maxTransfer: cfg.MaxTransfer, ring: ring,
		events: make(chan struct{}, 1)}
	s.depth.Store(int64(cfg.Depth))
	if cfg.NotifyThreshold > 0 {
		s.threshold.Store(int64(cfg.NotifyThreshold))
		s.armed.Store(true)
		s.checkLimit() // an empty SRQ is below any threshold: fire at once
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
// reached) or InvalidHandle (closed). One goroutine posts at a time
// (NDKPI.md §8); it allocates nothing.
func (s *SRQ) PostReceive(ctx any, sgl []SGE) uint32 {
	if s.closed.Load() {
		return ntstatus.InvalidHandle
	}
	if len(sgl) > s.maxSGE {
		return ntstatus.InvalidParameter
	}
	if int64(s.ring.Len()) >= s.depth.Load() {
		return ntstatus.InsufficientResource
	}
	var w recvWQE
	var total uint64
	for i := range sgl {
		g := &sgl[i]
		b, f := s.regions.CheckLocal(s.pd, g.Token, g.Addr, g.Length, memreg.AccessLocalWrite)
		if f != memreg.OK {
			return ntstatus.AccessViolation
		}
		w.seg[i] = b
		total += uint64(g.Length)
	}
	if s.maxTransfer != 0 && total > uint64(s.maxTransfer) {
		return ntstatus.InvalidParameter
	}
	w.nseg = uint8(len(sgl))
	w.length = uint32(min(total, 1<<32-1))
	w.ctx = ctx
	if !s.ring.TryPush(&w) {
		return ntstatus.InsufficientResource
	}
	return ntstatus.Success
}

// Modify changes the depth (0 keeps it) and the notify threshold (0 keeps
// the threshold and its arming; NdkModifySrq). A non-zero threshold arms
// the limit event, which fires at once if fewer receives are queued. It
// returns InvalidParameter for a depth below the receives queued, above
// Cap, or a threshold above the depth.
func (s *SRQ) Modify(depth, threshold int) uint32 {
	if s.closed.Load() {
		return ntstatus.InvalidHandle
	}
	d := int(s.depth.Load())
	if depth != 0 {
		d = depth
	}
	if depth < 0 || threshold < 0 || d > s.ring.Cap() || d < s.ring.Len() || threshold > d {
		return ntstatus.InvalidParameter
	}
	s.depth.Store(int64(d))
	if threshold != 0 {
		s.threshold.Store(int64(threshold))
		s.armed.Store(true)
		s.checkLimit()
	}
	return ntstatus.Success
}

// Close refuses further posts and drops the receives no QP took: with no
// QP left there is no CQ to complete them on (the caller closes the SRQ
// after its QPs, NDKPI.md §8).
func (s *SRQ) Close() {
	s.closed.Store(true)
	var w recvWQE
	for s.ring.TryPop(&w) {
	}
}

// take moves the oldest queued receive into w; false if none is queued,
// which makes the responder send an RNR NAK. Engine goroutines only.
func (s *SRQ) take(w *recvWQE) bool {
	if !s.ring.TryPop(w) {
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
