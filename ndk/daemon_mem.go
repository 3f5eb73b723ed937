package ndk

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// Memory windows, fast registration and SRQs on a daemon-backed adapter.
//
// Creating, initializing, modifying and closing are control calls. Bind,
// FastRegister and Invalidate are records in the QP's send ring, which the
// relay posts on the daemon's QP in order with the QP's other requests;
// SRQ.Receive is a record in the SRQ's own ring.
//
// NDKPI hands out a window's token when NdkBind returns and an FRMR's when
// NdkFastRegister returns, before the daemon has seen the record. So the
// client chooses the new tokens' keys itself (math/rand/v2, as the token
// table does) and the record carries them; the daemon keeps each token's
// index, which names the object's slot in its table, and takes only the
// key, refusing one equal to the current keys (memreg.FastRegisterKeys).
// The key protects the region's owner from peers that guess tokens: the
// owner choosing it costs nobody else anything, and it cannot name another
// client's slot. The alternatives were a control call per Bind (a system
// call and allocations on a posting path) or a post that waits for the
// relay to publish the token (a round trip through the engine per post).

// newToken draws a token of the object whose current token is cur: cur's
// index with a key different from cur's and other's.
func (r *daemonLink) newToken(cur, other uint32) uint32 {
	bits := r.keyBits.Load()
	mask := uint32(1)<<bits - 1
	idx := cur &^ mask
	for {
		k := rand.Uint32() & mask
		if k != cur&mask && k != other&mask {
			return idx | k
		}
	}
}

func (b *daemonPD) createMW() (*MW, error) {
	pd, r := b.pd, b.link
	m, err := tell(r, "create mw", &proto.CreateMW{PD: pd.id})
	if err != nil {
		return nil, err
	}
	r.keyBits.Store(uint32(m.KeyBits))
	mw := &MW{pd: pd, rh: m.H, handle: m.Local, open: true}
	mw.token.Store(m.Remote)
	return mw, nil
}

func (b *daemonPD) closeMW(mw *MW) {
	pd := mw.pd
	pd.mu.Lock()
	open := mw.open
	mw.open = false
	pd.mu.Unlock()
	if open {
		_, _ = tell(b.link, "close mw", &proto.CloseMW{H: mw.rh})
	}
}

// bind is Bind on a daemon-backed QP: the checks the token table makes in
// process (the range inside the MR, rights within the MR's, the same PD),
// then the record. The daemon checks all of it again.
func (rq *daemonQP) bind(ctx any, mr *MR, mw *MW, addr, length uint64, flags OpFlag) error {
	q := rq.q
	r := rq.link
	if err := checkOpFlags(postBind, flags, q.adapter.info.AdapterFlags); err != nil {
		r.ringDeferred(rq)
		return err
	}
	if mr == nil || mw == nil {
		r.ringDeferred(rq)
		return errBindNil
	}
	if st := rq.localPostable(); st != StatusSuccess {
		r.ringDeferred(rq)
		return postError("bind", st)
	}
	q.pd.mu.Lock()
	ok := mw.open && mr.registered && mw.pd == q.pd && mr.pd == q.pd
	q.pd.mu.Unlock()
	switch {
	case !ok,
		addr < mr.va || addr-mr.va > uint64(len(mr.buf)) || length > uint64(len(mr.buf))-(addr-mr.va),
		flags&OpFlagAllowRemoteRead != 0 && mr.flags&MRFlagAllowRemoteRead == 0,
		flags&OpFlagAllowRemoteWrite == OpFlagAllowRemoteWrite && mr.flags&MRFlagAllowRemoteWrite != MRFlagAllowRemoteWrite:
		r.ringDeferred(rq)
		return errBindRefused
	}
	tok := r.newToken(mw.token.Load(), mw.handle)
	s := &rq.sr
	*s = proto.Send{Op: proto.OpBind, Flags: uint32(flags), Handle: mw.rh, InvToken: mr.tokens.Local,
		RemoteAddr: addr, Length: length, RemoteToken: tok}
	if err := rq.postLocal("bind", ctx, flags); err != nil {
		return err
	}
	mw.token.Store(tok)
	return nil
}

var errBindRefused = errorf(StatusAccessViolation, "bind", "closed or other-PD MR or window, a range outside the MR, or rights beyond the MR's")

// localPostable is the state check of a post: closed, or not connected.
func (rq *daemonQP) localPostable() Status {
	switch {
	case rq.q.closed.Load():
		return StatusInvalidHandle
	case !rq.connectedAt.Load():
		return StatusConnectionInvalid
	}
	return StatusSuccess
}

// postLocal publishes the local operation in rq.sr.
func (rq *daemonQP) postLocal(op string, ctx any, flags OpFlag) error {
	r := rq.link
	var slot []byte
	if rq.sendSeq-rq.sendDone.Load() < rq.sendLimit {
		slot = rq.send.Reserve()
	}
	if slot == nil {
		r.ring() // as post: wakes the relay to publish what retired
		r.ringDeferred(rq)
		return postError(op, StatusInsufficientResources)
	}
	rq.sr.Seq = rq.sendSeq
	rq.sendCtx[rq.sendSeq&rq.sendMask] = ctx
	rq.sendInv[rq.sendSeq&rq.sendMask] = 0
	rq.sr.Encode(slot)
	rq.publishSend(r, flags)
	if flags&OpFlagDefer != 0 {
		// A receive posted after it, on any QP, may use the token it
		// registers or must find the token it invalidates gone, and the
		// relay moves receives only after the send records of the QPs
		// marked before them: the QP is marked, not rung, so that the
		// records wait in the daemon's QP for the DEFER to end instead
		// of here.
		rq.hint()
	}
	return nil
}

// initFastRegister is InitializeFastRegister on a daemon-backed adapter.
func (b *daemonPD) initFastRegister(m *MR, pages int, remoteAccess bool) error {
	const op = "initialize fast register mr"
	pd, r := m.pd, b.link
	pd.mu.Lock()
	h := m.rh
	if !m.registered {
		h = 0 // deregistered: the daemon dropped it, make a new one
	}
	pd.mu.Unlock()
	req := &proto.InitFastMR{PD: pd.id, H: h, Depth: pages}
	if remoteAccess {
		req.Flags = 1
	}
	reply, err := tell(r, op, req)
	if err != nil {
		return err
	}
	r.keyBits.Store(uint32(reply.KeyBits))
	r.removeMR(m) // the previous initialization's tokens, if any
	pd.mu.Lock()
	if m.registered {
		delete(pd.mrs, m)
	}
	m.rh = reply.H
	m.fast.pages, m.fast.remoteOK = pages, remoteAccess
	m.tokens.Local, m.tokens.Remote = reply.Local, reply.Remote
	m.buf, m.va, m.flags = nil, 0, 0
	m.registered = true
	m.fast.revoked.Store(true)
	m.fast.cur.Store(uint64(m.tokens.Local)<<32 | uint64(m.tokens.Remote))
	pd.mrs[m] = struct{}{}
	pd.mu.Unlock()
	r.addFastMR(m)
	return nil
}

var (
	errFastRegisterMemory     = errorf(StatusNotSupported, "fast register", "a daemon-backed adapter registers only memory the daemon can map: take it from Adapter.Memory or AllocBuffer")
	errFastRegisterRemote     = errorf(StatusAccessViolation, "fast register", "remote rights on an MR initialized without remote access")
	errFastRegisterRegistered = errorf(StatusAccessViolation, "fast register", "the MR is still registered: Invalidate it first")
)

// fastRegister is FastRegister on a daemon-backed QP: the memory must lie
// in an arena the daemon maps, named by arena and offset; the daemon
// registers its own mapping of it under the client's address.
func (rq *daemonQP) fastRegister(ctx any, mr *MR, buf []byte, flags OpFlag) error {
	q := rq.q
	r := rq.link
	if err := checkOpFlags(postFastRegister, flags, q.adapter.info.AdapterFlags); err != nil {
		r.ringDeferred(rq)
		return err
	}
	va := addrOf(buf)
	switch {
	case mr == nil || mr.fast == nil || mr.fast.pages == 0 || mr.rh == 0:
		r.ringDeferred(rq)
		return errFastRegisterNotFast
	case va == 0 || int(va%PageSize)+len(buf) > mr.fast.pages*PageSize:
		r.ringDeferred(rq)
		return errFastRegisterSize
	case (flags&OpFlagAllowRemoteRead != 0 || flags&OpFlagAllowRemoteWrite == OpFlagAllowRemoteWrite) && !mr.fast.remoteOK:
		r.ringDeferred(rq)
		return errFastRegisterRemote
	case !mr.fast.revoked.Load():
		r.ringDeferred(rq)
		return errFastRegisterRegistered
	}
	if st := rq.localPostable(); st != StatusSuccess {
		r.ringDeferred(rq)
		return postError("fast register", st)
	}
	ar, off, ok := r.arenaOf(buf)
	if !ok {
		r.ringDeferred(rq)
		return errFastRegisterMemory
	}
	local := r.newToken(mr.tokens.Local, mr.tokens.Remote)
	remote := r.newToken(mr.tokens.Remote, local)
	for remote == mr.tokens.Local {
		remote = r.newToken(mr.tokens.Remote, local)
	}
	s := &rq.sr
	*s = proto.Send{Op: proto.OpFastRegister, Flags: uint32(flags), Handle: mr.rh, Arena: ar.id, ArenaOff: off,
		RemoteAddr: va, Length: uint64(len(buf)), InvToken: local, RemoteToken: remote}
	if err := rq.postLocal("fast register", ctx, flags); err != nil {
		return err
	}
	mr.tokens.Local, mr.tokens.Remote = local, remote
	mr.buf, mr.va = buf, va
	mr.fast.cur.Store(uint64(local)<<32 | uint64(remote))
	mr.fast.revoked.Store(false)
	mr.flags = MRFlag(fastRegisterAccess(flags))
	return nil
}

// invalidated records what the daemon will see when it posts the
// Invalidate: a fast MR holds no registration from now on.
func (rq *daemonQP) invalidated(obj Invalidatable) {
	if m, ok := obj.(*MR); ok && m.fast != nil {
		m.fast.revoked.Store(true)
	}
}

// addFastMR makes m's tokens, whatever their keys, known to checkLocal:
// a FastRegister changes them without a control call.
func (r *daemonLink) addFastMR(m *MR) {
	r.mu.Lock()
	old := *r.fast.Load()
	next := make(map[uint32]*MR, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[m.tokens.Local>>r.keyBits.Load()] = m
	r.fast.Store(&next)
	r.mu.Unlock()
}

// revoke marks the fast MR whose current token (local or remote) is token
// invalidated: a completion says so (ReceiveAndInvalidate's token, a
// READ_LOCAL_INVALIDATE's sink).
func (r *daemonLink) revoke(token uint32) {
	m := (*r.fast.Load())[token>>r.keyBits.Load()]
	if m == nil {
		return
	}
	if cur := m.fast.cur.Load(); uint32(cur>>32) == token || uint32(cur) == token {
		m.fast.revoked.Store(true)
	}
}

// fastMR finds the fast MR whose current local token is token.
func (r *daemonLink) fastMR(token uint32) *MR {
	m := (*r.fast.Load())[token>>r.keyBits.Load()]
	if m == nil || m.tokens.Local != token || m.fast.revoked.Load() {
		return nil
	}
	return m
}

// daemonSRQ is a daemon-backed SRQ (srqBackend): the ring its receives
// are posted into, and the contexts of those receives, which complete on
// the receive CQs of the QPs that take them.
type daemonSRQ struct {
	s     *SRQ
	link  *daemonLink
	h     uint32
	seg   *shm.Segment
	ring  *shm.Producer
	post  *atomic.Uint32
	done  *atomic.Uint64 // daemon-written: the SRQ's receives completed
	depth atomic.Int64   // the depth CreateSRQ or Modify set
	slots int

	mu       sync.Mutex // one poster at a time (NDKPI.md §8), and Close
	closedAt atomic.Bool
	ctx      []any
	mask     uint64
	seq      uint64
	rr       proto.Recv
	maxSGE   int

	notes   chan Status
	stop    chan struct{}
	stopped chan struct{}
}

func (rs *daemonSRQ) take(seq uint64) any {
	t := &rs.ctx[seq&rs.mask]
	v := *t
	*t = nil
	return v
}

func (b *daemonPD) createSRQ(depth, maxSGE, threshold int, notify func(Status)) (*SRQ, error) {
	const op = "create srq"
	pd, r := b.pd, b.link
	m, fds, err := ask(r, context.Background(), op, &proto.CreateSRQ{PD: pd.id, Depth: depth, RecvSGE: maxSGE, Threshold: threshold})
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 || m.Seg == nil || m.Seg.Slots < 1 || m.Seg.Slots > proto.MaxSlots {
		closeFDs(fds)
		return nil, errorf(StatusInternalError, op, "daemon sent no SRQ segment")
	}
	seg, err := shm.MapSegment(fds[0], m.Seg.Size)
	if err != nil {
		return nil, &Error{Status: StatusInternalError, Op: op, Err: err}
	}
	unix.Close(seg.TakeFD())
	l := proto.NewSRQLayout(m.Seg.Slots)
	ring, err := shm.NewProducer(seg, l.Ring)
	if err != nil {
		seg.Close()
		return nil, &Error{Status: StatusInternalError, Op: op, Err: err}
	}
	rs := &daemonSRQ{link: r, h: m.H, seg: seg, ring: ring, post: seg.Word32(l.Words), done: seg.Word64(l.Words + 8), slots: l.Ring.Slots, maxSGE: maxSGE,
		ctx: make([]any, 4*l.Ring.Slots), notes: make(chan Status, 16), stop: make(chan struct{}), stopped: make(chan struct{})}
	rs.mask = uint64(len(rs.ctx) - 1)
	rs.depth.Store(int64(depth))
	s := &SRQ{pd: pd, be: rs, notify: notify, done: make(chan struct{})}
	rs.s = s
	go rs.notifications()
	r.mu.Lock()
	r.srqs[m.H] = rs
	r.mu.Unlock()
	return s, nil
}

// notifications calls the consumer's callback for each event the daemon
// sends, one at a time, until the SRQ closes.
func (rs *daemonSRQ) notifications() {
	defer close(rs.stopped)
	for {
		select {
		case <-rs.stop:
			return
		case st := <-rs.notes:
			if rs.s.notify != nil {
				rs.s.notify(st)
			}
		}
	}
}

// receive is SRQ.Receive through the daemon: the checks the SRQ makes
// inline, then the record and the SRQ's hint.
func (rs *daemonSRQ) receive(ctx any, sgl []SGE) error {
	s := rs.s
	r := rs.link
	if rs.closedAt.Load() {
		return postError("receive", StatusInvalidHandle)
	}
	if len(sgl) > rs.maxSGE || len(sgl) > proto.MaxSGE {
		return postError("receive", StatusInvalidParameter)
	}
	var total uint64
	for i := range sgl {
		total += uint64(sgl[i].Length)
	}
	if total > uint64(s.pd.adapter.info.MaxTransferLength) {
		return postError("receive", StatusInvalidParameter)
	}
	for i := range sgl {
		if !r.checkLocal(s.pd, &sgl[i], localWrite) {
			return postError("receive", StatusAccessViolation)
		}
	}
	// The depth bounds the receives outstanding: posted and not yet
	// completed (a completion the relay has not moved yet still counts).
	var slot []byte
	if rs.seq-rs.done.Load() < uint64(rs.depth.Load()) {
		slot = rs.ring.Reserve()
	}
	if slot == nil {
		return postError("receive", StatusInsufficientResources)
	}
	rs.ctx[rs.seq&rs.mask] = ctx
	putRecv(&rs.rr, slot, rs.seq, sgl)
	rs.ring.Publish()
	rs.seq++
	if rs.post.Load() == 0 {
		rs.post.Store(1)
	}
	r.ring()
	return nil
}

func (rs *daemonSRQ) modify(depth, threshold int) error {
	if rs.closedAt.Load() {
		return errorf(StatusInvalidHandle, "modify srq", "srq closed")
	}
	_, err := tell(rs.link, "modify srq", &proto.ModifySRQ{H: rs.h, Depth: depth, Threshold: threshold})
	if err == nil && depth != 0 {
		rs.depth.Store(int64(depth))
	}
	return err
}

func (rs *daemonSRQ) capacity() int { return rs.slots }

func (rs *daemonSRQ) length() int {
	m, err := tell(rs.link, "srq len", &proto.SRQLen{H: rs.h})
	if err != nil {
		return 0
	}
	return m.Depth
}

// close refuses posts at once, ends the notifications and asks the daemon
// to close its SRQ; the daemon's srq_closed event completes it, once the
// QPs on it are closed.
func (rs *daemonSRQ) close() {
	if rs.closedAt.Swap(true) {
		return
	}
	close(rs.stop)
	<-rs.stopped
	_, _ = tell(rs.link, "close srq", &proto.CloseSRQ{H: rs.h})
}

// closed completes the close (the daemon's srq_closed event).
func (rs *daemonSRQ) closed() {
	s, r := rs.s, rs.link
	r.mu.Lock()
	delete(r.srqs, rs.h)
	r.mu.Unlock()
	s.mu.Lock()
	if !s.finished {
		s.finished = true
		close(s.done)
	}
	s.mu.Unlock()
	// No receive is posted after Close (receive checks closedAt, and
	// NDKPI's consumer does not post during it): the ring is done with.
	rs.seg.Close()
}

// notifyEvent queues an event for the callback; a callback that falls
// 16 events behind misses the surplus (each is the same SUCCESS, or the
// one INTERNAL_ERROR after which none follows).
func (rs *daemonSRQ) notifyEvent(st Status) {
	select {
	case rs.notes <- st:
	default:
	}
}

// takeSRQ finds the context of an SRQ receive's completion: in the SRQ
// of the QP that took it.
func (q *daemonQP) takeSRQ(seq uint64) any {
	if q.srq == nil {
		return nil
	}
	return q.srq.take(seq)
}

// The record ops are rc.Op's values: a post's op goes into the record as
// it is.
var (
	_ = [1]struct{}{}[int(rc.OpSend)-proto.OpSend]
	_ = [1]struct{}{}[int(rc.OpSendInvalidate)-proto.OpSendInvalidate]
	_ = [1]struct{}{}[int(rc.OpWrite)-proto.OpWrite]
	_ = [1]struct{}{}[int(rc.OpRead)-proto.OpRead]
	_ = [1]struct{}{}[int(rc.OpCompareSwap)-proto.OpCompareSwap]
	_ = [1]struct{}{}[int(rc.OpFetchAdd)-proto.OpFetchAdd]
	_ = [1]struct{}{}[int(rc.OpBind)-proto.OpBind]
	_ = [1]struct{}{}[int(rc.OpFastRegister)-proto.OpFastRegister]
	_ = [1]struct{}{}[int(rc.OpInvalidate)-proto.OpInvalidate]
	_ = [1]struct{}{}[int(rc.OpSendImm)-proto.OpSendImm]
	_ = [1]struct{}{}[int(rc.OpWriteImm)-proto.OpWriteImm]
)
