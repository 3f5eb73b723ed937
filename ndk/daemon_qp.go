package ndk

import (
	"context"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func unix_close(fd int) { unix.Close(fd) } //nolint:revive

// daemonQP is a daemon-backed QP (qpBackend): the work rings it posts
// into and the contexts of its requests, which never leave the process.
type daemonQP struct {
	q      *QP
	link   *daemonLink
	h      uint32
	seg    *shm.Segment
	send   *shm.Producer
	recv   *shm.Producer
	writes *atomic.Uint64 // the session's count for the QP's queue
	hints  *atomic.Uint64 // the QP's word of the session's post bitmap
	arm    *atomic.Uint64 // and of its arm bitmap
	bit    uint64         // the QP's bit in both
	state  *atomic.Uint32 // proto.QPFailed once the daemon's QP is in error
	// The records no longer outstanding (daemon-written), and how many
	// may be (the depth, rounded up as the engine's queues are).
	sendDone, recvDone   *atomic.Uint64
	sendLimit, recvLimit uint64
	wArm                 *atomic.Uint32
	wAt                  *atomic.Uint64
	wCh                  atomic.Pointer[chan struct{}] // ArmPeerWrites' channel
	context              any
	cfg                  QPConfig
	num, psn             uint32
	queue                int

	connectedAt atomic.Bool
	srq         *daemonSRQ // QPConfig.SRQ: its receives complete here

	// Initiator side, serialized by the consumer.
	sendCtx  []any
	sendInv  []uint32 // a READ_LOCAL_INVALIDATE's sink token, by sequence
	sendMask uint64
	sendSeq  uint64
	sr       proto.Send
	deferred bool
	// Receive side.
	recvCtx  []any
	recvMask uint64
	recvSeq  uint64
	rr       proto.Recv
}

func (q *daemonQP) take(kind uint8, seq uint64) any {
	var t *any
	switch kind {
	case proto.KindSend:
		t = &q.sendCtx[seq&q.sendMask]
	case proto.KindRecv:
		t = &q.recvCtx[seq&q.recvMask]
	case proto.KindSRQ:
		return q.takeSRQ(seq)
	default:
		return nil
	}
	v := *t
	*t = nil
	return v
}

// takeInvalidated returns and clears the sink token a send request's
// READ_LOCAL_INVALIDATE invalidates (0: none).
func (q *daemonQP) takeInvalidated(seq uint64) uint32 {
	t := &q.sendInv[seq&q.sendMask]
	v := *t
	*t = 0
	return v
}

func (b *daemonPD) createQP(cfg QPConfig) (*QP, error) {
	pd := b.pd
	if err := holdSuccessor(pd, cfg.ReceiveCQ, cfg.InitiatorCQ); err != nil {
		return nil, &Error{Status: StatusInvalidHandle, Op: "create qp", Err: err}
	}
	q, err := b.newQP(cfg, nil)
	if err != nil {
		releaseSuccessor(pd, cfg.ReceiveCQ, cfg.InitiatorCQ)
		return nil, err
	}
	q.rcq, q.icq, q.done = cfg.ReceiveCQ, cfg.InitiatorCQ, make(chan struct{})
	return q, nil
}

func (b *daemonPD) newQP(cfg QPConfig, ud *udCreate) (*QP, error) {
	const op = "create qp"
	pd, r := b.pd, b.link
	req := &proto.CreateQP{
		PD: pd.id, RecvCQ: cfg.ReceiveCQ.be.(*daemonCQ).h, SendCQ: cfg.InitiatorCQ.be.(*daemonCQ).h,
		Depth: cfg.ReceiveQueueDepth, SendDepth: cfg.InitiatorQueueDepth,
		RecvSGE: cfg.MaxReceiveRequestSGE, SendSGE: cfg.MaxInitiatorRequestSGE, Inline: cfg.InlineDataSize,
		UC: cfg.UC, NoSelfLoopback: cfg.BlockSelfMulticastLoopback,
	}
	if cfg.SRQ != nil {
		req.SRQ = cfg.SRQ.be.(*daemonSRQ).h
	}
	ud.request(req) // daemon_ud.go
	m, fds, err := ask(r, context.Background(), op, req)
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 || m.Seg == nil || m.Seg.SendSlots < 1 || m.Seg.RecvSlots < 1 || m.Seg.SendSlots > proto.MaxSlots || m.Seg.RecvSlots > proto.MaxSlots {
		closeFDs(fds)
		return nil, errorf(StatusInternalError, op, "daemon sent no QP segment")
	}
	seg, err := shm.MapSegment(fds[0], m.Seg.Size)
	if err != nil {
		return nil, &Error{Status: StatusInternalError, Op: op, Err: err}
	}
	unix.Close(seg.TakeFD()) // the mapping is all we need
	l := proto.NewQPLayout(m.Seg.SendSlots, m.Seg.RecvSlots)
	if m.Queue < 0 || m.Queue >= proto.MaxQueues || m.Slot < 0 || m.Slot >= proto.MaxQPSlots {
		seg.Close()
		return nil, errorf(StatusInternalError, op, "daemon sent queue %d, slot %d", m.Queue, m.Slot)
	}
	w, bit := proto.SlotWord(m.Slot)
	rq := &daemonQP{link: r, h: m.H, seg: seg, writes: r.sess.Word64(8 * m.Queue), wArm: seg.Word32(l.Words + 12), wAt: seg.Word64(l.Words + 40),
		state: seg.Word32(l.Words + 8), sendDone: seg.Word64(l.Words + 16), recvDone: seg.Word64(l.Words + 24),
		sendLimit: uint64(l.Send.Slots), recvLimit: uint64(l.Recv.Slots),
		hints: r.sess.Word64(proto.PostBitmap + 8*w), arm: r.sess.Word64(proto.ArmBitmap + 8*w), bit: bit,
		context: cfg.Context, cfg: cfg, num: m.QPN, psn: m.PSN, queue: m.Queue}
	if cfg.SRQ != nil {
		rq.srq = cfg.SRQ.be.(*daemonSRQ)
	}
	if rq.send, err = shm.NewProducer(seg, l.Send); err == nil {
		rq.recv, err = shm.NewProducer(seg, l.Recv)
	}
	if err != nil {
		seg.Close()
		return nil, &Error{Status: StatusInternalError, Op: op, Err: err}
	}
	rq.sendCtx = make([]any, 4*l.Send.Slots)
	rq.sendInv = make([]uint32, len(rq.sendCtx))
	rq.recvCtx = make([]any, 4*l.Recv.Slots)
	rq.sendMask, rq.recvMask = uint64(len(rq.sendCtx)-1), uint64(len(rq.recvCtx)-1)
	q := &QP{pd: pd, adapter: pd.adapter, be: rq, queue: m.Queue, psn: m.PSN}
	rq.q = q
	r.mu.Lock()
	r.qps[m.H] = rq
	r.mu.Unlock()
	ud.replied(m)
	return q, nil
}

func (rq *daemonQP) qpn() uint32 { return rq.num }

func (rq *daemonQP) connected() bool {
	return !rq.q.closed.Load() && rq.connectedAt.Load() && rq.state.Load() != proto.QPFailed
}

func (rq *daemonQP) peerWrites() uint64 { return rq.writes.Load() }

func (rq *daemonQP) flush() {
	_, _ = tell(rq.link, "flush qp", &proto.FlushQP{H: rq.h})
}

func (rq *daemonQP) ringDeferred() { rq.link.ringDeferred(rq) }

// post is post for a daemon-backed QP: the checks the engine makes
// inline, then the record into the send ring and the doorbell.
func (rq *daemonQP) post(op string, wr rc.SendWR) error {
	q := rq.q
	r := rq.link
	switch {
	case q.closed.Load():
		return postError(op, StatusInvalidHandle)
	case r.goneFlag.Load():
		return r.goneErr(op)
	case !rq.connectedAt.Load():
		return postError(op, StatusConnectionInvalid)
	}
	if err := rq.checkUD(op, &wr); err != nil {
		return err
	}
	responded := wr.Op == rc.OpRead || wr.Op == rc.OpCompareSwap || wr.Op == rc.OpFetchAdd
	inline := wr.Flags&OpFlagInline != 0 && !responded
	maxSGE := rq.cfg.MaxInitiatorRequestSGE
	if responded {
		maxSGE = min(maxSGE, int(q.adapter.info.MaxReadRequestSGE))
	}
	if (wr.Op == rc.OpCompareSwap || wr.Op == rc.OpFetchAdd) && (len(wr.SGL) != 1 || wr.SGL[0].Length != 8) {
		r.ringDeferred(rq)
		return postError(op, StatusInvalidParameter)
	}
	if !inline && len(wr.SGL) > min(maxSGE, proto.MaxSGE) {
		r.ringDeferred(rq)
		return postError(op, StatusInvalidParameter)
	}
	var total uint64
	for i := range wr.SGL {
		total += uint64(wr.SGL[i].Length)
	}
	if total > uint64(q.adapter.info.MaxTransferLength) || (inline && total > uint64(rq.cfg.InlineDataSize)) {
		r.ringDeferred(rq)
		return postError(op, StatusInvalidParameter)
	}
	sgl := publicSGL(wr.SGL)
	if !inline {
		for i := range sgl {
			need := localRead
			if responded {
				need = readSink
			}
			if !r.checkLocal(q.pd, &sgl[i], need) {
				r.ringDeferred(rq)
				return postError(op, StatusAccessViolation)
			}
		}
	}
	var slot []byte
	if rq.sendSeq-rq.sendDone.Load() < rq.sendLimit {
		slot = rq.send.Reserve()
	}
	if slot == nil {
		// The queue is full. The ring also wakes the relay to publish
		// what retired since: a SILENT_SUCCESS request does not.
		r.ring()
		r.ringDeferred(rq)
		return postError(op, StatusInsufficientResources)
	}
	s := &rq.sr
	*s = proto.Send{Op: uint8(wr.Op), Flags: uint32(wr.Flags), Seq: rq.sendSeq, RemoteAddr: wr.RemoteAddr, RemoteToken: wr.RemoteToken,
		InvToken: wr.InvalidateToken, Compare: wr.Compare, SwapAdd: wr.SwapAdd, Imm: wr.Imm}
	s.Dest = rq.udDest(&wr)
	if inline {
		off := 0
		for i := range sgl {
			e := &sgl[i]
			if e.Length == 0 {
				continue
			}
			if m := (*r.mrs.Load())[e.Token]; m != nil && r.checkLocal(q.pd, e, localRead) {
				off += copy(s.Inline[off:], m.buf[e.Addr-m.va:][:e.Length])
			} else {
				off += copy(s.Inline[off:], bytesAt(e.Addr, e.Length))
			}
		}
		s.InlineLen = uint32(off)
	} else {
		s.NSGE = uint8(len(sgl))
		for i := range sgl {
			s.SGL[i] = proto.SGE(sgl[i])
		}
	}
	rq.sendCtx[rq.sendSeq&rq.sendMask] = wr.Context
	rq.sendInv[rq.sendSeq&rq.sendMask] = 0
	if wr.Op == rc.OpRead && wr.Flags&OpFlagRDMAReadLocalInvalidate != 0 && len(sgl) > 0 {
		rq.sendInv[rq.sendSeq&rq.sendMask] = sgl[0].Token
	}
	s.Encode(slot)
	rq.publishSend(r, wr.Flags)
	return nil
}

// publishSend publishes the send record just encoded and, unless it is
// deferred, marks the QP for the relay and rings the engine.
func (rq *daemonQP) publishSend(r *daemonLink, flags OpFlag) {
	rq.send.Publish()
	rq.sendSeq++
	rq.deferred = flags&OpFlagDefer != 0
	if !rq.deferred {
		rq.hint()
		r.ring()
	}
}

// hint marks the QP in the session's post bitmap: the relay serves only
// QPs marked there (or left over), so a deferred post waits, unmarked, for
// the next post without DEFER.
func (rq *daemonQP) hint() {
	if rq.hints.Load()&rq.bit == 0 {
		rq.hints.Or(rq.bit)
	}
}

func (r *daemonLink) ringDeferred(rq *daemonQP) {
	if rq.deferred {
		rq.deferred = false
		rq.hint()
		r.ring()
	}
}

func publicSGL(sgl []rc.SGE) []SGE {
	if len(sgl) == 0 {
		return nil
	}
	return unsafeSGL(sgl)
}

func (rq *daemonQP) receive(ctx any, sgl []SGE) error {
	q := rq.q
	r := rq.link
	if q.closed.Load() {
		return postError("receive", StatusInvalidHandle)
	}
	if r.goneFlag.Load() {
		return r.goneErr("receive")
	}
	if rq.srq != nil {
		return postError("receive", StatusInvalidDeviceRequest)
	}
	if len(sgl) > rq.cfg.MaxReceiveRequestSGE {
		return postError("receive", StatusInvalidParameter)
	}
	var total uint64
	for i := range sgl {
		total += uint64(sgl[i].Length)
	}
	if total > uint64(q.adapter.info.MaxTransferLength) {
		return postError("receive", StatusInvalidParameter)
	}
	for i := range sgl {
		if !r.checkLocal(q.pd, &sgl[i], localWrite) {
			return postError("receive", StatusAccessViolation)
		}
	}
	var slot []byte
	if rq.recvSeq-rq.recvDone.Load() < rq.recvLimit {
		slot = rq.recv.Reserve()
	}
	if slot == nil {
		r.ring() // for the relay to publish what retired since
		return postError("receive", StatusInsufficientResources)
	}
	rq.recvCtx[rq.recvSeq&rq.recvMask] = ctx
	putRecv(&rq.rr, slot, rq.recvSeq, sgl)
	rq.recv.Publish()
	rq.recvSeq++
	rq.hint()
	// A receive waits for a SEND, and the frame that brings one wakes the
	// engine, whose relay moves marked receives into their QPs before it
	// handles the frames of its turn: the receive needs no wake-up of its
	// own, as an in-process PostReceive rings none. Ringing here woke a
	// sleeping daemon engine (an eventfd write and a thread on a CPU) for
	// each receive a ping-pong reposts. It rings when the engine must act
	// on the receive itself: the QP failed (the receive is cancelled), or
	// another queue's engine takes the QP's SENDs (only queue 0's runs
	// the relay). The hint is stored before the state is read, and the
	// relay publishes the state before it reads the hints to sleep, so a
	// QP that fails before the engine sleeps is seen by one of the two.
	if rq.queue != 0 || rq.state.Load() == proto.QPFailed {
		r.ring()
	}
	return nil
}

// close closes the daemon's QP, then unmaps the QP's segment: its rings
// and words are the client's only until the close (NDKPI: the consumer's
// other calls on the QP have returned), and a client that makes and
// closes QPs all day must not keep a mapping, and the memfd's pages
// behind it, for each.
func (rq *daemonQP) close() error {
	r := rq.link
	_, err := tell(r, "close qp", &proto.CloseQP{H: rq.h})
	r.mu.Lock()
	delete(r.qps, rq.h)
	r.mu.Unlock()
	rq.seg.Close()
	return err
}

func (rq *daemonQP) connectOOB(remote Endpoint, opts ConnectOptions) error {
	ep := &proto.Endpoint{IP: remote.IP.String(), QPN: remote.QPN, PSN: remote.PSN}
	if remote.MAC != nil {
		ep.MAC = remote.MAC.String()
	}
	o := &proto.ConnOpts{
		PathMTU: opts.PathMTU, InboundReadLimit: opts.InboundReadLimit, OutboundReadLimit: opts.OutboundReadLimit,
		AckTimeoutNs: int64(opts.AckTimeout), RetryCount: opts.RetryCount, RNRRetry: opts.RNRRetry, MinRNRTimerNs: int64(opts.MinRNRTimer),
	}
	if tc := opts.TrafficClass; tc != nil {
		o.Traffic = &proto.TrafficClass{DSCP: tc.DSCP, ECN: uint8(tc.ECN), VLAN: tc.VLAN, VLANID: tc.VLANID, PCP: tc.PCP}
	}
	_, err := tell(rq.link, "connect oob", &proto.ConnectOOB{H: rq.h, Remote: ep, Opts: o})
	if err == nil {
		rq.connectedAt.Store(true)
	}
	return err
}

// armPeerWrites arms the QP's write arm in shared memory at the
// count the daemon last published; the relay fires it (an event) once the
// count moves past it, which covers a WRITE placed before the arm but not
// yet published (a spurious token: the caller checks memory again). The
// relay publishes the count before it reads the arm bitmap, and the
// client sets its bit before it reads the count again: on a QP of queue
// 0, whose engine runs the relay, a count that has not moved is seen by
// the relay's pass that moves it, which the WRITE's arrival brings, so
// the engine is rung only when the count already moved. Another queue's
// engine places that QP's WRITEs while the relay's may sleep: the relay
// must see the arm first, to arm that engine's notification before it
// sleeps, so such an arm always rings.
func (rq *daemonQP) armPeerWrites(ch chan struct{}) {
	if p := rq.wCh.Load(); p == nil || *p != ch {
		box := ch
		rq.wCh.Store(&box)
	}
	at := rq.writes.Load()
	rq.wAt.Store(at)
	rq.wArm.Store(1)
	rq.arm.Or(rq.bit)
	if rq.queue != 0 || rq.writes.Load() != at {
		rq.link.ring()
	}
}

// peerWrite delivers a fired write arm.
func (rq *daemonQP) peerWrite() {
	if p := rq.wCh.Load(); p != nil {
		select {
		case *p <- struct{}{}:
		default:
		}
	}
}

// putRecv writes a receive record of seq and sgl into slot, through v, a
// record the caller owns (no allocation): a QP's or an SRQ's receive.
func putRecv(v *proto.Recv, slot []byte, seq uint64, sgl []SGE) {
	v.Seq, v.NSGE = seq, uint8(len(sgl))
	for i := range sgl {
		v.SGL[i] = proto.SGE(sgl[i])
	}
	v.Encode(slot)
}
