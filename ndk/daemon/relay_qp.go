package daemon

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"unsafe"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

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
	groups map[netip.Addr]bool // multicast groups joined, under the session's mcMu
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
	ready                int  // receive records this pass may move (countReceives)
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

func newSQP(ss *session, p *sPD, rcq, scq *sCQ, srq *sSRQ, req *proto.CreateQP) (*sQP, error) {
	q := &sQP{rcq: rcq, scq: scq, srq: srq}
	// The QP's context in every daemon completion is q.
	cfg := ndk.QPConfig{
		ReceiveCQ: rcq.cq, InitiatorCQ: scq.cq, Context: q,
		ReceiveQueueDepth: req.Depth, InitiatorQueueDepth: req.SendDepth,
		MaxReceiveRequestSGE: req.RecvSGE, MaxInitiatorRequestSGE: req.SendSGE,
		InlineDataSize: req.Inline, UC: req.UC, BlockSelfMulticastLoopback: req.NoSelfLoopback,
	}
	if srq != nil {
		cfg.SRQ = srq.srq
	}
	var qp *ndk.QP
	var err error
	if req.UD {
		qp, err = p.pd.CreateUDQP(cfg, req.QKey)
	} else {
		qp, err = p.pd.CreateQP(cfg)
	}
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

// budget bounds the records one pass takes from one ring, so that one
// busy QP does not starve the others or the completions.
const budget = 64

// pumpSend moves q's send records, at most limit of them; more reports
// records left for the next pass (the limit reached, or the daemon's QP
// full).
func (r *relay) pumpSend(q *sQP, limit int) (n int, more bool) {
	for {
		if n == limit {
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

// pumpRecv moves q's receive records: after the one the daemon's QP
// refused as full before, if any, at most limit more (all there are if
// limit < 0), and no more than the budget in all.
func (r *relay) pumpRecv(q *sQP, limit int) (n int, more bool) {
	for taken := 0; ; {
		if n == budget {
			return n, true
		}
		if !q.stalledRecv {
			if taken == limit {
				return n, false
			}
			taken++
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

// refill moves q's posted receives now, on the goroutine of the engine
// that found q's receive queue empty under a datagram (rc's
// SetReceiveRefill): a receive the client posted before the datagram
// arrived must take it, as in process, though the relay's pass may not
// have run since (the engine's thread was preempted between the pass
// and its receive, the pass was skipped for control, or q is on another
// queue's engine), and UD has no retry to make up for it. As a pass does,
// it counts q's receives and moves every send record published before
// them first (a receive may use the token of a FastRegister posted before
// it on any QP). It gives way where it could not: the mutex held (a pass
// or control), q out of its slot or broken, or a send record left
// behind. It reports whether it posted a receive.
func (r *relay) refill(q *sQP) (posted bool) {
	if !r.mu.TryLock() {
		return false
	}
	defer r.mu.Unlock()
	if r.stopped || q.removed || q.broken || q.stalledRecv {
		return false
	}
	defer r.contain()
	ready := q.recv.Len()
	if ready == 0 || !r.sendsFirst() {
		return false
	}
	n, more := r.pumpRecv(q, ready)
	if more {
		w, bit := proto.SlotWord(q.slot)
		r.again[w] |= bit
	}
	r.publish(q)
	return n > 0
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
	r.ss.srv.brokenRings.Add(1)
	r.ss.log.Warn("client broke a work ring; its QP is flushed", "qp", q.h, "ring", what, "err", err)
}

const opFlagInline = ndk.OpFlagInline

// dataOp reports whether op is a send record's operation with a packet on
// the wire.
func dataOp(op uint8) bool {
	return (op >= proto.OpSend && op <= proto.OpFetchAdd) || op == proto.OpSendImm || op == proto.OpWriteImm
}

// responded reports whether the peer answers op with data (READ
// responses, ATOMIC_ACKNOWLEDGE).
func responded(op uint8) bool {
	return op == proto.OpRead || op == proto.OpCompareSwap || op == proto.OpFetchAdd
}

// postSend posts one client send record on the daemon's QP. The client
// already checked what it could; the daemon checks again, since the
// client is not trusted: a record no correct client writes breaks the QP,
// and a post the daemon's QP refuses completes with the refusal's status.
func (r *relay) postSend(q *sQP, s *proto.Send) ndk.Status {
	if s.Op >= proto.OpFastRegister && s.Op <= proto.OpInvalidate && s.NSGE == 0 && s.InlineLen == 0 {
		return r.postLocal(q, s)
	}
	if !dataOp(s.Op) || s.NSGE > proto.MaxSGE || s.InlineLen > proto.MaxInline {
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
	if flags&opFlagInline != 0 && !responded(s.Op) {
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
	switch udOp(q, s) {
	case opUDSend:
		err = postUD(q, slot, sgl, s, flags) // ud.go
	case proto.OpSend:
		err = q.qp.Send(slot, sgl, flags)
	case proto.OpSendInvalidate:
		err = q.qp.SendAndInvalidate(slot, sgl, flags, s.InvToken)
	case proto.OpWrite:
		err = q.qp.Write(slot, sgl, s.RemoteAddr, s.RemoteToken, flags)
	case proto.OpSendImm:
		err = q.qp.SendWithImmediate(slot, sgl, flags, s.Imm)
	case proto.OpWriteImm:
		err = q.qp.WriteWithImmediate(slot, sgl, s.RemoteAddr, s.RemoteToken, flags, s.Imm)
	case proto.OpRead:
		err = q.qp.Read(slot, sgl, s.RemoteAddr, s.RemoteToken, flags)
	case proto.OpCompareSwap, proto.OpFetchAdd:
		if len(sgl) != 1 {
			r.complete(q.scq, q, slot, ndk.StatusInvalidParameter, 0)
			return ndk.StatusInvalidParameter
		}
		if s.Op == proto.OpCompareSwap {
			err = q.qp.CompareAndSwap(slot, sgl[0], s.RemoteAddr, s.RemoteToken, s.Compare, s.SwapAdd, flags)
		} else {
			err = q.qp.FetchAndAdd(slot, sgl[0], s.RemoteAddr, s.RemoteToken, s.SwapAdd, flags)
		}
	}
	if err == nil {
		if responded(s.Op) && flags&ndk.OpFlagSilentSuccess == 0 {
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
	if !q.failed && r.be.QPFailed(q.qp) {
		q.failed = true
		q.state.Store(proto.QPFailed)
	}
	s, v := r.be.QPQueued(q.qp)
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
