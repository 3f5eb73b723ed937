package verbstest

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Options tune a pair.
type Options struct {
	// QueueDepth bounds posted-but-uncompleted sends and receives per side;
	// 0 means 1024.
	QueueDepth int
	// LoseAck, if set, sees the payload of every SEND as it is delivered.
	// Where it returns true the receiver gets the message but the
	// sender's ACK is lost and every retransmission finds the peer gone:
	// the SEND stays unacknowledged until a close flushes it (see
	// KeepOnPeerClose). Meanwhile the sender's receive completions are
	// held (verbs.Endpoint.Poll). It may be called from several
	// goroutines.
	LoseAck func(payload []byte) bool
	// KeepOnPeerClose makes a close flush only the closing side's
	// requests: the peer's stay outstanding and its Poll reports
	// ErrDisconnected once its completions are drained, as with ndk
	// (NDKPI's provider does not flush on the peer's disconnect) and
	// Linux's rdma_cm. By default a close flushes both sides' requests,
	// as a transport that moves the QP to error at the peer's disconnect.
	KeepOnPeerClose bool
}

type region struct {
	r      verbs.Region
	access verbs.Access
}

type pending struct {
	id       uint64
	data     []byte
	signaled bool
	// dst is where a WRITE with immediate puts data once a receive of the
	// peer takes it (imm marks one even when dst is empty).
	dst []byte
	imm bool
}

// Endpoint is one side of a pair.
type Endpoint struct {
	mu      *sync.Mutex // shared by both sides
	changed *change     // shared by both sides
	seen    uint64      // changed.gen as e's last call left it
	peer    *Endpoint
	depth   int
	loseAck func([]byte) bool
	keep    bool              // Options.KeepOnPeerClose
	regions map[uint32]region // by rkey and by lkey
	nextKey uint32
	nextVA  uint64
	recvs   []recvWR
	sends   []pending          // SENDs waiting for a receive at the peer
	unacked []pending          // SENDs delivered whose ACK was lost
	cq      []verbs.Completion // initiator completions
	rcq     []verbs.Completion // receive completions
	failed  bool               // a completion carried an error
	closed  bool
	// unordered: Poll holds no receive completion (ConnParams.Unordered).
	unordered bool

	// Counters for tests.
	Posted struct{ Send, Receive, Read, Write, Atomic int }
}

type recvWR struct {
	id  uint64
	seg verbs.Segment
}

// Pair returns two connected endpoints.
func Pair(o Options) (*Endpoint, *Endpoint) {
	return pairOn(o, new(sync.Mutex), &change{ch: make(chan struct{})})
}

// pairOn is Pair under a lock and change count shared with other pairs
// (a Network's): Wait on any of them wakes on a call on any.
func pairOn(o Options, mu *sync.Mutex, changed *change) (*Endpoint, *Endpoint) {
	if o.QueueDepth <= 0 {
		o.QueueDepth = 1024
	}
	a := &Endpoint{mu: mu, changed: changed, depth: o.QueueDepth, loseAck: o.LoseAck, keep: o.KeepOnPeerClose, regions: map[uint32]region{}, nextKey: 0x100, nextVA: 0x7f0000000000}
	b := &Endpoint{mu: mu, changed: changed, depth: o.QueueDepth, loseAck: o.LoseAck, keep: o.KeepOnPeerClose, regions: map[uint32]region{}, nextKey: 0x900, nextVA: 0x7e0000000000}
	a.peer, b.peer = b, a
	return a, b
}

// change is what Wait blocks on: every call under the pair's lock counts
// one (any call may change what Poll or Peek sees; Wait may return
// early), and closes ch for a waiter.
type change struct {
	gen     uint64
	ch      chan struct{}
	waiting bool // ch was handed to a Wait: close and replace it
}

// unlock counts a change, wakes a waiter and unlocks. It allocates only
// when a Wait blocks.
func (e *Endpoint) unlock() {
	c := e.changed
	c.gen++
	if c.waiting {
		close(c.ch)
		c.ch, c.waiting = make(chan struct{}), false
	}
	e.seen = c.gen
	e.mu.Unlock()
}

// Wait implements verbs.Endpoint: it returns once a call on either side
// of the pair has followed e's last call, or when ctx ends.
func (e *Endpoint) Wait(ctx context.Context) error {
	e.mu.Lock()
	if e.changed.gen != e.seen {
		e.mu.Unlock()
		return nil
	}
	return e.park(ctx)
}

// park arms the Network's change channel, unlocks e.mu (held by the
// caller) and waits for the next change or ctx's end.
func (e *Endpoint) park(ctx context.Context) error {
	c := e.changed
	c.waiting = true
	ch := c.ch
	e.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitAny implements verbs.AnyWaiter for endpoints of one Network (or
// one pair): it returns at once if any of eps has a completion its Poll
// would return or its peer closed, else once a call on any endpoint of
// the Network follows, or ctx ends.
func (e *Endpoint) WaitAny(ctx context.Context, eps []verbs.Endpoint) error {
	e.mu.Lock()
	for _, v := range eps {
		x, ok := v.(*Endpoint)
		if !ok || x.mu != e.mu {
			e.mu.Unlock()
			return fmt.Errorf("verbstest: WaitAny over %T of another network: %w", v, verbs.ErrInvalid)
		}
		if x.ready() {
			e.mu.Unlock()
			return nil
		}
	}
	return e.park(ctx)
}

// ready says whether Poll would return something now; e.mu is held.
func (e *Endpoint) ready() bool {
	if len(e.cq) > 0 || e.peer.closed || e.closed {
		return true
	}
	return len(e.rcq) > 0 && (!e.sendOutstanding() || e.unordered || e.failed)
}

// Regions returns the regions registered on e, in registration order.
func (e *Endpoint) Regions() []verbs.Region {
	e.mu.Lock()
	defer e.unlock()
	var rs []verbs.Region
	for k, r := range e.regions {
		if k == r.r.LKey {
			rs = append(rs, r.r)
		}
	}
	slices.SortFunc(rs, func(a, b verbs.Region) int { return cmp.Compare(a.LKey, b.LKey) })
	return rs
}

// Alloc implements verbs.Endpoint: Go memory, which Register takes like
// any other.
func (e *Endpoint) Alloc(n int) ([]byte, error) {
	if n < 1 {
		return nil, fmt.Errorf("alloc %d bytes: %w", n, verbs.ErrInvalid)
	}
	return make([]byte, n), nil
}

// Register implements verbs.Endpoint. Addresses are fake but distinct, so a
// peer that used its own pointer instead of the advertised address fails.
func (e *Endpoint) Register(buf []byte, access verbs.Access) (verbs.Region, error) {
	if len(buf) == 0 {
		return verbs.Region{}, fmt.Errorf("register: empty buffer: %w", verbs.ErrInvalid)
	}
	e.mu.Lock()
	defer e.unlock()
	r := verbs.Region{Buf: buf, Addr: e.nextVA, LKey: e.nextKey, RKey: e.nextKey + 1}
	e.nextKey += 2
	e.nextVA += uint64(len(buf)+4095) &^ 4095
	e.regions[r.LKey] = region{r, access}
	e.regions[r.RKey] = region{r, access}
	return r, nil
}

func (e *Endpoint) checkLocal(s verbs.Segment) error {
	reg, ok := e.regions[s.Region.LKey]
	if !ok || reg.r.LKey != s.Region.LKey {
		return fmt.Errorf("local key %#x not registered here: %w", s.Region.LKey, verbs.ErrInvalid)
	}
	if s.Off < 0 || s.Len < 0 || s.Off+s.Len > len(reg.r.Buf) {
		return fmt.Errorf("local segment [%d,%d) outside its region: %w", s.Off, s.Off+s.Len, verbs.ErrInvalid)
	}
	return nil
}

// remote finds [addr, addr+n) in a region of e registered under rkey with want.
func (e *Endpoint) remote(addr uint64, rkey uint32, n int, want verbs.Access) ([]byte, error) {
	reg, ok := e.regions[rkey]
	if !ok || reg.r.RKey != rkey {
		return nil, fmt.Errorf("rkey %#x unknown: %w", rkey, verbs.ErrAccess)
	}
	if reg.access&want != want {
		return nil, fmt.Errorf("rkey %#x lacks access %#x: %w", rkey, want, verbs.ErrAccess)
	}
	if addr < reg.r.Addr || addr+uint64(n) > reg.r.Addr+uint64(len(reg.r.Buf)) {
		return nil, fmt.Errorf("[%#x, %#x) outside rkey %#x: %w", addr, addr+uint64(n), rkey, verbs.ErrAccess)
	}
	off := addr - reg.r.Addr
	return reg.r.Buf[off : off+uint64(n)], nil
}

func (e *Endpoint) complete(c verbs.Completion) {
	if c.Err != nil {
		e.failed = true
	}
	if c.Op == verbs.OpReceive || c.Op == verbs.OpRecvRDMAWithImm {
		e.rcq = append(e.rcq, c)
		return
	}
	e.cq = append(e.cq, c)
}

func (e *Endpoint) usable() error {
	if e.closed {
		return fmt.Errorf("endpoint closed: %w", verbs.ErrInvalid)
	}
	if e.peer.closed {
		return fmt.Errorf("post: %w", verbs.ErrDisconnected)
	}
	return nil
}

// Send implements verbs.Endpoint.
func (e *Endpoint) Send(id uint64, local verbs.Segment, signaled bool) error {
	e.mu.Lock()
	defer e.unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if err := e.checkLocal(local); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if len(e.sends) >= e.depth {
		return fmt.Errorf("send: %w", verbs.ErrQueueFull)
	}
	e.Posted.Send++
	// The payload is taken now, as the HCA would by DMA at post time.
	e.sends = append(e.sends, pending{id: id, data: append([]byte(nil), local.Bytes()...), signaled: signaled})
	e.deliver()
	return nil
}

// deliver matches queued SENDs with the peer's receives, in order.
func (e *Endpoint) deliver() {
	p := e.peer
	for len(e.sends) > 0 && len(p.recvs) > 0 {
		s, r := e.sends[0], p.recvs[0]
		e.sends, p.recvs = e.sends[1:], p.recvs[1:]
		if s.imm {
			// A WRITE with immediate: the bytes go where it names, the
			// receive only reports them.
			copy(s.dst, s.data)
			p.complete(verbs.Completion{ID: r.id, Op: verbs.OpRecvRDMAWithImm, Bytes: len(s.data)})
			if s.signaled {
				e.complete(verbs.Completion{ID: s.id, Op: verbs.OpWrite, Bytes: len(s.data)})
			}
			continue
		}
		if len(s.data) > r.seg.Len {
			p.complete(verbs.Completion{ID: r.id, Op: verbs.OpReceive, Err: verbs.ErrTooLong})
			e.complete(verbs.Completion{ID: s.id, Op: verbs.OpSend, Err: verbs.ErrTooLong})
			continue
		}
		copy(r.seg.Bytes(), s.data)
		p.complete(verbs.Completion{ID: r.id, Op: verbs.OpReceive, Bytes: len(s.data)})
		switch {
		case e.loseAck != nil && e.loseAck(s.data):
			e.unacked = append(e.unacked, s)
		case s.signaled:
			e.complete(verbs.Completion{ID: s.id, Op: verbs.OpSend, Bytes: len(s.data)})
		}
	}
}

// Receive implements verbs.Endpoint.
func (e *Endpoint) Receive(id uint64, local verbs.Segment) error {
	e.mu.Lock()
	defer e.unlock()
	if e.closed {
		return fmt.Errorf("receive: endpoint closed: %w", verbs.ErrInvalid)
	}
	if err := e.checkLocal(local); err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if len(e.recvs) >= e.depth {
		return fmt.Errorf("receive: %w", verbs.ErrQueueFull)
	}
	e.Posted.Receive++
	e.recvs = append(e.recvs, recvWR{id, local})
	e.peer.deliver()
	return nil
}

// Read implements verbs.Endpoint.
func (e *Endpoint) Read(id uint64, local verbs.Segment, addr uint64, rkey uint32, signaled bool) error {
	e.mu.Lock()
	defer e.unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if err := e.checkLocal(local); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	e.Posted.Read++
	src, err := e.peer.remote(addr, rkey, local.Len, verbs.AccessRemoteRead)
	if err != nil {
		e.complete(verbs.Completion{ID: id, Op: verbs.OpRead, Err: err})
		return nil
	}
	copy(local.Bytes(), src)
	if signaled {
		e.complete(verbs.Completion{ID: id, Op: verbs.OpRead, Bytes: local.Len})
	}
	return nil
}

// Write implements verbs.Endpoint.
func (e *Endpoint) Write(id uint64, local verbs.Segment, addr uint64, rkey uint32, signaled bool) error {
	e.mu.Lock()
	defer e.unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if err := e.checkLocal(local); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	e.Posted.Write++
	dst, err := e.peer.remote(addr, rkey, local.Len, verbs.AccessRemoteWrite)
	if err != nil {
		e.complete(verbs.Completion{ID: id, Op: verbs.OpWrite, Err: err})
		return nil
	}
	copy(dst, local.Bytes())
	if signaled {
		e.complete(verbs.Completion{ID: id, Op: verbs.OpWrite, Bytes: local.Len})
	}
	return nil
}

// WriteImm implements verbs.Immediate: a WRITE that waits, as a SEND
// does, for a receive of the peer to take it, then places its bytes and
// completes that receive with OpRecvRDMAWithImm.
func (e *Endpoint) WriteImm(id uint64, local verbs.Segment, addr uint64, rkey uint32, imm uint32, signaled bool) error {
	e.mu.Lock()
	defer e.unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if err := e.checkLocal(local); err != nil {
		return fmt.Errorf("write with immediate: %w", err)
	}
	if len(e.sends) >= e.depth {
		return fmt.Errorf("write with immediate: %w", verbs.ErrQueueFull)
	}
	e.Posted.Write++
	dst, err := e.peer.remote(addr, rkey, local.Len, verbs.AccessRemoteWrite)
	if err != nil {
		e.complete(verbs.Completion{ID: id, Op: verbs.OpWrite, Err: err})
		return nil
	}
	e.sends = append(e.sends, pending{id: id, data: append([]byte(nil), local.Bytes()...), signaled: signaled, dst: dst, imm: true})
	e.deliver()
	return nil
}

func (e *Endpoint) atomic(op verbs.Op, id uint64, local verbs.Segment, addr uint64, rkey uint32, signaled bool, f func(old uint64) uint64) error {
	e.mu.Lock()
	defer e.unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if err := e.checkLocal(local); err != nil {
		return fmt.Errorf("%v: %w", op, err)
	}
	if local.Len != 8 || addr%8 != 0 {
		return fmt.Errorf("%v: needs an 8-byte local segment and an 8-byte aligned address: %w", op, verbs.ErrInvalid)
	}
	e.Posted.Atomic++
	dst, err := e.peer.remote(addr, rkey, 8, verbs.AccessRemoteAtomic)
	if err != nil {
		e.complete(verbs.Completion{ID: id, Op: op, Err: err})
		return nil
	}
	// Host byte order, as verbs atomics operate on the responder's memory.
	old := binary.LittleEndian.Uint64(dst)
	binary.LittleEndian.PutUint64(dst, f(old))
	binary.LittleEndian.PutUint64(local.Bytes(), old)
	if signaled {
		e.complete(verbs.Completion{ID: id, Op: op, Bytes: 8})
	}
	return nil
}

// FetchAdd implements verbs.Atomics.
func (e *Endpoint) FetchAdd(id uint64, local verbs.Segment, addr uint64, rkey uint32, add uint64, signaled bool) error {
	return e.atomic(verbs.OpFetchAdd, id, local, addr, rkey, signaled, func(old uint64) uint64 { return old + add })
}

// CompareSwap implements verbs.Atomics.
func (e *Endpoint) CompareSwap(id uint64, local verbs.Segment, addr uint64, rkey uint32, compare, swap uint64, signaled bool) error {
	return e.atomic(verbs.OpCompareSwap, id, local, addr, rkey, signaled, func(old uint64) uint64 {
		if old == compare {
			return swap
		}
		return old
	})
}

func (e *Endpoint) setUnordered(u bool) {
	e.mu.Lock()
	e.unordered = u
	e.mu.Unlock()
}

// Poll implements verbs.Endpoint: initiator completions first, then
// receive completions unless a signaled SEND is unacknowledged (waiting
// for a receive, or its ACK lost) on a connection that has not failed and
// was not opened Unordered.
func (e *Endpoint) Poll(out []verbs.Completion) (int, error) {
	e.mu.Lock()
	defer e.unlock()
	n := take(&e.cq, out)
	if !e.sendOutstanding() || e.unordered || e.failed || e.closed || e.peer.closed {
		n += take(&e.rcq, out[n:])
	}
	if n == 0 && e.peer.closed {
		return 0, verbs.ErrDisconnected
	}
	return n, nil
}

func (e *Endpoint) sendOutstanding() bool {
	for _, q := range [][]pending{e.unacked, e.sends} {
		for _, s := range q {
			if s.signaled {
				return true
			}
		}
	}
	return false
}

// take moves the head of *q into out without allocating.
func take(q *[]verbs.Completion, out []verbs.Completion) int {
	n := copy(out, *q)
	*q = (*q)[:copy(*q, (*q)[n:])]
	return n
}

// Peek implements verbs.Endpoint.
func (e *Endpoint) Peek(r verbs.Region, off int) byte {
	e.mu.Lock()
	defer e.unlock()
	return r.Buf[off]
}

// Close implements verbs.Endpoint: the SENDs and receives still
// outstanding flush (on both sides, unless Options.KeepOnPeerClose), and
// the peer's Poll reports ErrDisconnected once drained.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	defer e.unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	sides := []*Endpoint{e, e.peer}
	if e.keep {
		sides = sides[:1]
	}
	for _, p := range sides {
		for _, s := range slices.Concat(p.unacked, p.sends) {
			p.complete(verbs.Completion{ID: s.id, Op: verbs.OpSend, Err: verbs.ErrFlushed})
		}
		for _, r := range p.recvs {
			p.complete(verbs.Completion{ID: r.id, Op: verbs.OpReceive, Err: verbs.ErrFlushed})
		}
		p.unacked, p.sends, p.recvs = nil, nil, nil
	}
	return nil
}

// Network joins Connectors and Listeners by port, in memory.
type Network struct {
	mu        sync.Mutex
	listeners map[uint16]*Listener
	// RejectFirst makes the first n Connect calls fail with REJ reason 8
	// even when a listener exists, to model a peer that listens late.
	RejectFirst int
	// Connects counts Connect calls.
	Connects int
	Options  Options

	// Every pair a Network makes shares one lock and change count, so
	// that WaitAny spans them.
	pairMu  sync.Mutex
	changed *change
}

// Listener is a Network port.
type Listener struct {
	n     *Network
	port  uint16
	queue chan *Endpoint
}

// Listen binds port.
func (n *Network) Listen(port uint16) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listeners == nil {
		n.listeners = map[uint16]*Listener{}
	}
	if _, ok := n.listeners[port]; ok {
		return nil, fmt.Errorf("listen on port %d: already bound: %w", port, verbs.ErrInvalid)
	}
	l := &Listener{n: n, port: port, queue: make(chan *Endpoint, 8)}
	n.listeners[port] = l
	return l, nil
}

// Accept implements verbs.Listener.
func (l *Listener) Accept(ctx context.Context, p verbs.ConnParams) (verbs.Endpoint, error) {
	select {
	case ep := <-l.queue:
		ep.setUnordered(p.Unordered)
		if p.Prepare != nil {
			if err := p.Prepare(ep); err != nil {
				return nil, fmt.Errorf("accept: prepare: %w", err)
			}
		}
		return ep, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("accept on port %d: %w", l.port, ctx.Err())
	}
}

// Close implements verbs.Listener.
func (l *Listener) Close() error {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	if l.n.listeners[l.port] == l {
		delete(l.n.listeners, l.port)
	}
	return nil
}

// Connect implements verbs.Connector.
func (n *Network) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.Connects++
	l := n.listeners[port]
	reject := n.RejectFirst > 0
	if reject {
		n.RejectFirst--
	}
	if n.changed == nil {
		n.changed = &change{ch: make(chan struct{})}
	}
	changed := n.changed
	n.mu.Unlock()
	if l == nil || reject {
		return nil, &verbs.RejectError{Reason: verbs.RejectInvalidServiceID}
	}
	a, b := pairOn(n.Options, &n.pairMu, changed)
	a.setUnordered(p.Unordered)
	if p.Prepare != nil {
		if err := p.Prepare(a); err != nil {
			return nil, fmt.Errorf("connect: prepare: %w", err)
		}
	}
	select {
	case l.queue <- b:
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
