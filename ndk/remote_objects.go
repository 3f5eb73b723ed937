package ndk

import (
	"context"
	"sync"
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

// remoteCQ is a daemon-backed CQ: the ring the daemon's relay fills, the
// arm word it fires, and the goroutine that runs the notification
// callback, one at a time.
type remoteCQ struct {
	h      uint32
	seg    *shm.Segment // the first segment: arm and status words
	ring   *shm.Consumer
	rseg   *shm.Segment   // the current ring's segment (seg until a resize)
	sealed *atomic.Uint32 // the current ring's sealed word
	// Rings resizes brought, oldest first, waiting for the current one
	// to drain; hasNext says whether there are any, for GetResults to
	// read without the lock.
	nextMu  sync.Mutex
	nexts   []*cqRing
	hasNext atomic.Bool
	arm     *atomic.Uint32
	status  *atomic.Uint32
	slots   int
	rec     proto.Completion
	notify  func(Status)

	mu      sync.Mutex
	queue   []Status
	wake    chan struct{}
	stopped chan struct{}
	exited  chan struct{}
	once    sync.Once
}

func (r *remote) createCQ(a *Adapter, depth int, notify func(Status)) (*CQ, error) {
	const op = "create cq"
	if depth < 1 || depth > int(a.info.MaxCQDepth) {
		return nil, errorf(StatusInvalidParameter, op, "depth %d out of range [1, MaxCQDepth %d]", depth, a.info.MaxCQDepth)
	}
	m, fds, err := r.call(context.Background(), op, &proto.Request{Op: proto.OpCreateCQ, Depth: depth})
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 || m.Seg == nil {
		closeFDs(fds)
		return nil, errorf(StatusInternalError, op, "daemon sent no CQ segment")
	}
	seg, err := shm.MapSegment(fds[0], m.Seg.Size)
	if err != nil {
		return nil, &Error{Status: StatusInternalError, Op: op, Err: err}
	}
	unix.Close(seg.TakeFD()) // the mapping is all we need
	l := proto.NewCQLayout(m.Seg.Slots)
	ring, err := shm.NewConsumer(seg, l.Ring)
	if err != nil {
		seg.Close()
		return nil, &Error{Status: StatusInternalError, Op: op, Err: err}
	}
	rq := &remoteCQ{
		h: m.H, seg: seg, ring: ring, rseg: seg, sealed: seg.Word32(l.Words + 8),
		arm: seg.Word32(l.Words), status: seg.Word32(l.Words + 4), slots: l.Ring.Slots,
		notify: notify, wake: make(chan struct{}, 1), stopped: make(chan struct{}), exited: make(chan struct{}),
	}
	if notify != nil {
		go rq.dispatch()
	} else {
		close(rq.exited)
	}
	c := &CQ{adapter: a, r: rq, done: make(chan struct{})}
	r.mu.Lock()
	r.cqs[m.H] = c
	r.mu.Unlock()
	return c, nil
}

func (rq *remoteCQ) notifyQueue(st Status) {
	rq.mu.Lock()
	rq.queue = append(rq.queue, st)
	rq.mu.Unlock()
	select {
	case rq.wake <- struct{}{}:
	default:
	}
}

// dispatch runs the callbacks, serialized per CQ as NDKPI requires.
func (rq *remoteCQ) dispatch() {
	defer close(rq.exited)
	for {
		select {
		case <-rq.stopped:
			return
		case <-rq.wake:
		}
		for {
			rq.mu.Lock()
			if len(rq.queue) == 0 {
				rq.mu.Unlock()
				break
			}
			st := rq.queue[0]
			rq.queue = rq.queue[1:]
			rq.mu.Unlock()
			select {
			case <-rq.stopped:
				return
			default:
			}
			rq.notify(st)
		}
	}
}

func (rq *remoteCQ) stop() {
	rq.once.Do(func() { close(rq.stopped) })
	<-rq.exited
}

// get is GetResults and GetResultsEx of a daemon-backed CQ.
func (c *CQ) remoteGet(results []Result, ex []ResultEx) int {
	rq := c.r
	r := c.adapter.rem
	want := len(results)
	if ex != nil {
		want = len(ex)
	}
	n := 0
	for n < want {
		b := rq.ring.Peek()
		if b == nil {
			if rq.nextRing() {
				continue
			}
			break
		}
		rq.rec.Decode(b)
		e := &rq.rec
		var qctx, rctx any
		r.mu.RLock()
		q := r.qps[e.QP]
		r.mu.RUnlock()
		if q != nil {
			qctx = q.r.context
			rctx = q.r.take(e.Kind, e.Seq)
			if e.Kind == proto.KindSend {
				if tok := q.r.takeInvalidated(e.Seq); tok != 0 && e.Status == 0 {
					r.revoke(tok) // a READ_LOCAL_INVALIDATE's sink
				}
			}
		}
		if e.Type == uint32(OpReceiveAndInvalidate) && e.Status == 0 {
			r.revoke(uint32(e.TypeSpecific))
		}
		res := Result{Status: Status(e.Status), BytesTransferred: e.Bytes, QPContext: qctx, RequestContext: rctx}
		if ex != nil {
			ex[n] = ResultEx{Result: res, Type: OperationType(e.Type), ProviderErrorCode: e.ProviderErrorCode, TypeSpecificCompletionOutput: e.TypeSpecific}
		} else {
			results[n] = res
		}
		n++
	}
	rq.ring.Release()
	return n
}

// remoteArm sets the arm in the shared word for the daemon's relay to fire.
func (c *CQ) remoteArm(n CQNotify) error {
	rq := c.r
	if rq.notify == nil || c.closed.Load() {
		if c.closed.Load() {
			return errorf(StatusInvalidHandle, "arm cq", "cq closed")
		}
		return errorf(StatusInvalidDeviceRequest, "arm cq", "cq was created without a notification callback")
	}
	lvl := map[CQNotify]uint32{CQNotifyErrors: 1, CQNotifySolicited: 2, CQNotifyAny: 3}[n]
	for {
		w := rq.arm.Load()
		if w >= lvl || rq.arm.CompareAndSwap(w, lvl) {
			break
		}
	}
	c.adapter.rem.ring()
	return nil
}

func (c *CQ) remoteClose() {
	rq := c.r
	r := c.adapter.rem
	rq.stop()
	r.mu.Lock()
	_, live := r.cqs[rq.h]
	delete(r.cqs, rq.h)
	r.mu.Unlock()
	if live {
		_, _ = r.do("close cq", &proto.Request{Op: proto.OpCloseCQ, H: rq.h})
	}
	rq.nextMu.Lock()
	for _, nx := range rq.nexts {
		nx.seg.Close()
	}
	rq.nexts = nil
	rq.nextMu.Unlock()
	if rq.rseg != rq.seg {
		rq.rseg.Close()
	}
}

// remoteQP is a daemon-backed QP: the work rings it posts into and the
// contexts of its requests, which never leave the process.
type remoteQP struct {
	h      uint32
	seg    *shm.Segment
	send   *shm.Producer
	recv   *shm.Producer
	writes *atomic.Uint64 // the session's count for the QP's queue
	post   *atomic.Uint64 // the QP's word of the session's post bitmap
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
	qpn, psn             uint32
	queue                int

	connected atomic.Bool
	srq       *remoteSRQ // QPConfig.SRQ: its receives complete here

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

func (q *remoteQP) take(kind uint8, seq uint64) any {
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
func (q *remoteQP) takeInvalidated(seq uint64) uint32 {
	t := &q.sendInv[seq&q.sendMask]
	v := *t
	*t = 0
	return v
}

func (r *remote) createQP(pd *PD, cfg QPConfig) (*QP, error) {
	const op = "create qp"
	req := &proto.Request{
		Op: proto.OpCreateQP, PD: pd.rh, RecvCQ: cfg.ReceiveCQ.r.h, SendCQ: cfg.InitiatorCQ.r.h,
		Depth: cfg.ReceiveQueueDepth, SendDepth: cfg.InitiatorQueueDepth,
		RecvSGE: cfg.MaxReceiveRequestSGE, SendSGE: cfg.MaxInitiatorRequestSGE, Inline: cfg.InlineDataSize,
	}
	if cfg.SRQ != nil {
		req.SRQ = cfg.SRQ.r.h
	}
	m, fds, err := r.call(context.Background(), op, req)
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
	rq := &remoteQP{h: m.H, seg: seg, writes: r.sess.Word64(8 * m.Queue), wArm: seg.Word32(l.Words + 12), wAt: seg.Word64(l.Words + 40),
		state: seg.Word32(l.Words + 8), sendDone: seg.Word64(l.Words + 16), recvDone: seg.Word64(l.Words + 24),
		sendLimit: uint64(l.Send.Slots), recvLimit: uint64(l.Recv.Slots),
		post: r.sess.Word64(proto.PostBitmap + 8*w), arm: r.sess.Word64(proto.ArmBitmap + 8*w), bit: bit,
		context: cfg.Context, cfg: cfg, qpn: m.QPN, psn: m.PSN, queue: m.Queue}
	if cfg.SRQ != nil {
		rq.srq = cfg.SRQ.r
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
	q := &QP{pd: pd, adapter: pd.adapter, r: rq, queue: m.Queue, psn: m.PSN}
	r.mu.Lock()
	r.qps[m.H] = q
	r.mu.Unlock()
	return q, nil
}

// remotePost is post for a daemon-backed QP: the checks the engine makes
// inline, then the record into the send ring and the doorbell.
func (q *QP) remotePost(op string, wr *rc.SendWR) error {
	rq := q.r
	r := q.adapter.rem
	switch {
	case q.closed.Load():
		return postError(op, StatusInvalidHandle)
	case !rq.connected.Load():
		return postError(op, StatusConnectionInvalid)
	}
	responded := wr.Op >= rc.OpRead
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
		InvToken: wr.InvalidateToken, Compare: wr.Compare, SwapAdd: wr.SwapAdd}
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
	rq.send.Publish()
	rq.sendSeq++
	if wr.Flags&OpFlagDefer != 0 {
		rq.deferred = true
	} else {
		rq.deferred = false
		rq.hint()
		r.ring()
	}
	return nil
}

// hint marks the QP in the session's post bitmap: the relay serves only
// QPs marked there (or left over), so a deferred post waits, unmarked, for
// the next post without DEFER.
func (rq *remoteQP) hint() {
	if rq.post.Load()&rq.bit == 0 {
		rq.post.Or(rq.bit)
	}
}

func (r *remote) ringDeferred(rq *remoteQP) {
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

func (q *QP) remoteReceive(ctx any, sgl []SGE) error {
	rq := q.r
	r := q.adapter.rem
	if q.closed.Load() {
		return postError("receive", StatusInvalidHandle)
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
	v := &rq.rr
	v.Seq, v.NSGE = rq.recvSeq, uint8(len(sgl))
	for i := range sgl {
		v.SGL[i] = proto.SGE(sgl[i])
	}
	rq.recvCtx[rq.recvSeq&rq.recvMask] = ctx
	v.Encode(slot)
	rq.recv.Publish()
	rq.recvSeq++
	rq.hint()
	r.ring()
	return nil
}

func (q *QP) remoteClose() error {
	r := q.adapter.rem
	_, err := r.do("close qp", &proto.Request{Op: proto.OpCloseQP, H: q.r.h})
	r.mu.Lock()
	delete(r.qps, q.r.h)
	r.mu.Unlock()
	return err
}

func (q *QP) remoteConnectOOB(remote Endpoint, opts ConnectOptions) error {
	ep := &proto.Endpoint{IP: remote.IP.String(), QPN: remote.QPN, PSN: remote.PSN}
	if remote.MAC != nil {
		ep.MAC = remote.MAC.String()
	}
	o := &proto.ConnOpts{
		PathMTU: opts.PathMTU, InboundReadLimit: opts.InboundReadLimit, OutboundReadLimit: opts.OutboundReadLimit,
		AckTimeoutNs: int64(opts.AckTimeout), RetryCount: opts.RetryCount, RNRRetry: opts.RNRRetry, MinRNRTimerNs: int64(opts.MinRNRTimer),
	}
	_, err := q.adapter.rem.do("connect oob", &proto.Request{Op: proto.OpConnectOOB, H: q.r.h, Remote: ep, Opts: o})
	if err == nil {
		q.r.connected.Store(true)
	}
	return err
}

// PD and MR on a daemon-backed adapter.

func (r *remote) createPD(a *Adapter) (*PD, error) {
	m, err := r.do("create pd", &proto.Request{Op: proto.OpCreatePD})
	if err != nil {
		return nil, err
	}
	pd := &PD{adapter: a, id: m.H, rh: m.H, mrs: make(map[*MR]struct{}), done: make(chan struct{})}
	r.mu.Lock()
	r.pds[m.H] = pd
	r.mu.Unlock()
	return pd, nil
}

func (pd *PD) remoteRegister(buf []byte, flags MRFlag, invalidatable bool) (*MR, error) {
	const op = "register mr"
	r := pd.adapter.rem
	if len(buf) == 0 {
		return nil, errorf(StatusInvalidParameter, op, "empty buffer")
	}
	ar, off, ok := r.arenaOf(buf)
	if !ok {
		return nil, errorf(StatusNotSupported, op, "a daemon-backed adapter registers only memory the daemon can map: take it from Adapter.Memory or AllocBuffer")
	}
	va := addrOf(buf)
	m, err := r.do(op, &proto.Request{Op: proto.OpRegister, PD: pd.rh, Arena: ar.id, Off: off, Len: uint64(len(buf)), VA: va, Flags: uint32(flags), Invalidatable: invalidatable})
	if err != nil {
		return nil, err
	}
	mr := &MR{pd: pd, buf: buf, va: va, flags: flags, rh: m.H, registered: true}
	mr.tokens.Local, mr.tokens.Remote = m.Local, m.Remote
	pd.mu.Lock()
	pd.mrs[mr] = struct{}{}
	pd.mu.Unlock()
	r.addMR(mr)
	return mr, nil
}

func (m *MR) remoteDeregister() error {
	pd := m.pd
	r := pd.adapter.rem
	pd.mu.Lock()
	if !m.registered {
		pd.mu.Unlock()
		return errorf(StatusInvalidHandle, "deregister mr", "mr %#x not registered", m.tokens.Local)
	}
	m.registered = false
	delete(pd.mrs, m)
	pd.mu.Unlock()
	r.removeMR(m)
	_, err := r.do("deregister mr", &proto.Request{Op: proto.OpDeregister, H: m.rh})
	return err
}

func (pd *PD) remoteClose() {
	pd.mu.Lock()
	if pd.closing {
		pd.mu.Unlock()
		return
	}
	pd.closing = true
	pd.mu.Unlock()
	_, _ = pd.adapter.rem.do("close pd", &proto.Request{Op: proto.OpClosePD, H: pd.rh})
}

func (pd *PD) remoteClosed() {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if !pd.finished {
		pd.finished = true
		close(pd.done)
	}
	r := pd.adapter.rem
	r.mu.Lock()
	delete(r.pds, pd.rh)
	r.mu.Unlock()
}

// remoteArmPeerWrites arms the QP's write arm in shared memory at the
// count the daemon last published; the relay fires it (an event) once the
// count moves past it, which covers a WRITE placed before the arm but not
// yet published (a spurious token: the caller checks memory again).
func (q *QP) remoteArmPeerWrites(ch chan struct{}) {
	rq := q.r
	if p := rq.wCh.Load(); p == nil || *p != ch {
		box := ch
		rq.wCh.Store(&box)
	}
	rq.wAt.Store(rq.writes.Load())
	rq.wArm.Store(1)
	rq.arm.Or(rq.bit)
	q.adapter.rem.ring()
}

// peerWrite delivers a fired write arm.
func (rq *remoteQP) peerWrite() {
	if p := rq.wCh.Load(); p != nil {
		select {
		case *p <- struct{}{}:
		default:
		}
	}
}

// bufferPool gives a daemon-backed adapter its AllocBuffer pool: 16 MiB
// of shared memory, made on first use.
func (r *remote) bufferPool(a *Adapter) error {
	r.mu.Lock()
	have := a.buffers != nil
	r.mu.Unlock()
	if have {
		return nil
	}
	ar, err := r.newArena(16 << 20)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if a.buffers == nil {
		a.buffers = newBufferPool(ar.seg.Bytes())
	}
	r.mu.Unlock()
	return nil
}

// cqRing is a CQ ring a resize brought, waiting for the old one to drain.
type cqRing struct {
	seg    *shm.Segment
	ring   *shm.Consumer
	sealed *atomic.Uint32
	slots  int
}

// nextRing moves the consumer to the ring a resize brought once the
// current one is sealed and drained. It reports whether there may be more
// to take: the new ring, or a record the old one got before its seal.
func (rq *remoteCQ) nextRing() bool {
	if !rq.hasNext.Load() || rq.sealed.Load() == 0 {
		return false
	}
	// The seal is stored after the last record's publication: a record
	// that arrived before it shows now.
	if rq.ring.Len() > 0 {
		return true
	}
	rq.ring.Release()
	if rq.rseg != rq.seg {
		rq.rseg.Close()
	}
	rq.nextMu.Lock()
	nx := rq.nexts[0]
	rq.nexts = rq.nexts[1:]
	rq.hasNext.Store(len(rq.nexts) > 0)
	rq.nextMu.Unlock()
	rq.ring, rq.rseg, rq.sealed = nx.ring, nx.seg, nx.sealed
	return true
}

// remoteResize is NdkResizeCq on a daemon-backed CQ: the daemon gives the
// CQ a new ring, and GetResults takes it once it has drained the old one.
func (c *CQ) remoteResize(depth int) error {
	const op = "resize cq"
	rq := c.r
	if n := rq.ring.Len(); n > proto.Slots(depth) {
		return errorf(StatusInvalidParameter, op, "depth %d below the %d completions queued", depth, n)
	}
	m, fds, err := c.adapter.rem.call(context.Background(), op, &proto.Request{Op: proto.OpResizeCQ, H: rq.h, Depth: depth})
	if err != nil {
		return err
	}
	if len(fds) != 1 || m.Seg == nil || m.Seg.Slots < 1 || m.Seg.Slots > proto.MaxSlots {
		closeFDs(fds)
		return errorf(StatusInternalError, op, "daemon sent no ring")
	}
	seg, err := shm.MapSegment(fds[0], m.Seg.Size)
	if err != nil {
		return &Error{Status: StatusInternalError, Op: op, Err: err}
	}
	unix.Close(seg.TakeFD())
	l := proto.NewCQLayout(m.Seg.Slots)
	ring, err := shm.NewConsumer(seg, l.Ring)
	if err != nil {
		seg.Close()
		return &Error{Status: StatusInternalError, Op: op, Err: err}
	}
	rq.nextMu.Lock()
	rq.nexts = append(rq.nexts, &cqRing{seg: seg, ring: ring, sealed: seg.Word32(l.Words + 8), slots: l.Ring.Slots})
	rq.hasNext.Store(true)
	rq.nextMu.Unlock()
	rq.slots = l.Ring.Slots
	return nil
}
