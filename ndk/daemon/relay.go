package daemon

import (
	"fmt"
	mathbits "math/bits"
	"sync"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/hook"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// relay is a session's data path. It takes the client's posted work out
// of its shared rings and posts it on the daemon's QPs, and moves the
// daemon CQs' completions into the client's CQ rings, firing the client's
// arms. It runs in the loop of the engine of queue 0 (rc.Poller), so a
// post reaches the engine with no goroutine between: the client rings the
// engine's own doorbell, whose flags live in shared memory, and the
// engine's next turn moves the post. Before the engine sleeps, Idle arms
// the session's daemon CQs, whose notifications ring the engine when a
// completion arrives from another queue's engine, and the placed-write
// notification of each write-armed QP of another queue, which wakes it
// for a WRITE that engine places.
type relay struct {
	ss  *session
	be  backend
	eng *hook.Engine
	seg *shm.Segment // the session segment (proto.SessionSize)
	// bell is the session's own doorbell (proto.RelayBell, and an eventfd
	// of the daemon's that the client gets a copy of): the engine sleeps
	// on it (WakeFD). asleep: Idle announced a sleep that the next Poll
	// ends (engine-owned).
	bell   *shm.Doorbell
	asleep bool

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
	marked     [proto.BitmapWords]uint64 // the QPs this pass serves (pass)
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
	// wwake gets a token when another queue's engine places a WRITE for
	// a write-armed QP while this engine sleeps; the notifier rings it.
	wwake chan struct{}
}

type note struct {
	ev string
	h  uint32
	st ndk.Status
}

// newRelay makes the session's relay; efd, if not -1, is the client's
// eventfd for its event reader, which the relay takes over.
func newRelay(ss *session, efd int) (*relay, error) {
	eng, err := ss.srv.be.Engine(ss.srv.a)
	if err != nil {
		closeFDs([]int{efd})
		return nil, fmt.Errorf("daemon adapter: %w", err)
	}
	seg, err := shm.NewSegment("ndkxdp-session", proto.SessionSize)
	if err != nil {
		closeFDs([]int{efd})
		return nil, err
	}
	r := &relay{ss: ss, be: ss.srv.be, eng: eng, seg: seg, nwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1)}
	bfd, err := shm.NewEventfd()
	if err == nil {
		r.bell, err = shm.NewDoorbell(seg, proto.RelayBell, bfd)
		if err != nil {
			closeFDs([]int{bfd})
		}
	}
	if err != nil {
		closeFDs([]int{efd})
		seg.Close()
		return nil, err
	}
	if efd >= 0 {
		if r.clientBell, err = shm.NewDoorbell(seg, proto.EventBell, efd); err == nil {
			r.events, err = shm.NewProducer(seg, proto.EventRing)
		}
		if err != nil {
			closeFDs([]int{efd})
			r.bell.Close()
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
		r.close()
		return nil, err
	}
	go r.notifier()
	return r, nil
}

// fits reports whether every bit of bits, word i of a bitmap, names a
// slot the session was given, so that the loops over the word may index
// r.slots directly (a free slot is nil). A bit beyond them is one no
// correct client sets: it ends the session.
func (r *relay) fits(i int, bits uint64, what string) bool {
	if bits == 0 {
		return true
	}
	if s := i*64 + 63 - mathbits.LeadingZeros64(bits); s >= len(r.slots) {
		r.fail(reasonRing, fmt.Errorf("%s bitmap names QP slot %d; the session was given %d", what, s, len(r.slots)))
		return false
	}
	return true
}

// slot returns the QP of the slot that bit b of word i names, a word
// that fits.
func (r *relay) slot(i int, b uint64) *sQP {
	return r.slots[i*64+mathbits.TrailingZeros64(b)]
}

// fail ends the session for what its client wrote: the relay serves it
// no more from this pass on, and the session closes as if the client had
// died. The engine's loop goes on for everyone else.
func (r *relay) fail(reason string, err error) {
	if r.stopped {
		return
	}
	r.stopped = true
	r.ss.end(reason, err)
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
	if q.srq == nil && q.qp.UDMaxMessage() != 0 { // only a datagram asks (rc's udReceive)
		r.be.SetReceiveRefill(q.qp, func() bool { return r.refill(q) })
	}
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
	r.bell.Close()
	r.seg.Close()
}

// WakeFD is the eventfd of the session's doorbell, which the engine
// watches while it sleeps (rc.Waker).
func (r *relay) WakeFD() int { return r.bell.FD() }

// Poll is one pass, in the engine's loop. While control changes the lists
// the pass is skipped, and counted as work so that the engine comes back
// for it at once.
func (r *relay) Poll() (n int) {
	if r.asleep {
		r.asleep = false
		r.bell.Resume()
	}
	if !r.mu.TryLock() {
		return 1
	}
	defer r.mu.Unlock()
	if r.stopped {
		return 0
	}
	defer r.contain()
	return r.pass()
}

// contain ends the session whose pass or sleep preparation panicked: the
// panic came from what one client wrote, and costs that client alone,
// never the engine's loop that every session and QP of queue 0 runs in.
// It runs deferred, with r.mu held.
func (r *relay) contain() {
	if p := recover(); p != nil {
		r.fail(reasonPanic, fmt.Errorf("relay: %v\n%s", p, stack()))
	}
}

// Idle arms the session's daemon CQs before the engine sleeps, so that a
// completion the sleeping engine did not make rings it: one from another
// queue's engine, or one the last pass left behind for want of room in
// the client's ring (an arm that finds completions rings at once). A CQ
// that only this engine's QPs complete into gets an arm for errors only:
// its completions come from this engine's own loop, which moves them on
// its next pass, and an arm for any would run the CQ's notifier (a
// goroutine, and on an idle P a thread woken on another CPU) after every
// sleep for nothing. It publishes every QP's state first (sweep).
func (r *relay) Idle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	defer r.contain()
	r.sweep()
	other := false
	for q := 1; q < len(r.queues); q++ {
		other = other || r.queues[q] > 0
	}
	again := false // work found here: the engine turns once more instead of sleeping
	for _, c := range r.cqs {
		// This turn's timers may have completed a request after the
		// pass (a retry spent): it reaches the client before the sleep.
		if r.drain(c) > 0 {
			again = true
			r.fireArm(c)
		}
		if other || c.left {
			_ = c.cq.Arm(ndk.CQNotifyAny)
		} else {
			_ = c.cq.Arm(ndk.CQNotifyErrors)
		}
	}
	// A receive is posted without a ring (ndk's remoteReceive): one marked
	// since the last pass is served before the sleep. The sweep above
	// published every QP's state before these loads, so a client marking
	// later reads a failed QP's state and rings.
	for i := range (len(r.slots) + 63) / 64 {
		again = again || r.post[i].Load() != 0
	}
	if again {
		r.eng.Ring()
	}
	r.armOtherQueues()
	// Last: a post whose ring comes after this either finds the sleep
	// announced and writes the eventfd, or was seen here.
	if r.bell.Announce() {
		r.asleep = true
	} else {
		r.eng.Ring()
	}
}

// armOtherQueues arms the placed-write notification of every write-armed
// QP on another queue than the relay's (0), whose WRITEs that engine
// places while this one sleeps; a count that moved since the last pass
// keeps the engine from sleeping (the ring makes its wait return).
func (r *relay) armOtherQueues() {
	words := (len(r.slots) + 63) / 64
	for i := range words {
		bits := r.arm[i].Load()
		if !r.fits(i, bits, "arm") {
			return
		}
		for bits != 0 {
			b := bits & -bits
			bits &^= b
			q := r.slot(i, b)
			if q == nil || q.queue == 0 || q.wArm.Load() == 0 {
				continue
			}
			q.qp.ArmPeerWrites(r.wwake)
			if r.eng.PlacedWrites(q.queue) != r.lastWrites[q.queue] {
				r.eng.Ring()
			}
		}
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
		r.ss.end(reasonNotifications, fmt.Errorf("%d notifications unread", maxNotes))
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
		case <-r.wwake:
			r.eng.Ring()
			continue
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
//
// A receive, on a QP's ring or an SRQ's, may use the token of a
// FastRegister the client posted before it on any of the session's QPs,
// and must find the token of an Invalidate before it gone. The client
// publishes each send record and then marks its QP in the post bitmap, so
// a send record published before a receive has its QP's mark set by the
// time the receive can be read. The pass therefore counts the receives it
// may move first (countReceives), then reads the bitmap again and moves
// every send record published before that count (moveSends), and only
// then moves receives, no more than it counted. A receive published after
// the count waits for the next pass, which its own mark brings. Moving
// whatever a ring held by the time it was read let a receive pass its
// FastRegister (the daemon's QP or SRQ refused the token): on a QP in a
// later word of the bitmap at once, and on any QP whose records were
// published between the bitmap read and the receive's move.
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
		r.marked[i] = r.again[i]
		r.again[i] = 0
		if r.post[i].Load() != 0 {
			r.marked[i] |= r.post[i].Swap(0)
		}
		if r.arm[i].Load() != 0 {
			r.watchArms(i, r.arm[i].Swap(0))
		}
		if r.stopped {
			return n
		}
	}
	counted := r.countReceives(words)
	if r.stopped {
		return n
	}
	sn, clean := r.moveSends(words, counted)
	n += sn
	if r.stopped {
		return n
	}
	n += r.moveReceives(words, clean)
	n += r.moveSRQs(clean)
	if r.stopped {
		return n
	}
	for _, c := range r.cqs {
		n += r.drain(c)
		r.fireArm(c)
	}
	return n
}

// countReceives counts, for each QP marked this pass and each SRQ with
// news, the receive records the pass may move (ready). It reports whether
// there are any.
func (r *relay) countReceives(words int) (counted bool) {
	for i := range words {
		if !r.fits(i, r.marked[i], "post") {
			return counted
		}
		for rest := r.marked[i]; rest != 0; {
			b := rest & -rest
			rest &^= b
			q := r.slot(i, b)
			if q == nil || q.broken {
				continue
			}
			q.ready = q.recv.Len()
			counted = counted || q.ready > 0 || q.stalledRecv
		}
	}
	for _, x := range r.srqs {
		x.ready = 0
		if x.broken || (!x.again && x.post.Load() == 0) {
			continue
		}
		x.post.Store(0)
		x.ready = x.ring.Len()
		counted = counted || x.ready > 0 || x.stalled
	}
	return counted
}

// moveSends moves the send records of the QPs marked this pass, of those
// left over (again) and of those marked since the marks were taken, whose
// receives, not counted, are left for the next pass. With receives
// counted (drain), each ring is emptied of every record published before
// the count, past the budget; clean reports that none is left behind (a
// record refused as the daemon's QP full, or waiting on its fence, holds
// the receives back, which then wait for the next pass).
func (r *relay) moveSends(words int, drain bool) (n int, clean bool) {
	clean = true
	for i := range words {
		if r.post[i].Load() != 0 {
			fresh := r.post[i].Swap(0)
			if !r.fits(i, fresh, "post") {
				return n, false
			}
			r.again[i] |= fresh
			n++ // their receives: the engine turns again at once
		}
		for rest := r.marked[i] | r.again[i]; rest != 0; {
			b := rest & -rest
			rest &^= b
			q := r.slot(i, b)
			if q == nil || q.broken {
				continue
			}
			limit := budget
			if drain {
				limit = max(budget, q.send.Len()+1)
			}
			sn, more := r.pumpSend(q, limit)
			n += sn
			if more {
				r.again[i] |= b
				clean = false
			}
		}
	}
	return n, clean
}

// moveReceives moves the counted receives of the QPs marked this pass, or,
// where send records are left behind (not clean), leaves them for the
// next pass; and publishes each QP's state.
func (r *relay) moveReceives(words int, clean bool) int {
	n := 0
	for i := range words {
		for rest := r.marked[i]; rest != 0; {
			b := rest & -rest
			rest &^= b
			q := r.slot(i, b) // fits: countReceives
			if q == nil || (q.broken && !q.drainRecv) {
				continue
			}
			switch {
			case q.broken:
				// Flushed: every receive published before the garbage
				// goes in, once, to complete CANCELLED; order no longer
				// matters.
				rn, more := r.pumpRecv(q, -1)
				n += rn
				q.drainRecv = false
				if more {
					r.again[i] |= b
				}
			case q.ready == 0 && !q.stalledRecv:
				if q.recv.Err() != nil {
					r.breakQP(q, "receive ring", q.recv.Err())
				}
			case !clean:
				r.again[i] |= b
			default:
				rn, more := r.pumpRecv(q, q.ready)
				n += rn
				if more {
					r.again[i] |= b
				}
			}
			r.publish(q)
		}
	}
	return n
}

// watchArms fires the write arms of the QPs whose bits were set in word i
// of the arm bitmap once their queue's count moved past the count armed
// at; an arm not yet due is watched again.
func (r *relay) watchArms(i int, bits uint64) {
	if !r.fits(i, bits, "arm") {
		return
	}
	keep := uint64(0)
	for bits != 0 {
		b := bits & -bits
		bits &^= b
		q := r.slot(i, b)
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
