package ndk

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
	"golang.org/x/sys/unix"
)

// daemonCQ is a daemon-backed CQ (cqBackend): the ring the daemon's relay
// fills, the arm word it fires, and the goroutine that runs the
// notification callback, one at a time.
type daemonCQ struct {
	c      *CQ
	link   *daemonLink
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
	armWord *atomic.Uint32
	status  *atomic.Uint32
	// moved and notified are the relay's counts (proto.CQLayout): equal,
	// with no error, an arm has nothing to fire on yet.
	moved, notified *atomic.Uint32
	slots           int
	rec             proto.Completion
	notify          func(Status)

	mu      sync.Mutex
	queue   []Status
	wake    chan struct{}
	stopped chan struct{}
	exited  chan struct{}
	once    sync.Once
}

func (r *daemonLink) createCQ(depth int, notify func(Status)) (*CQ, error) {
	const op = "create cq"
	m, fds, err := ask(r, context.Background(), op, &proto.CreateCQ{Depth: depth})
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
	c := &CQ{adapter: r.a, done: make(chan struct{})}
	rq := &daemonCQ{
		c: c, link: r, h: m.H, seg: seg, ring: ring, rseg: seg, sealed: seg.Word32(l.Words + 8),
		armWord: seg.Word32(l.Words), status: seg.Word32(l.Words + 4), slots: l.Ring.Slots,
		moved: seg.Word32(l.Words + 12), notified: seg.Word32(l.Words + 16),
		notify: notify, wake: make(chan struct{}, 1), stopped: make(chan struct{}), exited: make(chan struct{}),
	}
	if notify != nil {
		go rq.dispatch()
	} else {
		close(rq.exited)
	}
	c.be = rq
	r.mu.Lock()
	r.cqs[m.H] = rq
	r.mu.Unlock()
	return c, nil
}

func (rq *daemonCQ) notifyQueue(st Status) {
	rq.mu.Lock()
	rq.queue = append(rq.queue, st)
	rq.mu.Unlock()
	select {
	case rq.wake <- struct{}{}:
	default:
	}
}

// dispatch runs the callbacks, serialized per CQ as NDKPI requires.
func (rq *daemonCQ) dispatch() {
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

func (rq *daemonCQ) stop() {
	rq.once.Do(func() { close(rq.stopped) })
	<-rq.exited
}

func (rq *daemonCQ) depth() int { return rq.slots }

func (rq *daemonCQ) getResults(results []Result) int { return rq.get(results, nil) }

func (rq *daemonCQ) getResultsEx(results []ResultEx) int { return rq.get(nil, results) }

// get is GetResults and GetResultsEx of a daemon-backed CQ.
func (rq *daemonCQ) get(results []Result, ex []ResultEx) int {
	r := rq.link
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
			qctx = q.context
			rctx = q.take(e.Kind, e.Seq)
			if e.Kind == proto.KindSend {
				if tok := q.takeInvalidated(e.Seq); tok != 0 && e.Status == 0 {
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
			if e.Flags&proto.CompletionWithImmediate != 0 {
				ex[n].Flags, ex[n].Immediate = ResultWithImmediate, e.Immediate
			}
		} else {
			results[n] = res
		}
		n++
	}
	rq.ring.Release()
	return n
}

// arm sets the arm in the shared word for the daemon's relay to fire.
func (rq *daemonCQ) arm(n CQNotify) error {
	c := rq.c
	if rq.notify == nil || c.closed.Load() {
		if c.closed.Load() {
			return errorf(StatusInvalidHandle, "arm cq", "cq closed")
		}
		return errorf(StatusInvalidDeviceRequest, "arm cq", "cq was created without a notification callback")
	}
	if r := rq.link; r.goneFlag.Load() {
		return r.goneErr("arm cq")
	}
	lvl := uint32(1) // CQNotifyErrors
	switch n {
	case CQNotifySolicited:
		lvl = 2
	case CQNotifyAny:
		lvl = 3
	}
	for {
		w := rq.armWord.Load()
		if w >= lvl || rq.armWord.CompareAndSwap(w, lvl) {
			break
		}
	}
	// The arm is stored before the counts are read, and the relay stores
	// its count before it reads the arm: one of the two sees the other.
	// With nothing to fire on now, the relay fires when it next moves a
	// completion, and the engine sleeps on.
	if rq.status.Load() != 0 || rq.moved.Load() != rq.notified.Load() {
		rq.link.ring()
	}
	return nil
}

// close closes the daemon's CQ, which applies the same lifetime rules.
func (rq *daemonCQ) close() {
	r := rq.link
	rq.stop()
	r.mu.Lock()
	_, live := r.cqs[rq.h]
	delete(r.cqs, rq.h)
	r.mu.Unlock()
	if live {
		_, _ = tell(r, "close cq", &proto.CloseCQ{H: rq.h})
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
	rq.seg.Close()
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
func (rq *daemonCQ) nextRing() bool {
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

// resize is NdkResizeCq on a daemon-backed CQ: the daemon gives the CQ a
// new ring, and GetResults takes it once it has drained the old one.
func (rq *daemonCQ) resize(depth int) error {
	const op = "resize cq"
	if n := rq.ring.Len(); n > proto.Slots(depth) {
		return errorf(StatusInvalidParameter, op, "depth %d below the %d completions queued", depth, n)
	}
	m, fds, err := ask(rq.link, context.Background(), op, &proto.ResizeCQ{H: rq.h, Depth: depth})
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

// moderate: the daemon's relay raises a daemon-backed CQ's notifications.
func (rq *daemonCQ) moderate(interval time.Duration, count uint64) error {
	_, err := tell(rq.link, "control cq interrupt moderation", &proto.ModerateCQ{H: rq.h, Timeout: int64(interval), Depth: int(count)})
	return err
}
