package daemon

import (
	"fmt"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// The relay's part in SRQs, memory windows and fast registration (doc.go):
// the SRQs' rings and the local operations of the send rings.

// sSRQ is a client SRQ: the daemon adapter's SRQ, fed from the receive
// ring the client posts into. Its receives complete on the receive CQs of
// the QPs that take them, with their reqSlots (kind KindSRQ) as contexts.
type sSRQ struct {
	h      uint32
	hv     atomic.Uint32 // h, for the notification callback's goroutine
	srq    *ndk.SRQ
	seg    *shm.Segment
	layout proto.SRQLayout
	ring   *shm.Consumer
	post   *atomic.Uint32 // the client's hint
	done   *atomic.Uint64 // receives completed, for the client's depth check

	// Relay-owned.
	completed uint64
	slots     []reqSlot
	mask      uint64
	rr        proto.Recv
	stalled   bool // rr was refused as the SRQ full: post it first
	again     bool // serve without a new hint
	ready     int  // records this pass may move (countReceives)
	broken    bool
	removed   bool // out of the relay's list (closed): the ring is not read
	sgl       [proto.MaxSGE]ndk.SGE
}

func (x *sSRQ) init(srq *ndk.SRQ, depth int) error {
	l := proto.NewSRQLayout(proto.Slots(depth))
	seg, err := shm.NewSegment("ndkxdp-srq", l.Size)
	if err != nil {
		return err
	}
	x.srq, x.seg, x.layout, x.post, x.done = srq, seg, l, seg.Word32(l.Words), seg.Word64(l.Words+8)
	if x.ring, err = shm.NewConsumer(seg, l.Ring); err != nil {
		seg.Close()
		return err
	}
	// As a QP's: the ring, as many more in the daemon's SRQ (up to its
	// capacity, which Modify may reach), and one waiting refused.
	x.slots = make([]reqSlot, 4*l.Ring.Slots)
	x.mask = uint64(len(x.slots) - 1)
	return nil
}

// hold runs f with the relay held off: f may change what a pass uses.
func (r *relay) hold(f func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f()
}

func (r *relay) addSRQ(x *sSRQ) {
	r.mu.Lock()
	r.srqs = append(r.srqs, x)
	r.mu.Unlock()
}

// removeSRQ takes x out of the relay's list; when it returns, the relay
// does not read x's ring and never will again. It reports whether x was
// there (a second close finds it gone).
func (r *relay) removeSRQ(x *sSRQ) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, y := range r.srqs {
		if y == x {
			r.srqs = append(r.srqs[:i], r.srqs[i+1:]...)
			x.removed = true
			return true
		}
	}
	return false
}

// pumpSRQ moves at most limit of x's receive records (after the one the
// SRQ refused as full before, if any) into the daemon's SRQ. A record the
// SRQ refuses for a reason other than being full has no QP to complete
// on: the SRQ's ring is then read no more, and the client is told with
// the SRQ's fatal status (STATUS_INTERNAL_ERROR).
func (r *relay) pumpSRQ(x *sSRQ, limit int) (n int, more bool) {
	for taken := 0; ; {
		if n == budget {
			return n, true
		}
		if !x.stalled {
			if taken == limit {
				return n, false
			}
			taken++
			rec := x.ring.Peek()
			if rec == nil {
				if x.ring.Err() != nil {
					r.breakSRQ(x, x.ring.Err())
				}
				return n, false
			}
			x.rr.Decode(rec)
			x.ring.Release()
		}
		v := &x.rr
		if v.NSGE > proto.MaxSGE {
			r.breakSRQ(x, fmt.Errorf("malformed record (%d SGEs)", v.NSGE))
			return n, false
		}
		slot := &x.slots[v.Seq&x.mask]
		slot.seq, slot.kind, slot.fenced = v.Seq, proto.KindSRQ, false
		for i := 0; i < int(v.NSGE); i++ {
			e := &v.SGL[i]
			x.sgl[i] = ndk.SGE{Addr: e.Addr, Length: e.Length, Token: e.Token}
		}
		err := x.srq.Receive(slot, x.sgl[:v.NSGE])
		if err != nil && ndk.StatusOf(err) == ndk.StatusInsufficientResources {
			x.stalled = true
			return n, true
		}
		x.stalled = false
		if err != nil {
			r.breakSRQ(x, err)
			return n, false
		}
		n++
	}
}

// modifySRQ is NdkModifySrq for the client. The receives the client posted
// before it count as outstanding, as they do in process: the relay moves
// them into the daemon's SRQ first, after the send records published
// before them (see pass); those that do not fit leave the depth at least
// as high as they need, which the SRQ's own check sees.
func (r *relay) modifySRQ(x *sSRQ, depth, threshold int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !x.removed && !x.broken {
		limit := x.ring.Len()
		if r.sendsFirst() {
			_, more := r.pumpSRQ(x, limit)
			x.again = x.again || more
		} else {
			x.again = true
		}
	}
	return x.srq.Modify(depth, threshold)
}

// srqLen is SRQ.Len for the client: the receives queued in the daemon's
// SRQ and those the relay has not moved there yet.
func (r *relay) srqLen(x *sSRQ) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if x.removed {
		return x.srq.Len() // its segment may be unmapped
	}
	n := x.srq.Len() + x.ring.Len()
	if x.stalled {
		n++
	}
	return n
}

func (r *relay) breakSRQ(x *sSRQ, err error) {
	if x.broken {
		return
	}
	x.broken = true
	r.ss.srv.brokenRings.Add(1)
	r.notifyEv(proto.EvSRQ, x.h, ndk.StatusInternalError)
	r.ss.log.Warn("client's SRQ record refused; its SRQ ring is read no more", "srq", x.h, "err", err)
}

// moveSRQs moves the receives countReceives counted on the SRQs, unless
// send records published before them are left behind (not clean): then
// they wait for the next pass.
func (r *relay) moveSRQs(clean bool) int {
	n := 0
	for _, x := range r.srqs {
		if x.broken {
			continue
		}
		if x.ready == 0 && !x.stalled {
			if x.ring.Err() != nil {
				r.breakSRQ(x, x.ring.Err())
			}
			x.again = false
			continue
		}
		if !clean {
			x.again = true
			continue
		}
		sn, more := r.pumpSRQ(x, x.ready)
		n += sn
		x.again = more
	}
	return n
}

// sendsFirst moves, outside a pass, every send record published before the
// receives its caller has just counted (see pass), and reports whether
// none is left behind. The marks it takes are left for the pass, to serve
// those QPs' receives, and the engine is rung for it.
func (r *relay) sendsFirst() (clean bool) {
	words := (len(r.slots) + 63) / 64
	clear(r.marked[:words])
	n, clean := r.moveSends(words, true)
	if n > 0 {
		r.eng.Ring()
	}
	return clean
}

// postLocal posts a client's Bind, FastRegister or Invalidate. Every
// handle is looked up among the session's own objects, the FastRegister's
// memory among its arenas, and every token is checked by the daemon's
// table against the QP's protection domain: what the client names that is
// not its own completes with the refusal, as a post the daemon's QP
// refuses does.
func (r *relay) postLocal(q *sQP, s *proto.Send) ndk.Status {
	slot := &q.sendSlots[s.Seq&q.sendMask]
	slot.seq, slot.kind, slot.fenced = s.Seq, proto.KindSend, false
	flags := s.Flags &^ uint32(ndk.OpFlagDefer)
	var err error
	switch s.Op {
	case proto.OpBind:
		w, lerr := lookup[*sMW](r.ss, s.Handle)
		if lerr != nil {
			err = lerr
			break
		}
		err = r.be.Bind(q.qp, slot, w.mw, s.InvToken, s.RemoteAddr, s.Length, flags, s.RemoteToken)
	case proto.OpFastRegister:
		m, lerr := lookup[*sMR](r.ss, s.Handle)
		if lerr != nil {
			err = lerr
			break
		}
		r.ss.mu.Lock()
		seg := r.ss.arenas[s.Arena]
		r.ss.mu.Unlock()
		if seg == nil || s.Length == 0 || s.ArenaOff > uint64(seg.Size()) || s.Length > uint64(seg.Size())-s.ArenaOff {
			err = errLocalMemory
			break
		}
		buf := seg.Bytes()[s.ArenaOff : s.ArenaOff+s.Length : s.ArenaOff+s.Length]
		err = r.be.FastRegister(q.qp, slot, m.mr, s.RemoteAddr, buf, flags, s.InvToken, s.RemoteToken)
	case proto.OpInvalidate:
		err = r.be.Invalidate(q.qp, slot, s.InvToken, flags)
	}
	if err == nil {
		return ndk.StatusSuccess
	}
	st := statusOf(err)
	if st != ndk.StatusInsufficientResources {
		r.complete(q.scq, q, slot, st, localType(s.Op))
	}
	return st
}

var errLocalMemory = statusErr(ndk.StatusAccessViolation, "fast register: memory outside the client's arenas")

// localType is the NDK_OPERATION_TYPE of a local operation's completion.
func localType(op uint8) uint32 {
	switch op {
	case proto.OpFastRegister:
		return uint32(ndk.OpFastRegister)
	case proto.OpBind:
		return uint32(ndk.OpBind)
	}
	return uint32(ndk.OpInvalidate)
}
