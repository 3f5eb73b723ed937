package daemon

import (
	"fmt"
	mathbits "math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
	seg    *shm.Segment // the first segment: the arm and status words
	layout proto.CQLayout
	ring   *shm.Producer
	rseg   *shm.Segment   // the current ring's segment (seg until a resize)
	arm    *atomic.Uint32 // client raises, relay clears when it fires
	status *atomic.Uint32 // the CQ error, once
	// Interrupt moderation (OpModerateCQ; ndk/internal/cq/moderation.go
	// for an in-process CQ): a satisfied arm fires once modCount
	// completions arrived since the last notification or modInterval
	// (ns) passed since it was first satisfied; 0 turns a bound off.
	modCount    atomic.Uint64
	modInterval atomic.Int64
	heldSince   time.Time   // relay-owned: when a moderated arm was first satisfied
	modTimer    *time.Timer // relay-owned: rings the engine when a held interval ends
	modWake     bool        // relay-owned: modTimer is set for the held arm

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
	c := &sCQ{seg: seg, rseg: seg, layout: l, arm: seg.Word32(l.Words), status: seg.Word32(l.Words + 4)}
	if c.ring, err = shm.NewProducer(seg, l.Ring); err != nil {
		seg.Close()
		return nil, err
	}
	ring := ss.relay.eng.Ring
	c.cq, err = ss.srv.a.CreateCQ(depth, func(st ndk.Status) {
		if st != ndk.StatusSuccess {
			c.status.CompareAndSwap(0, uint32(st))
		}
		ring()
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
	slot   int            // in the session's bitmaps
	queue  int            // the engine's queue
	wArm   *atomic.Uint32 // ArmPeerWrites: the client sets it, the relay fires it
	wAt    *atomic.Uint64 // the count the client armed at
	state  *atomic.Uint32 // proto.QPFailed once qp is in error
	// The client's records no longer outstanding, for its depth check.
	sendDone, recvDone *atomic.Uint64
	rcq                *sCQ
	srq                *sSRQ // the SRQ it takes its receives from, or nil
	scq                *sCQ

	// Relay-owned.
	sendSlots, recvSlots []reqSlot
	sendMask, recvMask   uint64
	sr                   proto.Send
	rr                   proto.Recv
	stalledSend          bool // sr was refused as queue full, or waits on its fence: post it first
	stalledRecv          bool
	broken               bool // the client wrote garbage: flushed, no longer read
	// drainRecv: the send ring broke in this pass, before the receive
	// ring was served: the receives published before the garbage still
	// go in, once, to complete CANCELLED on the flushed QP.
	drainRecv bool
	failed    bool // state holds proto.QPFailed
	removed   bool // out of its slot: seg may be unmapped
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
	sgl                        [proto.MaxSGE]ndk.SGE
	inline                     [proto.MaxInline]byte
}

func newSQP(ss *session, p *sPD, rcq, scq *sCQ, srq *sSRQ, req *proto.Request) (*sQP, error) {
	q := &sQP{rcq: rcq, scq: scq, srq: srq}
	// The QP's context in every daemon completion is q.
	cfg := ndk.QPConfig{
		ReceiveCQ: rcq.cq, InitiatorCQ: scq.cq, Context: q,
		ReceiveQueueDepth: req.Depth, InitiatorQueueDepth: req.SendDepth,
		MaxReceiveRequestSGE: req.RecvSGE, MaxInitiatorRequestSGE: req.SendSGE,
		InlineDataSize: req.Inline,
	}
	if srq != nil {
		cfg.SRQ = srq.srq
	}
	qp, err := p.pd.CreateQP(cfg)
	if err != nil {
		return nil, err
	}
	// A client's ring holds as many requests as the QP; the daemon's QP
	// holds as many more, and one may wait refused: contexts for four
	// depths outlive every request that can be outstanding. A QP on an
	// SRQ keeps a receive ring of one slot that nothing posts into.
	ssl, rsl := proto.Slots(req.SendDepth), proto.Slots(max(req.Depth, 1))
	l := proto.NewQPLayout(ssl, rsl)
	seg, err := shm.NewSegment("ndkxdp-qp", l.Size)
	if err != nil {
		qp.Close()
		return nil, err
	}
	q.qp, q.seg, q.layout, q.queue, q.slot = qp, seg, l, qp.Queue(), -1
	q.state, q.wArm = seg.Word32(l.Words+8), seg.Word32(l.Words+12)
	q.sendDone, q.recvDone, q.wAt = seg.Word64(l.Words+16), seg.Word64(l.Words+24), seg.Word64(l.Words+40)
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

// relay is a session's data path. It takes the client's posted work out
// of its shared rings and posts it on the daemon's QPs, and moves the
// daemon CQs' completions into the client's CQ rings, firing the client's
// arms. It runs in the loop of the engine of queue 0 (rc.Poller), so a
// post reaches the engine with no goroutine between: the client rings the
// engine's own doorbell, whose flags live in shared memory, and the
// engine's next turn moves the post. Before the engine sleeps, Idle arms
// the session's daemon CQs, whose notifications ring the engine when a
// completion arrives from another queue's engine.
type relay struct {
	ss  *session
	eng *hook.Engine
	seg *shm.Segment // the session segment (proto.SessionSize)

	// Shared words of the session segment.
	writes [proto.MaxQueues]*atomic.Uint64
	post   [proto.BitmapWords]*atomic.Uint64
	arm    [proto.BitmapWords]*atomic.Uint64

	mu      sync.Mutex // held by the engine for each pass; by control to change the lists
	slots   []*sQP     // by slot; nil where free
	free    []int
	cqs     []*sCQ
	srqs    []*sSRQ
	stopped bool

	// Engine-owned (under mu): slots to serve again without a new post
	// (a budget used up, a full daemon QP), and each queue's last
	// published WRITE count.
	again      [proto.BitmapWords]uint64
	lastWrites [proto.MaxQueues]uint64
	queues     [proto.MaxQueues]int // QPs per queue
	passes     uint64

	// Notifications (fired CQ arms, fired write arms) go into the
	// session's event ring, whose doorbell wakes the client's reader
	// (an eventfd write only while it sleeps). A client that brought no
	// eventfd, or whose ring is full, gets them as messages, which leave
	// through the session's notifier goroutine: the engine must not
	// block on the client's socket.
	events     *shm.Producer
	clientBell *shm.Doorbell
	ev         proto.Event
	nmu        sync.Mutex
	notes      []note
	nwake      chan struct{}
}

type note struct {
	ev string
	h  uint32
	st ndk.Status
}

// newRelay makes the session's relay; efd, if not -1, is the client's
// eventfd for its event reader, which the relay takes over.
func newRelay(ss *session, efd int) (*relay, error) {
	eng, err := hook.EngineOf(ss.srv.a)
	if err != nil {
		closeFDs([]int{efd})
		return nil, fmt.Errorf("daemon adapter: %w", err)
	}
	seg, err := shm.NewSegment("ndkxdp-session", proto.SessionSize)
	if err != nil {
		closeFDs([]int{efd})
		return nil, err
	}
	r := &relay{ss: ss, eng: eng, seg: seg, nwake: make(chan struct{}, 1)}
	if efd >= 0 {
		if r.clientBell, err = shm.NewDoorbell(seg, proto.EventBell, efd); err == nil {
			r.events, err = shm.NewProducer(seg, proto.EventRing)
		}
		if err != nil {
			closeFDs([]int{efd})
			seg.Close()
			return nil, err
		}
	}
	for i := range r.writes {
		r.writes[i] = seg.Word64(8 * i)
	}
	for i := range r.post {
		r.post[i] = seg.Word64(proto.PostBitmap + 8*i)
		r.arm[i] = seg.Word64(proto.ArmBitmap + 8*i)
	}
	if err := eng.Add(r); err != nil {
		seg.Close()
		return nil, err
	}
	go r.notifier()
	return r, nil
}

// addQP gives q a slot in the session's bitmaps.
func (r *relay) addQP(q *sQP) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case len(r.free) > 0:
		q.slot = r.free[len(r.free)-1]
		r.free = r.free[:len(r.free)-1]
	case len(r.slots) < proto.MaxQPSlots:
		q.slot = len(r.slots)
		r.slots = append(r.slots, nil)
	default:
		return statusErr(ndk.StatusInsufficientResources, "client holds its maximum of %d QPs", proto.MaxQPSlots)
	}
	if q.queue < 0 || q.queue >= proto.MaxQueues {
		return statusErr(ndk.StatusInternalError, "QP on queue %d", q.queue)
	}
	r.slots[q.slot] = q
	r.queues[q.queue]++
	return nil
}

// removeQP takes q out of its slot; when it returns, the relay is not
// touching q and never will again.
func (r *relay) removeQP(q *sQP) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q.slot < 0 || q.slot >= len(r.slots) || r.slots[q.slot] != q {
		return
	}
	r.slots[q.slot] = nil
	w, bit := proto.SlotWord(q.slot)
	r.again[w] &^= bit
	r.free = append(r.free, q.slot)
	r.queues[q.queue]--
	q.slot = -1
	q.removed = true
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
	if c.modTimer != nil {
		c.modTimer.Stop()
	}
	r.mu.Unlock()
}

// stop takes the relay out of the engine's loop; when it returns, no pass
// runs or ever will.
func (r *relay) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	_ = r.eng.Remove(r)
}

func (r *relay) close() {
	if r.clientBell != nil {
		r.clientBell.Close()
	}
	r.seg.Close()
}

// Poll is one pass, in the engine's loop. While control changes the lists
// the pass is skipped, and counted as work so that the engine comes back
// for it at once.
func (r *relay) Poll() int {
	if !r.mu.TryLock() {
		return 1
	}
	defer r.mu.Unlock()
	if r.stopped {
		return 0
	}
	return r.pass()
}

// Idle arms every daemon CQ of the session before the engine sleeps: a
// completion then rings the engine (an arm that finds completions rings
// at once). It publishes every QP's state first (sweep).
func (r *relay) Idle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep()
	for _, c := range r.cqs {
		_ = c.cq.Arm(ndk.CQNotifyAny)
	}
}

func (r *relay) notify(h uint32, st ndk.Status) { r.notifyEv(proto.EvCQ, h, st) }

// maxNotes bounds the notifications waiting for a client that does not
// read its socket; one that lets more pile up is dropped.
const maxNotes = 1 << 16

// notifyEv sends a notification: a CQ's or a write arm's, from the relay
// in the engine's loop, through the session's event ring (its one
// producer) when there is room; an SRQ's, from the SRQ's own goroutine
// and rare, always as a message.
func (r *relay) notifyEv(ev string, h uint32, st ndk.Status) {
	if r.events != nil && ev != proto.EvSRQ {
		if b := r.events.Reserve(); b != nil {
			r.ev = proto.Event{Kind: proto.EventCQ, Status: uint32(st), H: h}
			if ev == proto.EvPeerWrite {
				r.ev.Kind = proto.EventPeerWrite
			}
			r.ev.Encode(b)
			r.events.Publish()
			r.clientBell.Ring()
			return
		}
	}
	r.nmu.Lock()
	if len(r.notes) >= maxNotes {
		r.nmu.Unlock()
		r.ss.log.Warn("client does not read its notifications; dropping it", "pending", maxNotes)
		go r.ss.kill()
		return
	}
	r.notes = append(r.notes, note{ev, h, st})
	r.nmu.Unlock()
	select {
	case r.nwake <- struct{}{}:
	default:
	}
}

func (r *relay) notifier() {
	for {
		select {
		case <-r.ss.ctx.Done():
			return
		case <-r.nwake:
		}
		r.nmu.Lock()
		notes := r.notes
		r.notes = nil
		r.nmu.Unlock()
		for _, n := range notes {
			r.ss.event(n.ev, n.h, n.st)
		}
	}
}

// pass does one round over the session's QPs and CQs and returns how much
// it moved.
func (r *relay) pass() int {
	n := 0
	if r.passes++; r.passes%sweepEvery == 0 {
		r.sweep()
	}
	for q, count := range r.queues {
		if count == 0 {
			continue
		}
		if w := r.eng.PlacedWrites(q); w != r.lastWrites[q] {
			r.lastWrites[q] = w
			r.writes[q].Store(w)
		}
	}
	words := (len(r.slots) + 63) / 64
	for i := range words {
		if r.post[i].Load() != 0 || r.again[i] != 0 {
			n += r.serve(i, r.post[i].Swap(0)|r.again[i])
		}
		if r.arm[i].Load() != 0 {
			r.watchArms(i, r.arm[i].Swap(0))
		}
	}
	n += r.serveSRQs(words)
	for _, c := range r.cqs {
		n += r.drain(c)
		r.fireArm(c)
	}
	return n
}

// serve moves the posts of the QPs whose bits are set in word i of the
// post bitmap, and marks for the next pass those it could not finish.
// The send rings go first, all of them: a receive may use the token of a
// FastRegister posted before it on any of these QPs.
func (r *relay) serve(i int, bits uint64) int {
	r.again[i] = 0
	n := 0
	for rest := bits; rest != 0; {
		b := rest & -rest
		rest &^= b
		q := r.slots[i*64+mathbits.TrailingZeros64(b)]
		if q == nil || q.broken {
			continue
		}
		sn, more := r.pumpSend(q)
		n += sn
		if more {
			r.again[i] |= b
		}
	}
	for rest := bits; rest != 0; {
		b := rest & -rest
		rest &^= b
		q := r.slots[i*64+mathbits.TrailingZeros64(b)]
		if q == nil || (q.broken && !q.drainRecv) {
			continue
		}
		rn, more := r.pumpRecv(q)
		q.drainRecv = false
		n += rn
		if more {
			r.again[i] |= b
		}
		r.publish(q)
	}
	return n
}

// watchArms fires the write arms of the QPs whose bits were set in word i
// of the arm bitmap once their queue's count moved past the count armed
// at; an arm not yet due is watched again.
func (r *relay) watchArms(i int, bits uint64) {
	keep := uint64(0)
	for bits != 0 {
		b := bits & -bits
		bits &^= b
		q := r.slots[i*64+mathbits.TrailingZeros64(b)]
		if q == nil || q.wArm.Load() == 0 {
			continue
		}
		if q.wAt.Load() != r.lastWrites[q.queue] && q.wArm.CompareAndSwap(1, 0) {
			r.notifyEv(proto.EvPeerWrite, q.h, ndk.StatusSuccess)
			continue
		}
		keep |= b
	}
	if keep != 0 {
		r.arm[i].Or(keep)
	}
}

// budget bounds the records one pass takes from one ring, so that one
// busy QP does not starve the others or the completions.
const budget = 64

// pumpSend moves q's send records; more reports records left for the
// next pass (the budget ran out, or the daemon's QP is full).
func (r *relay) pumpSend(q *sQP) (n int, more bool) {
	for {
		if n == budget {
			return n, true
		}
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
			// The fenced request waits in its slot for the completions
			// of the READs before it to reach the client.
			q.stalledSend = true
			return n, true
		}
		st := r.postSend(q, &q.sr)
		if st == ndk.StatusInsufficientResources {
			q.stalledSend = true
			return n, true
		}
		q.stalledSend = false
		q.sendTaken++
		n++
		if q.broken {
			return n, false
		}
	}
	return n, false
}

func (r *relay) pumpRecv(q *sQP) (n int, more bool) {
	for {
		if n == budget {
			return n, true
		}
		if !q.stalledRecv {
			rec := q.recv.Peek()
			if rec == nil {
				if q.recv.Err() != nil {
					q.drainRecv = false
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
			return n, true
		}
		q.stalledRecv = false
		q.recvTaken++
		n++
		if q.broken && !q.drainRecv {
			return n, false
		}
	}
	return n, false
}

// breakQP answers a client that broke its own rings: its QP goes to the
// error state (its requests complete CANCELLED) and the relay reads its
// rings no more. Nothing else of the client's, or of anyone's, is touched.
func (r *relay) breakQP(q *sQP, what string, err error) {
	if q.broken {
		return
	}
	q.broken = true
	q.drainRecv = what == "send ring"
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
	if s.Op >= proto.OpFastRegister && s.Op <= proto.OpInvalidate && s.NSGE == 0 && s.InlineLen == 0 {
		return r.postLocal(q, s)
	}
	if s.Op < opSend || s.Op > opFetchAdd || s.NSGE > proto.MaxSGE || s.InlineLen > proto.MaxInline {
		r.breakQP(q, "send ring", fmt.Errorf("malformed record (op %d, %d SGEs, %d inline bytes)", s.Op, s.NSGE, s.InlineLen))
		return ndk.StatusSuccess
	}
	slot := &q.sendSlots[s.Seq&q.sendMask]
	slot.seq, slot.kind, slot.fenced = s.Seq, proto.KindSend, false
	// The client's post has rung already (DEFER decided whether and when
	// its bit was set): the daemon's QP must not hold the request back
	// for a doorbell of its own that no later record would ring.
	flags := ndk.OpFlag(s.Flags) &^ ndk.OpFlagDefer
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
		q.drainRecv = false
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
		if slot.kind == proto.KindSRQ && q.srq != nil && !q.srq.removed {
			q.srq.completed++
			q.srq.done.Store(q.srq.completed)
		}
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
	if fire && st == ndk.StatusSuccess && r.moderationHolds(c) {
		return
	}
	if !fire || !c.arm.CompareAndSwap(a, armNone) {
		return
	}
	c.heldSince, c.modWake = time.Time{}, false
	if st != ndk.StatusSuccess {
		c.errReported = true
	}
	c.notified, c.notifiedSol = c.pushed, c.solicited
	r.notify(c.h, st)
}

// moderationHolds reports whether moderation holds back a satisfied arm:
// neither its count of completions since the last notification nor its
// interval since the arm was first satisfied is reached yet. A CQ error
// is never held (the caller asks only for normal notifications). The
// engine may sleep while an interval runs, so a timer rings it when the
// interval ends; a count is reached by a completion, which wakes it.
func (r *relay) moderationHolds(c *sCQ) bool {
	count, interval := c.modCount.Load(), time.Duration(c.modInterval.Load())
	if count <= 1 && interval <= 0 {
		return false
	}
	now := time.Now()
	if c.heldSince.IsZero() {
		c.heldSince = now
	}
	if count > 0 && c.pushed-c.notified >= count {
		return false
	}
	if interval <= 0 {
		return true
	}
	left := interval - now.Sub(c.heldSince)
	if left <= 0 {
		return false
	}
	if !c.modWake {
		c.modWake = true
		if c.modTimer == nil {
			c.modTimer = time.AfterFunc(left, r.eng.Ring)
		} else {
			c.modTimer.Reset(left)
		}
	}
	return true
}

// resize gives c a ring of a new size (NdkResizeCq through the daemon):
// the daemon's CQ resizes first, refusing a depth below what it holds;
// then, with the relay held off, the current ring is sealed and the new
// one takes the completions that follow. The client drains the old ring
// before it takes the new one, so their order holds.
func (r *relay) resize(c *sCQ, depth int) (*shm.Segment, proto.CQLayout, error) {
	l := proto.NewCQLayout(proto.Slots(depth))
	seg, err := shm.NewSegment("ndkxdp-cq", l.Size)
	if err != nil {
		return nil, l, err
	}
	ring, err := shm.NewProducer(seg, l.Ring)
	if err != nil {
		seg.Close()
		return nil, l, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := c.cq.Resize(depth); err != nil {
		seg.Close()
		return nil, l, err
	}
	c.rseg.Word32(c.layout.Words + 8).Store(1)
	if c.rseg != c.seg {
		c.rseg.Close()
	}
	c.ring, c.rseg, c.layout = ring, seg, l
	return seg, l, nil
}

// closeSegments unmaps c's segments, once the relay and the engines are
// done with c.
func (c *sCQ) closeSegments() {
	if c.rseg != c.seg {
		c.rseg.Close()
	}
	c.seg.Close()
}

// sweepEvery is how many passes go between two sweeps of every QP's
// published state: a QP can fail, and a SILENT_SUCCESS request retire,
// with nothing the relay serves or moves.
const sweepEvery = 64

// sweep publishes every QP's state and done counts.
func (r *relay) sweep() {
	for _, q := range r.slots {
		if q != nil {
			r.publish(q)
		}
	}
}

// publish tells the client that q failed, for QP.Connected, and how many
// of its records are done, for its depth check. It runs for each QP the
// pass serves, before each completion of the QP is moved (the client sees
// the error no later than the completions it cancelled, and a completed
// request's slot free), and in each sweep. A QP the client closed has
// nothing to publish: its completions may still be on their way, its
// segment not.
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
