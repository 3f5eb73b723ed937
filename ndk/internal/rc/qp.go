package rc

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/queue"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// sendWQE is one initiator request in the send ring. The consumer fills the
// request fields at post time; the engine owns the rest from then on.
type sendWQE struct {
	op          Op
	flags       ndkpi.OpFlag
	nseg        uint8
	length      uint32 // total bytes
	remoteAddr  uint64
	remoteToken uint32
	invToken    uint32
	localStatus ndkpi.Status // a local operation's outcome (local.go)
	compare     uint64       // CMP_SWAP's compare value
	swapAdd     uint64       // CMP_SWAP's swap value, FETCH_ADD's addend
	imm         uint32       // OpSendImm, OpWriteImm: the ImmDt
	ctx         any
	ud          UDDest // a UD QP's destination (ud.go)
	// seg holds the SGEs resolved at post time (inline: seg[0] aliases
	// inline). Both are the slot's share of arrays sized by the QP's
	// limits (newSendRing), so that a small QP costs little: fixed
	// arrays for MaxSGE SGEs and MaxInline bytes would be 5 KiB of a
	// depth-4 QP's two rings (ndk TestTenThousandQPs).
	seg    [][]byte
	inline []byte

	// Engine-owned.
	firstPSN rocev2.PSN
	npkts    uint32
	received uint32 // READ: response bytes placed so far
}

// recvWQE is one posted receive.
type recvWQE struct {
	ctx    any
	nseg   uint8
	length uint32
	seg    [][]byte // the slot's share of the ring's SGE array (segSlots)
}

// newSendRing makes q's send ring with room in each slot for as many
// SGEs as a request may carry (a READ's own limit included; one for
// inline data) and for cfg.InlineSize inline bytes.
func newSendRing(cfg *QPConfig) *workRing[sendWQE] {
	r := newWorkRing[sendWQE](cfg.SendDepth)
	k := max(1, cfg.MaxSendSGE, cfg.MaxReadSGE)
	segs := make([][]byte, len(r.slots)*k)
	var inline []byte
	if cfg.InlineSize > 0 {
		inline = make([]byte, len(r.slots)*cfg.InlineSize)
	}
	for i := range r.slots {
		r.slots[i].seg = segs[i*k : (i+1)*k : (i+1)*k]
		n := cfg.InlineSize
		r.slots[i].inline = inline[i*n : (i+1)*n : (i+1)*n]
	}
	return r
}

// segSlots gives each receive WQE of slots room for k SGEs, from one
// array.
func segSlots(slots []recvWQE, k int) {
	segs := make([][]byte, len(slots)*k)
	for i := range slots {
		slots[i].seg = segs[i*k : (i+1)*k : (i+1)*k]
	}
}

// QPConfig describes a QP to create.
type QPConfig struct {
	QPN     uint32 // unique on the adapter; never 0 or 1 (QP1 is the GSI)
	PD      uint32 // protection domain of the QP's memory
	RecvCQ  *cq.CQ
	SendCQ  *cq.CQ
	Context any // QPContext in every completion

	RecvDepth, SendDepth   int
	MaxRecvSGE, MaxSendSGE int
	MaxReadSGE             int
	InlineSize             int
	// MaxTransfer bounds the total length of one request or receive
	// buffer (AdapterInfo.MaxTransferLength); 0 means 2^32-1.
	MaxTransfer uint32
	// SRQ, when set, is where the QP takes its receives (NdkCreateQpWithSrq):
	// it has no receive queue of its own, and RecvDepth and MaxRecvSGE
	// are ignored.
	SRQ *SRQ
	// UD makes an unreliable-datagram QP (ud.go): ActivateUD instead of
	// Connect, and each send names its destination.
	UD bool
	// UC makes an unreliable-connection QP (uc.go): connected as an RC
	// QP, it carries SENDs and WRITEs that nothing acknowledges or
	// retransmits.
	UC bool
	// BlockSelfLoopback keeps a UD QP's own datagrams to a multicast
	// group it is a member of from coming back to it (verbs'
	// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB); the adapter's other members
	// still take them (multicast.go).
	BlockSelfLoopback bool
}

// QP is a reliable-connection queue pair. Post methods are called by the
// consumer: PostSend family from one goroutine at a time, PostReceive from
// one goroutine at a time (the two may run concurrently, NDKPI.md §8). All
// transport state lives in the QP's engine goroutine.
type QP struct {
	eng     *Engine
	regions *memreg.Table
	cfg     QPConfig
	sq      *workRing[sendWQE]
	rq      *workRing[recvWQE]

	state    atomic.Uint32 // State
	ready    atomic.Bool   // queued on the engine's ready ring
	flushReq atomic.Bool
	// writeArm is a one-shot wake-up for the next WRITE packet placed
	// for this QP (ArmPlacedWrites).
	writeArm atomic.Pointer[chan struct{}]
	drained  chan struct{} // closed by the engine: see Drained

	udMTU atomic.Uint32 // a UD QP's path MTU once active (ud.go)
	// recvRefill, when set, is asked to post the receives its consumer
	// has queued elsewhere when a datagram finds the receive queue empty
	// (SetReceiveRefill).
	recvRefill atomic.Pointer[func() bool]

	// Send-side producer state.
	deferred bool // a DEFER post since the last doorbell

	t qpTransport // engine-owned
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.cfg.QPN }

// State returns the QP's state.
func (q *QP) State() State { return State(q.state.Load()) }

// Queued returns how many requests the send and the receive queue hold:
// posted and not yet retired by the engine. It may count one that
// retires meanwhile, never one too few.
// A QP on an SRQ has no receive queue: 0.
func (q *QP) Queued() (send, recv uint64) {
	sh := q.sq.head.Load()
	send = q.sq.tail.Load() - sh
	if q.rq != nil {
		rh := q.rq.head.Load()
		recv = q.rq.tail.Load() - rh
	}
	return send, recv
}

// Drained returns a channel the engine closes once the QP is in the error
// state (failed, flushed or closed), every pending request completed and
// no READ response it owes is left to send: no DMA on the QP follows, and
// a receive from the channel is ordered after the engine's step that
// drained it. Requests posted later still complete, CANCELLED, without
// touching memory.
func (q *QP) Drained() <-chan struct{} { return q.drained }

// Context returns the QP context given at creation.
func (q *QP) Context() any { return q.cfg.Context }

// CreateQP registers a QP on the engine. The QP starts in StateInit:
// receives may be posted, sends fail with STATUS_CONNECTION_INVALID until
// Connect.
func (e *Engine) CreateQP(cfg QPConfig) (*QP, error) {
	switch {
	case cfg.QPN <= 1 || cfg.QPN > rocev2.PSNMask:
		return nil, fmt.Errorf("%w: QPN %#x outside [2, 2^24)", ErrBadConfig, cfg.QPN)
	case cfg.RecvCQ == nil || cfg.SendCQ == nil:
		return nil, fmt.Errorf("%w: QP needs a receive and an initiator CQ", ErrBadConfig)
	case cfg.SRQ == nil && (cfg.RecvDepth < 1 || cfg.RecvDepth > queue.MaxCapacity), cfg.SendDepth < 1 || cfg.SendDepth > queue.MaxCapacity:
		return nil, fmt.Errorf("%w: queue depths %d/%d", ErrBadConfig, cfg.RecvDepth, cfg.SendDepth)
	case cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > MaxSGE || cfg.MaxSendSGE < 0 || cfg.MaxSendSGE > MaxSGE ||
		cfg.MaxReadSGE < 0 || cfg.MaxReadSGE > MaxSGE:
		return nil, fmt.Errorf("%w: SGE limits above %d", ErrBadConfig, MaxSGE)
	case cfg.InlineSize < 0 || cfg.InlineSize > MaxInline:
		return nil, fmt.Errorf("%w: inline size %d above %d", ErrBadConfig, cfg.InlineSize, MaxInline)
	case cfg.UC && cfg.UD:
		return nil, fmt.Errorf("%w: a QP is UC or UD, not both", ErrBadConfig)
	}
	q := &QP{
		eng:     e,
		regions: e.regions,
		cfg:     cfg,
		sq:      newSendRing(&cfg),
		drained: make(chan struct{}),
	}
	if cfg.SRQ == nil {
		q.rq = newWorkRing[recvWQE](cfg.RecvDepth)
		segSlots(q.rq.slots, cfg.MaxRecvSGE)
	}
	var err error
	if derr := e.do(func() {
		switch {
		case e.qps[cfg.QPN] != nil:
			err = fmt.Errorf("%w: %#x", ErrQPNInUse, cfg.QPN)
		case len(e.qps) >= e.maxQPs:
			err = fmt.Errorf("%w: engine holds its maximum of %d QPs", ErrBadConfig, e.maxQPs)
		default:
			e.qps[cfg.QPN] = q
		}
	}); derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, err
	}
	return q, nil
}

// Connect moves the QP from Init to connected (RTR and RTS at once) with
// the given parameters.
func (q *QP) Connect(p ConnParams) error {
	switch {
	case q.cfg.UD:
		return fmt.Errorf("%w: a UD QP is not connected (ActivateUD)", ErrBadConfig)
	case !p.PathMTU.Valid():
		return fmt.Errorf("%w: path MTU %v", ErrBadConfig, p.PathMTU)
	case p.Local.QPN != q.cfg.QPN:
		return fmt.Errorf("%w: local QPN %#x is not this QP's %#x", ErrBadConfig, p.Local.QPN, q.cfg.QPN)
	case p.Remote.QPN <= 1 || p.Remote.QPN > rocev2.PSNMask:
		return fmt.Errorf("%w: remote QPN %#x outside [2, 2^24)", ErrBadConfig, p.Remote.QPN)
	case !p.Local.IP.IsValid() || !p.Remote.IP.IsValid() || p.Local.IP.Is4() != p.Remote.IP.Is4():
		return fmt.Errorf("%w: addresses %v -> %v", ErrBadConfig, p.Local.IP, p.Remote.IP)
	case p.InboundReadLimit < 0 || p.OutboundReadLimit < 0 || p.InboundReadLimit > 255 || p.OutboundReadLimit > 255:
		return fmt.Errorf("%w: read limits %d/%d", ErrBadConfig, p.InboundReadLimit, p.OutboundReadLimit)
	case p.RetryCount < 0 || p.RetryCount > 7 || p.RNRRetry < 0 || p.RNRRetry > 7:
		return fmt.Errorf("%w: retry counts %d/%d outside 0-7", ErrBadConfig, p.RetryCount, p.RNRRetry)
	case p.AckTimeout < 0:
		return fmt.Errorf("%w: negative ACK timeout", ErrBadConfig)
	}
	e := q.eng
	tc := e.traffic
	if p.Traffic != nil {
		tc = *p.Traffic
		if err := tc.Validate(); err != nil {
			return err
		}
	}
	var err error
	derr := e.do(func() {
		if e.qps[q.cfg.QPN] != q || q.t.connected || q.t.failed {
			err = fmt.Errorf("%w: connect from state %v", ErrBadState, q.State())
			return
		}
		q.t.setup(p, tc)
		if q.cfg.UC {
			q.t.ackTO = 0 // nothing is acknowledged (uc.go)
		}
		q.t.connected = true
		if e.firstPacket != nil {
			e.awaitFirst[q.cfg.QPN] = struct{}{}
		}
		q.state.Store(uint32(StateConnected))
		e.schedule(q)
	})
	if derr != nil {
		return derr
	}
	return err
}

// Close cancels the QP's pending requests (STATUS_CANCELLED) and removes
// it from the engine. Posts after Close fail with STATUS_INVALID_HANDLE.
func (q *QP) Close() error {
	e := q.eng
	err := e.do(func() {
		if e.qps[q.cfg.QPN] != q {
			return
		}
		if t := &q.t; t.connected && !t.failed && t.ctl == ctlAck {
			// Acknowledge what the QP executed before it goes: the
			// consumer may close as soon as it sees a receive whose ACK
			// is still held (ackHold), and the peer would wait for it.
			_ = e.sendCtl(q)
		}
		e.enterError(q)
		e.detachAll(q)
		delete(e.qps, q.cfg.QPN)
		delete(e.awaitFirst, q.cfg.QPN)
		if e.lastQP == q {
			e.lastQP = nil
		}
		e.timed = removeQP(e.timed, q)
		q.t.timed = false
		e.active = removeQP(e.active, q)
		q.t.active = false
		q.state.Store(uint32(StateClosed))
	})
	if errors.Is(err, ErrClosed) {
		// The engine stopped and cancelled everything already.
		q.state.Store(uint32(StateClosed))
		return nil
	}
	return err
}

func removeQP(list []*QP, q *QP) []*QP {
	for i, x := range list {
		if x == q {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			return list[:len(list)-1]
		}
	}
	return list
}
