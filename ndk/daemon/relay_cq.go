package daemon

import (
	"sync/atomic"
	"time"

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
	// movedW and notifiedW publish pushed and notified (low 32 bits) for
	// the client's arm (proto.CQLayout).
	movedW, notifiedW *atomic.Uint32
	status            *atomic.Uint32 // the CQ error, once
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
	left                  bool // the last drain may have left completions in the daemon CQ
	entries               [64]hook.Entry
	rec                   proto.Completion
}

func newSCQ(ss *session, depth int) (*sCQ, error) {
	l := proto.NewCQLayout(proto.Slots(depth))
	seg, err := shm.NewSegment("ndkxdp-cq", l.Size)
	if err != nil {
		return nil, err
	}
	c := &sCQ{seg: seg, rseg: seg, layout: l, arm: seg.Word32(l.Words), status: seg.Word32(l.Words + 4),
		movedW: seg.Word32(l.Words + 12), notifiedW: seg.Word32(l.Words + 16)}
	if c.ring, err = shm.NewProducer(seg, l.Ring); err != nil {
		seg.Close()
		return nil, err
	}
	ring, srv := ss.relay.eng.Ring, ss.srv
	c.cq, err = ss.srv.a.CreateCQ(depth, func(st ndk.Status) {
		if st != ndk.StatusSuccess {
			c.status.CompareAndSwap(0, uint32(st))
		}
		srv.cqRings.Add(1)
		ring()
	})
	if err != nil {
		seg.Close()
		return nil, err
	}
	return c, nil
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
	room := min(c.ring.Free(), len(c.entries))
	c.left = true
	if room == 0 {
		return 0
	}
	n := r.be.PopCQ(c.cq, c.entries[:room])
	c.left = n == room
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
		if e.HasImmediate {
			c.rec.Flags, c.rec.Immediate = proto.CompletionWithImmediate, e.Immediate
		}
		r.push(c, e.Solicited)
		*e = hook.Entry{}
	}
	if n > 0 {
		// Before fireArm reads the arm: a client arming meanwhile either
		// sees this count and rings, or is seen.
		c.movedW.Store(uint32(c.pushed))
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
	c.notifiedW.Store(uint32(c.notified))
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
