package ndk

import (
	"sync"
)

// SRQ is a shared receive queue (NDK_SRQ, NdkCreateSrq): receives posted
// once and taken by whichever QP created on it (QPConfig.SRQ) receives a
// SEND first. A receive's completion goes to the receive CQ of the QP that
// took it, with that QP's context: NDKPI has no SRQ results call, so
// "NdkGetSrqResults" is GetResults on those CQs.
//
// The QPs on one SRQ may run on different engines; the receives are held
// in a lock-free ring from which every engine takes (rc.SRQ says why).
// A QP on an SRQ sends an RNR NAK only when the SRQ is empty.
//
// One goroutine posts with Receive at a time (NDKPI.md §8); Modify may run
// concurrently with it.
type SRQ struct {
	pd     *PD
	be     srqBackend // inproc_srq.go, daemon_mem.go
	notify func(Status)

	// users counts the QPs created on the SRQ and not closed; the close
	// completes when it reaches zero (NDKPI.md §8: an antecedent closed
	// before its successors completes once they are closed).
	mu       sync.Mutex
	users    int
	closing  bool
	finished bool
	done     chan struct{} // closed when the close completes
	recvSGL  sglCopy       // Receive's
}

// CreateSRQ creates an SRQ on the PD (NdkCreateSrq) holding depth
// receives of at most maxReceiveRequestSGE SGEs each. notify (may be nil)
// is NDK_FN_SRQ_NOTIFICATION_CALLBACK: with a non-zero notifyThreshold it
// is called once, with STATUS_SUCCESS, when the number of queued receives
// drops below the threshold, and again only after Modify re-arms it. It
// runs on a goroutine of the SRQ, never on an engine, and must not call
// Close or close the SRQ's PD or adapter. ndkxdp's SRQ has no fatal error
// of its own (a QP that fails leaves the SRQ's receives to the other QPs),
// so STATUS_INTERNAL_ERROR is reported only on a daemon-backed adapter,
// when the daemon could not take a receive from the SRQ's shared ring (a
// receive whose region was deregistered meanwhile, or a corrupted ring):
// the SRQ takes no more receives.
//
// It fails with STATUS_INVALID_PARAMETER when depth is outside [1,
// MaxSRQDepth], maxReceiveRequestSGE outside [0, MaxReceiveRequestSGE] or
// notifyThreshold outside [0, depth]; STATUS_INVALID_HANDLE once the PD
// is closing.
func (pd *PD) CreateSRQ(depth, maxReceiveRequestSGE, notifyThreshold int, notify func(Status)) (*SRQ, error) {
	const op = "create srq"
	info := &pd.adapter.info
	switch {
	case depth < 1 || depth > int(info.MaxSRQDepth):
		return nil, errorf(StatusInvalidParameter, op, "depth %d outside [1, %d]", depth, info.MaxSRQDepth)
	case maxReceiveRequestSGE < 0 || maxReceiveRequestSGE > int(info.MaxReceiveRequestSGE):
		return nil, errorf(StatusInvalidParameter, op, "MaxReceiveRequestSGE %d outside [0, %d]", maxReceiveRequestSGE, info.MaxReceiveRequestSGE)
	case notifyThreshold < 0 || notifyThreshold > depth:
		return nil, errorf(StatusInvalidParameter, op, "NotifyThreshold %d outside [0, depth %d]", notifyThreshold, depth)
	}
	return pd.be.createSRQ(depth, maxReceiveRequestSGE, notifyThreshold, notify)
}

// Receive posts a receive buffer to the SRQ (NdkSrqReceive). It fails
// inline with STATUS_INVALID_PARAMETER (more SGEs than the SRQ's
// maxReceiveRequestSGE, or more bytes than MaxTransferLength),
// STATUS_ACCESS_VIOLATION (an SGE its token does not allow to be written,
// or of another PD), STATUS_INSUFFICIENT_RESOURCES (depth receives are
// outstanding: queued, or taken by a QP and not completed yet) or STATUS_INVALID_HANDLE (closed). Allocates nothing when it
// succeeds.
func (s *SRQ) Receive(ctx any, sgl []SGE) error { return s.be.receive(ctx, s.recvSGL.hold(sgl)) }

// Modify changes the SRQ's depth (0 keeps it) and notify threshold
// (NdkModifySrq). A non-zero threshold arms the notification for when the
// queued receives drop below it, firing at once if they already are; 0
// keeps the threshold and whether it is armed. It completes inline and
// fails with STATUS_INVALID_PARAMETER for a negative value, a depth below
// the receives outstanding now or above Cap, or a threshold above the depth;
// STATUS_INVALID_HANDLE after Close.
func (s *SRQ) Modify(depth, notifyThreshold int) error { return s.be.modify(depth, notifyThreshold) }

// Cap is the largest depth Modify accepts: the depth given to CreateSRQ
// rounded up to a power of two. The ring is shared lock-free by the
// engines of the SRQ's QPs and is not reallocated under them.
func (s *SRQ) Cap() int { return min(s.be.capacity(), int(s.pd.adapter.info.MaxSRQDepth)) }

// Len is the number of receives queued and not yet taken by a QP.
// Through the daemon it asks the daemon (a control call), which counts
// the receives still in the shared ring too.
func (s *SRQ) Len() int { return s.be.length() }

// Close closes the SRQ (NdkCloseSrq): posts fail with
// STATUS_INVALID_HANDLE at once, the notification callback is not called
// again, and the receives no QP took are dropped (there is no QP whose CQ
// they could complete on). If QPs created on the SRQ are still open the
// close is pending and completes when the last one closes; Closed reports
// when. It waits for a running notification callback, so it must not be
// called from one. A second Close does nothing.
func (s *SRQ) Close() { s.be.close() }

// Closed returns a channel that is closed when the SRQ's close has
// completed.
func (s *SRQ) Closed() <-chan struct{} { return s.done }

// finishLocked completes the close and lets the PD finish its own; pd.mu is
// held.
func (s *SRQ) finishLocked() {
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return
	}
	s.finished = true
	s.mu.Unlock()
	close(s.done)
	pd := s.pd
	delete(pd.srqs, s)
	pd.maybeFinishLocked()
}

// attach counts a QP created on the SRQ; it fails once the SRQ is closing.
func (s *SRQ) attach() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.users++
	return true
}

// detach is a closed QP's release of the SRQ; the last one completes a
// pending close.
func (s *SRQ) detach() {
	s.mu.Lock()
	s.users--
	last := s.users == 0 && s.closing
	s.mu.Unlock()
	if last {
		s.pd.mu.Lock()
		s.finishLocked()
		s.pd.mu.Unlock()
	}
}

// QueryExtension is NdkQueryExtension on the SRQ (STATUS_NOT_SUPPORTED;
// extension.go says why).
func (s *SRQ) QueryExtension(id GUID, v Version) (any, error) { return queryExtension("srq", id, v) }
