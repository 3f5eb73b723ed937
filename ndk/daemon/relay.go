package daemon

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ndkxdp/ndkxdp/internal/spin"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// Arm levels in a CQ segment's arm word, as ndk/internal/cq orders them:
// combining two arms takes the larger.
const (
	armNone      = 0
	armErrors    = 1
	armSolicited = 2
	armAny       = 3
)

// sCQ is a client CQ: the daemon adapter's CQ, whose completions the relay
// moves into the ring the client polls, and the arm the client sets in
// shared memory, which the relay fires.
type sCQ struct {
	h      uint32
	cq     *ndk.CQ
	seg    *shm.Segment
	layout proto.CQLayout
	ring   *shm.Producer
	arm    *atomic.Uint32 // client raises, relay clears when it fires
	status *atomic.Uint32 // the CQ error, once

	// Relay-owned.
	pushed, solicited     uint64 // completions moved, and how many satisfy SOLICITED
	notified, notifiedSol uint64 // the two counts at the last notification
	errReported           bool
	entries               [64]hook.Entry
	rec                   proto.Completion
}

func newSCQ(ss *session, depth int) (*sCQ, error) {
	l := proto.NewCQLayout(proto.Slots(depth))
	seg, err := shm.NewSegment("ndkxdp-cq", l.Size)
	if err != nil {
		return nil, err
	}
	c := &sCQ{seg: seg, layout: l, arm: seg.Word32(l.Words), status: seg.Word32(l.Words + 4)}
	if c.ring, err = shm.NewProducer(seg, l.Ring); err != nil {
		seg.Close()
		return nil, err
	}
	bell := ss.relay.bell
	c.cq, err = ss.srv.a.CreateCQ(depth, func(st ndk.Status) {
		if st != ndk.StatusSuccess {
			c.status.CompareAndSwap(0, uint32(st))
		}
		bell.Ring()
	})
	if err != nil {
		seg.Close()
		return nil, err
	}
	return c, nil
}

// reqSlot stands for a client request in the daemon's post: its address
// is the request context, so a completion names the client's sequence
// number without an allocation.
type reqSlot struct {
	seq  uint64
	kind uint8
	// fenced: a READ or atomic whose completion a later READ_FENCE
	// request waits for (sQP.responses).
	fenced bool
}

// sQP is a client QP: the daemon adapter's QP, fed from the work rings the
// client posts into.
type sQP struct {
	h      uint32
	qp     *ndk.QP
	seg    *shm.Segment
	layout proto.QPLayout
	send   *shm.Consumer
	recv   *shm.Consumer
	writes *atomic.Uint64 // peer WRITE packets placed, for PeerWrites
	state  *atomic.Uint32 // proto.QPFailed once qp is in error
	// The client's records no longer outstanding, for its depth check.
	sendDone, recvDone *atomic.Uint64
	kick               *atomic.Uint64 // client-written: ring deferred posts up to here
	rcq                *sCQ
	scq                *sCQ

	// Relay-owned.
	sendSlots, recvSlots []reqSlot
	sendMask, recvMask   uint64
	sr                   proto.Send
	rr                   proto.Recv
	stalledSend          bool // sr was refused as queue full, or waits on its fence: post it first
	stalledRecv          bool
	broken               bool // the client wrote garbage: flushed, no longer read
	failed               bool // state holds proto.QPFailed
	removed              bool // off the relay's list: seg may be unmapped
	// responses counts the READs and atomics posted whose completions are
	// not yet in the client's ring (SILENT_SUCCESS ones aside, which may
	// never complete). A READ_FENCE request waits for them here: the
	// engine fences on its own completions, but the client must see them
	// before the fenced request leaves, as it does in process.
	responses int
	// Records taken from each ring and posted or refused, and the done
	// counts last published.
	sendTaken, recvTaken       uint64
	lastSendDone, lastRecvDone uint64
	kicked                     uint64 // the last kick rung
	sgl                        [proto.MaxSGE]ndk.SGE
	inline                     [proto.MaxInline]byte
	lastWrites                 uint64
}

func newSQP(ss *session, p *sPD, rcq, scq *sCQ, req *proto.Request) (*sQP, error) {
	q := &sQP{rcq: rcq, scq: scq}
	// The QP's context in every daemon completion is q.
	qp, err := p.pd.CreateQP(ndk.QPConfig{
		ReceiveCQ: rcq.cq, InitiatorCQ: scq.cq, Context: q,
		ReceiveQueueDepth: req.Depth, InitiatorQueueDepth: req.SendDepth,
		MaxReceiveRequestSGE: req.RecvSGE, MaxInitiatorRequestSGE: req.SendSGE,
		InlineDataSize: req.Inline,
	})
	if err != nil {
		return nil, err
	}
	// A client's ring holds as many requests as the QP; the daemon's QP
	// holds as many more, and one may wait refused: contexts for four
	// depths outlive every request that can be outstanding.
	ssl, rsl := proto.Slots(req.SendDepth), proto.Slots(req.Depth)
	l := proto.NewQPLayout(ssl, rsl)
	seg, err := shm.NewSegment("ndkxdp-qp", l.Size)
	if err != nil {
		qp.Close()
		return nil, err
	}
	q.qp, q.seg, q.layout, q.writes, q.state = qp, seg, l, seg.Word64(l.Words), seg.Word32(l.Words+8)
	q.sendDone, q.recvDone, q.kick = seg.Word64(l.Words+16), seg.Word64(l.Words+24), seg.Word64(l.Words+32)
	q.sendSlots = make([]reqSlot, 4*ssl)
	q.recvSlots = make([]reqSlot, 4*rsl)
	q.sendMask, q.recvMask = uint64(4*ssl-1), uint64(4*rsl-1)
	if q.send, err = shm.NewConsumer(seg, l.Send); err == nil {
		q.recv, err = shm.NewConsumer(seg, l.Recv)
	}
	if err != nil {
		qp.Close()
		seg.Close()
		return nil, err
	}
	return q, nil
}

// relay is a session's data path: one goroutine that takes the client's
// posted work out of its shared rings and posts it on the daemon's QPs,
// and moves the daemon CQs' completions into the client's CQ rings. It
// spins SpinTime after its last work, then sleeps on the session's
// doorbell, which the client rings after a post or an arm and the daemon's
// CQs ring when a completion arrives.
type relay struct {
	ss   *session
	seg  *shm.Segment
	bell *shm.Doorbell
	spin time.Duration

	mu      sync.Mutex // held by the relay for each pass; by control to change the lists
	qps     []*sQP
	cqs     []*sCQ
	stopped bool
	done    chan struct{}
}

func newRelay(ss *session) (*relay, error) {
	seg, err := shm.NewSegment("ndkxdp-session", proto.SessionSize)
	if err != nil {
		return nil, err
	}
	efd, err := shm.NewEventfd()
	if err != nil {
		seg.Close()
		return nil, err
	}
	bell, err := shm.NewDoorbell(seg, 0, efd)
	if err != nil {
		seg.Close()
		return nil, err
	}
	return &relay{ss: ss, seg: seg, bell: bell, spin: ss.srv.cfg.SpinTime, done: make(chan struct{})}, nil
}

func (r *relay) addQP(q *sQP) {
	r.mu.Lock()
	r.qps = append(r.qps, q)
	r.mu.Unlock()
}

// removeQP takes q off the relay's list; when it returns, the relay is not
// touching q and never will again.
func (r *relay) removeQP(q *sQP) {
	r.mu.Lock()
	for i, x := range r.qps {
		if x == q {
			r.qps = append(r.qps[:i], r.qps[i+1:]...)
			break
		}
	}
	q.removed = true
	r.mu.Unlock()
}

func (r *relay) addCQ(c *sCQ) {
	r.mu.Lock()
	r.cqs = append(r.cqs, c)
	r.mu.Unlock()
}

func (r *relay) removeCQ(c *sCQ) {
	r.mu.Lock()
	for i, x := range r.cqs {
		if x == c {
			r.cqs = append(r.cqs[:i], r.cqs[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
}

// stop ends the relay goroutine and waits for it.
func (r *relay) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.bell.Ring()
	<-r.done
}

func (r *relay) close() {
	r.bell.Close()
	r.seg.Close()
}

func (r *relay) run() {
	defer close(r.done)
	var y spin.Yielder
	idleSince := time.Time{}
	for {
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			return
		}
		n := r.pass()
		r.mu.Unlock()
		if n > 0 {
			idleSince = time.Time{}
			continue
		}
		now := time.Now()
		if idleSince.IsZero() {
			idleSince = now
		}
		if now.Sub(idleSince) < r.spin {
			y.Yield()
			continue
		}
		// Asleep, the relay is woken by the client's ring (a post, an
		// arm) and by any daemon CQ getting a completion, for which
		// each is armed; an arm finds completions already there and
		// rings at once.
		r.mu.Lock()
		for _, c := range r.cqs {
			_ = c.cq.Arm(ndk.CQNotifyAny)
		}
		r.mu.Unlock()
		// The timeout bounds how late PeerWrites' shared count can be.
		_ = r.bell.Wait(10 * time.Millisecond)
		idleSince = time.Time{}
	}
}

// pass does one round over the session's QPs and CQs and returns how much
// it moved.
func (r *relay) pass() int {
	n := 0
	for _, q := range r.qps {
		if !q.broken {
			n += r.pumpRecv(q)
			n += r.pumpSend(q)
		}
		if w := q.qp.PeerWrites(); w != q.lastWrites {
			q.lastWrites = w
			q.writes.Store(w)
		}
		r.publish(q)
	}
	for _, c := range r.cqs {
		n += r.drain(c)
		r.fireArm(c)
	}
	return n
}

// publish tells the client that q failed, for QP.Connected, and how many
// of its records are done, for its depth check. It runs for every QP on
// each pass (a responder's QP may fail with no completion, a
// SILENT_SUCCESS request retires with none) and before each completion is
// moved, so that the client sees the error no later than the completions
// it cancelled, and a completed request's slot free. A QP the client
// closed has nothing to publish (its completions may still be on their
// way).
func (r *relay) publish(q *sQP) {
	if q.removed {
		return
	}
	if !q.failed && hook.QPFailed(q.qp) {
		q.failed = true
		q.state.Store(proto.QPFailed)
	}
	s, v := hook.QPQueued(q.qp)
	if d := q.sendTaken - s; d != q.lastSendDone {
		q.lastSendDone = d
		q.sendDone.Store(d)
	}
	if d := q.recvTaken - v; d != q.lastRecvDone {
		q.lastRecvDone = d
		q.recvDone.Store(d)
	}
}

// syncState is publish for the control path, whose reply must find the
// state the request changed published (a disconnect, a flush).
func (r *relay) syncState(q *sQP) {
	r.mu.Lock()
	r.publish(q)
	r.mu.Unlock()
}

// budget bounds the records one pass takes from one ring, so that one
// busy QP does not starve the others or the completions.
const budget = 64

func (r *relay) pumpSend(q *sQP) int {
	n := 0
	for n < budget {
		if !q.stalledSend {
			rec := q.send.Peek()
			if rec == nil {
				if q.send.Err() != nil {
					r.breakQP(q, "send ring", q.send.Err())
				}
				break
			}
			q.sr.Decode(rec)
			q.send.Release()
		}
		if q.responses > 0 && q.sr.Flags&uint32(ndk.OpFlagReadFence) != 0 {
			if !q.stalledSend {
				// What the fenced request waits for may itself wait
				// for a doorbell (DEFER), which in process the fenced
				// request's post would ring.
				hook.RingDeferred(q.qp)
			}
			q.stalledSend = true
			break
		}
		st := r.postSend(q, &q.sr)
		if st == ndk.StatusInsufficientResources {
			q.stalledSend = true
			break
		}
		q.stalledSend = false
		q.sendTaken++
		n++
		if q.broken {
			break
		}
	}
	// A post the client refused submits the DEFER posts before it: the
	// kick names how many records that is. Any value is harmless.
	if k := q.kick.Load(); k != q.kicked && q.sendTaken >= k {
		q.kicked = k
		hook.RingDeferred(q.qp)
	}
	return n
}

func (r *relay) pumpRecv(q *sQP) int {
	n := 0
	for n < budget {
		if !q.stalledRecv {
			rec := q.recv.Peek()
			if rec == nil {
				if q.recv.Err() != nil {
					r.breakQP(q, "receive ring", q.recv.Err())
				}
				break
			}
			q.rr.Decode(rec)
			q.recv.Release()
		}
		st := r.postRecv(q, &q.rr)
		if st == ndk.StatusInsufficientResources {
			q.stalledRecv = true
			break
		}
		q.stalledRecv = false
		q.recvTaken++
		n++
		if q.broken {
			break
		}
	}
	return n
}

// breakQP answers a client that broke its own rings: its QP goes to the
// error state (its requests complete CANCELLED) and the relay reads its
// rings no more. Nothing else of the client's, or of anyone's, is touched.
func (r *relay) breakQP(q *sQP, what string, err error) {
	if q.broken {
		return
	}
	q.broken = true
	q.qp.Flush()
	r.ss.log.Warn("client broke a work ring; its QP is flushed", "qp", q.h, "ring", what, "err", err)
}

// Work record operations: rc.Op's values.
const (
	opSend = iota + 1
	opSendInvalidate
	opWrite
	opRead
	opCompareSwap
	opFetchAdd
)

const opFlagInline = ndk.OpFlagInline

// postSend posts one client send record on the daemon's QP. The client
// already checked what it could; the daemon checks again, since the
// client is not trusted: a record no correct client writes breaks the QP,
// and a post the daemon's QP refuses completes with the refusal's status.
func (r *relay) postSend(q *sQP, s *proto.Send) ndk.Status {
	if s.Op < opSend || s.Op > opFetchAdd || s.NSGE > proto.MaxSGE || s.InlineLen > proto.MaxInline {
		r.breakQP(q, "send ring", fmt.Errorf("malformed record (op %d, %d SGEs, %d inline bytes)", s.Op, s.NSGE, s.InlineLen))
		return ndk.StatusSuccess
	}
	slot := &q.sendSlots[s.Seq&q.sendMask]
	slot.seq, slot.kind, slot.fenced = s.Seq, proto.KindSend, false
	flags := ndk.OpFlag(s.Flags)
	var sgl []ndk.SGE
	if flags&opFlagInline != 0 && s.Op != opRead && s.Op != opCompareSwap && s.Op != opFetchAdd {
		// The client copied the bytes into the record; the engine copies
		// them from ours. The record's SGEs are not used: an inline SGE
		// may name any address, and only the daemon's own copy is safe.
		n := copy(q.inline[:], s.Inline[:s.InlineLen])
		q.sgl[0] = ndk.SGE{Addr: uint64(uintptr(unsafe.Pointer(&q.inline[0]))), Length: uint32(n)}
		sgl = q.sgl[:1]
		if n == 0 {
			sgl = nil
		}
	} else {
		for i := 0; i < int(s.NSGE); i++ {
			e := &s.SGL[i]
			q.sgl[i] = ndk.SGE{Addr: e.Addr, Length: e.Length, Token: e.Token}
		}
		sgl = q.sgl[:s.NSGE]
	}
	var err error
	switch s.Op {
	case opSend:
		err = q.qp.Send(slot, sgl, flags)
	case opSendInvalidate:
		err = q.qp.SendAndInvalidate(slot, sgl, flags, s.InvToken)
	case opWrite:
		err = q.qp.Write(slot, sgl, s.RemoteAddr, s.RemoteToken, flags)
	case opRead:
		err = q.qp.Read(slot, sgl, s.RemoteAddr, s.RemoteToken, flags)
	case opCompareSwap, opFetchAdd:
		if len(sgl) != 1 {
			r.complete(q.scq, q, slot, ndk.StatusInvalidParameter, 0)
			return ndk.StatusInvalidParameter
		}
		if s.Op == opCompareSwap {
			err = q.qp.CompareAndSwap(slot, sgl[0], s.RemoteAddr, s.RemoteToken, s.Compare, s.SwapAdd, flags)
		} else {
			err = q.qp.FetchAndAdd(slot, sgl[0], s.RemoteAddr, s.RemoteToken, s.SwapAdd, flags)
		}
	}
	if err == nil {
		if s.Op >= opRead && flags&ndk.OpFlagSilentSuccess == 0 {
			slot.fenced = true
			q.responses++
		}
		return ndk.StatusSuccess
	}
	st := ndk.StatusOf(err)
	if st != ndk.StatusInsufficientResources {
		// The client posted what its own checks passed but ours refuse
		// (a region deregistered meanwhile, or a lying client): the
		// request fails with the refusal, as a completion.
		r.complete(q.scq, q, slot, st, 0)
	}
	return st
}

func (r *relay) postRecv(q *sQP, v *proto.Recv) ndk.Status {
	if v.NSGE > proto.MaxSGE {
		r.breakQP(q, "receive ring", fmt.Errorf("malformed record (%d SGEs)", v.NSGE))
		return ndk.StatusSuccess
	}
	slot := &q.recvSlots[v.Seq&q.recvMask]
	slot.seq, slot.kind, slot.fenced = v.Seq, proto.KindRecv, false
	for i := 0; i < int(v.NSGE); i++ {
		e := &v.SGL[i]
		q.sgl[i] = ndk.SGE{Addr: e.Addr, Length: e.Length, Token: e.Token}
	}
	err := q.qp.Receive(slot, q.sgl[:v.NSGE])
	if err == nil {
		return ndk.StatusSuccess
	}
	st := ndk.StatusOf(err)
	if st != ndk.StatusInsufficientResources {
		r.complete(q.rcq, q, slot, st, 0)
	}
	return st
}

// complete puts a completion the daemon made up (a refused post) into c's
// ring, or, if the ring is full, fails the CQ as an overrun would.
func (r *relay) complete(c *sCQ, q *sQP, slot *reqSlot, st ndk.Status, typ uint32) {
	c.rec = proto.Completion{Status: uint32(st), Seq: slot.seq, QP: q.h, Kind: slot.kind, Type: typ}
	r.push(c, true)
}

func (r *relay) push(c *sCQ, solicited bool) bool {
	b := c.ring.Reserve()
	if b == nil {
		c.status.CompareAndSwap(0, uint32(ndk.StatusBufferOverflow))
		return false
	}
	c.rec.Encode(b)
	c.ring.Publish()
	c.pushed++
	if solicited {
		c.solicited++
	}
	return true
}

// drain moves c's daemon completions into the client's ring, as many as
// the ring has room for.
func (r *relay) drain(c *sCQ) int {
	room := c.ring.Free()
	if room == 0 {
		return 0
	}
	n := hook.PopCQ(c.cq, c.entries[:min(room, len(c.entries))])
	for i := 0; i < n; i++ {
		e := &c.entries[i]
		slot, _ := e.RequestContext.(*reqSlot)
		q, _ := e.QPContext.(*sQP)
		if slot == nil || q == nil {
			continue
		}
		r.publish(q)
		if slot.fenced {
			slot.fenced = false
			q.responses--
		}
		c.rec = proto.Completion{
			Status: e.Status, Bytes: e.Bytes, Type: e.Type, ProviderErrorCode: e.ProviderErrorCode,
			TypeSpecific: e.TypeSpecific, Seq: slot.seq, QP: q.h, Kind: slot.kind,
		}
		r.push(c, e.Solicited)
		*e = hook.Entry{}
	}
	return n
}

// fireArm notifies the client when its arm is satisfied (NDKPI.md §8): ANY
// by a completion since the last notification, SOLICITED by a solicited
// or failed one, any arm by a CQ error.
func (r *relay) fireArm(c *sCQ) {
	a := c.arm.Load()
	if a == armNone {
		return
	}
	st := ndk.Status(c.status.Load())
	fire := false
	switch {
	case st != ndk.StatusSuccess && !c.errReported:
		fire = true
	case a >= armAny && c.pushed > c.notified:
		fire = true
	case a >= armSolicited && c.solicited > c.notifiedSol:
		fire = true
	}
	if !fire || !c.arm.CompareAndSwap(a, armNone) {
		return
	}
	if st != ndk.StatusSuccess {
		c.errReported = true
	}
	c.notified, c.notifiedSol = c.pushed, c.solicited
	r.ss.event(proto.EvCQ, c.h, st)
}
