package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// Limits on one client beyond the quotas (quota.go).
const (
	maxArenaSize = 1 << 32
	maxInflight  = 64 // control requests running at once
)

// session is one client process: its objects, its shared memory and the
// relay that moves its work and completions.
type session struct {
	srv  *Server
	conn *net.UnixConn
	cred *unix.Ucred
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	wmu sync.Mutex // serializes writes to conn

	mu      sync.Mutex
	next    uint32
	objs    map[uint32]any
	arenas  map[uint32]*shm.Segment
	cancels map[uint64]context.CancelFunc
	sem     chan struct{}
	reqs    sync.WaitGroup

	relay *relay

	// mcMu orders the session's joins and leaves; groups counts its
	// member QPs of each multicast group (quota resGroups: a group is
	// taken with its first member, given back after its last).
	mcMu   sync.Mutex
	groups map[netip.Addr]int

	held usage // what the quotas count of this session's (under srv.book.mu)

	start  time.Time
	client atomic.Bool // said hello: a client, not an operator (status counts it)
	ended  atomic.Bool // the daemon ended it (end): logged and counted once
}

func newSession(s *Server, c *net.UnixConn, cred *unix.Ucred) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		srv: s, conn: c, cred: cred, start: time.Now(),
		log:     s.log.With("pid", cred.Pid),
		ctx:     ctx,
		cancel:  cancel,
		objs:    make(map[uint32]any),
		arenas:  make(map[uint32]*shm.Segment),
		cancels: make(map[uint64]context.CancelFunc),
		sem:     make(chan struct{}, maxInflight),
	}
}

// kill ends the session from outside (daemon shutdown).
func (ss *session) kill() {
	ss.cancel()
	ss.conn.Close()
}

// serve reads requests until the client goes, then frees everything the
// client had.
func (ss *session) serve() {
	defer ss.teardown()
	defer ss.recovered("control")
	buf := make([]byte, proto.MaxMessage)
	for {
		n, fds, err := shm.RecvFDs(ss.conn, buf, shm.MaxFDs)
		if err != nil || n == 0 {
			closeFDs(fds)
			return
		}
		hdr, err := proto.DecodeHeader(buf[:n])
		if err != nil {
			closeFDs(fds)
			ss.end(reasonProtocol, fmt.Errorf("bad control message: %w", err))
			return
		}
		h, ok := handlers[hdr.Op]
		if !h.takesFDs {
			closeFDs(fds)
			fds = nil
		}
		switch {
		case !ok:
			ss.reply(hdr.ID, errNoSuchRequest(hdr.Op))
			continue
		case ss.relay == nil && !h.beforeHello:
			closeFDs(fds)
			ss.reply(hdr.ID, statusErr(ndk.StatusInvalidDeviceRequest, "hello first"))
			continue
		}
		w, err := h.decode(buf[:n])
		if err != nil {
			closeFDs(fds)
			ss.end(reasonProtocol, fmt.Errorf("bad control message: %w", err))
			return
		}
		if h.blocks {
			select {
			case ss.sem <- struct{}{}:
			case <-ss.ctx.Done():
				closeFDs(fds)
				return
			}
			ctx, cancel := ss.requestContext(hdr)
			ss.reqs.Add(1)
			go func() {
				defer ss.reqs.Done()
				defer func() { <-ss.sem }()
				defer ss.forget(hdr.ID, cancel)
				defer ss.recovered(hdr.Op)
				ss.run(hdr.ID, h, w, &call{ctx: ctx, in: fds})
			}()
			continue
		}
		ss.run(hdr.ID, h, w, &call{ctx: ss.ctx, in: fds})
	}
}

// run carries out one request and sends its answer: the reply, with the
// descriptors its handler handed out, or the error.
func (ss *session) run(id uint64, h handler, w work, c *call) {
	rep, err := w(ss, c)
	if h.silent {
		closeFDs(c.out)
		return
	}
	if err != nil {
		closeFDs(c.out)
		ss.reply(id, err)
		return
	}
	b, err := proto.EncodeReply(id, rep)
	if err != nil {
		closeFDs(c.out)
		ss.log.Error("encode reply", "op", h.op, "err", err)
		ss.reply(id, statusErr(ndk.StatusInternalError, "%s: encode reply: %v", h.op, err))
		return
	}
	ss.write(b, c.out...)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// requestContext is the context of a blocking request: the session's,
// ended at the request's Deadline or by its OpCancel.
func (ss *session) requestContext(hdr proto.Header) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ss.ctx)
	if hdr.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ss.ctx, time.Duration(hdr.Timeout))
	}
	ss.mu.Lock()
	ss.cancels[hdr.ID] = cancel
	ss.mu.Unlock()
	return ctx, cancel
}

func (ss *session) forget(id uint64, cancel context.CancelFunc) {
	cancel()
	ss.mu.Lock()
	delete(ss.cancels, id)
	ss.mu.Unlock()
}

// reply sends an answer with no payload.
func (ss *session) reply(id uint64, err error) {
	m := &proto.Message{}
	setErr(m, err)
	m.ID = id
	ss.send(m)
}

// send writes m, with the descriptors handed along in fds (closed here
// after sending: the client has its own copies).
func (ss *session) send(m *proto.Message, fds ...int) {
	if m == nil {
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		ss.log.Error("encode reply", "err", err)
		closeFDs(fds)
		return
	}
	ss.write(b, fds...)
}

// write sends message b with fds, which it closes after sending.
func (ss *session) write(b []byte, fds ...int) {
	ss.wmu.Lock()
	err := shm.SendFDs(ss.conn, b, fds...)
	ss.wmu.Unlock()
	closeFDs(fds)
	if err != nil && ss.ctx.Err() == nil {
		ss.log.Debug("send to client", "err", err)
	}
}

// whenClosed drops object h and tells the client with ev once done is
// closed (an NDK close that completes later: a PD's MRs, a connector's
// disconnect), unless the session ends first.
func (ss *session) whenClosed(done <-chan struct{}, h uint32, ev string, took ...resource) {
	go func() {
		select {
		case <-done:
			ss.drop(h, took...)
			ss.event(ev, h, ndk.StatusSuccess)
		case <-ss.ctx.Done():
		}
	}()
}

// event sends an event the client did not ask for.
func (ss *session) event(ev string, h uint32, status ndk.Status) {
	ss.send(&proto.Message{Ev: ev, H: h, Status: uint32(status)})
}

type statusError struct {
	st  ndk.Status
	msg string
}

func (e *statusError) Error() string { return e.msg }

func statusErr(st ndk.Status, format string, args ...any) error {
	return &statusError{st: st, msg: fmt.Sprintf(format, args...)}
}

// statusOf is the NTSTATUS of an error of the daemon's or of ndk's.
func statusOf(err error) ndk.Status {
	if se, ok := err.(*statusError); ok {
		return se.st
	}
	return ndk.StatusOf(err)
}

func setErr(m *proto.Message, err error) {
	if err == nil {
		return
	}
	if rej := (*ndk.RejectError)(nil); errors.As(err, &rej) {
		m.RejReason, m.RejData = uint16(rej.Reason), rej.PrivateData
	}
	var se *statusError
	if errors.As(err, &se) {
		m.Status, m.Msg = uint32(se.st), se.msg
		return
	}
	st := ndk.StatusOf(err)
	m.Status, m.Msg = uint32(st), err.Error()
	// An ndk error goes as its detail and cause: the client's error adds
	// the operation and the status, which would otherwise read twice
	// ("ndk: connect: (STATUS_...): ndk: connect: ... (STATUS_...").
	if ne, ok := err.(*ndk.Error); ok {
		m.Detail, m.Msg = ne.Detail, ""
		if ne.Err != nil {
			m.Msg = ne.Err.Error()
		}
	}
}

// add records obj under a new handle, charging the objects quota.
func (ss *session) add(obj any) (uint32, error) {
	if err := ss.take(resObjects); err != nil {
		return 0, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for {
		ss.next++
		if ss.next != 0 && ss.objs[ss.next] == nil {
			break
		}
	}
	ss.objs[ss.next] = obj
	return ss.next, nil
}

// lookup returns the client's object h of type T: a handle of another
// type, of another client or never given out is refused alike.
func lookup[T any](ss *session, h uint32) (T, error) {
	ss.mu.Lock()
	o, ok := ss.objs[h].(T)
	ss.mu.Unlock()
	if !ok {
		var zero T
		return zero, statusErr(ndk.StatusInvalidHandle, "no such object %d", h)
	}
	return o, nil
}

// drop forgets handle h and gives back what the quotas count of it:
// the handle, and what its object took (took, charged when it was made).
func (ss *session) drop(h uint32, took ...resource) {
	ss.mu.Lock()
	_, ok := ss.objs[h]
	delete(ss.objs, h)
	ss.mu.Unlock()
	if ok {
		ss.give(append(took, resObjects)...)
	}
}

// teardown frees what the client left, in the order NDKPI closes objects:
// connections (a DREQ to each peer), listeners, QPs (flushed), MRs, PDs,
// CQs, then the memory.
func (ss *session) teardown() {
	defer ss.srv.book.closeSession(ss.cred.Uid, &ss.held)
	defer ss.recovered("teardown")
	ss.cancel()
	ss.conn.Close()
	ss.reqs.Wait()
	if ss.relay != nil {
		ss.relay.stop()
	}
	ss.mu.Lock()
	objs := ss.objs
	ss.objs = make(map[uint32]any)
	arenas := ss.arenas
	ss.arenas = nil
	ss.mu.Unlock()
	each := func(f func(any)) {
		for _, o := range objs {
			f(o)
		}
	}
	var wg sync.WaitGroup
	each(func(o any) {
		if c, ok := o.(*sConnector); ok {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = c.c.Disconnect(ctx)
				cancel()
				c.c.Close()
			}()
		}
	})
	wg.Wait()
	each(func(o any) {
		switch x := o.(type) {
		case *sListener:
			x.l.Close()
		case *sEndpoint:
			x.se.Close()
		case *sUDService:
			x.s.Close()
		}
	})
	each(func(o any) {
		if q, ok := o.(*sQP); ok {
			_ = q.qp.Close()
		}
	})
	each(func(o any) {
		switch x := o.(type) {
		case *sSRQ:
			x.srq.Close()
		case *sMW:
			x.mw.Close()
		}
	})
	each(func(o any) {
		if m, ok := o.(*sMR); ok {
			_ = m.mr.Deregister()
		}
	})
	each(func(o any) {
		if p, ok := o.(*sPD); ok {
			p.pd.Close()
		}
	})
	each(func(o any) {
		if c, ok := o.(*sCQ); ok {
			c.cq.Close()
		}
	})
	// Only now, with every QP closed and every region deregistered, can
	// no engine touch the client's memory.
	each(func(o any) {
		if q, ok := o.(*sQP); ok {
			ss.relay.removeQP(q) // no late disconnect event publishes into it
			q.seg.Close()
		}
		if c, ok := o.(*sCQ); ok {
			c.closeSegments()
		}
		if x, ok := o.(*sSRQ); ok { // a second Close does nothing
			x.seg.Close()
		}
	})
	for _, a := range arenas {
		a.Close()
	}
	if ss.relay != nil {
		ss.relay.close()
	}
}
