package ndkverbs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// Device makes endpoints on one adapter, in one protection domain.
type Device struct {
	Adapter *ndk.Adapter
	PD      *ndk.PD
	owned   bool // Close closes Adapter (Open made it)
}

// Open opens an adapter on ifname (ndk.Open: it must run in the
// interface's network namespace) and a Device on it; Close closes both.
func Open(ifname string, opts ndk.Options) (*Device, error) {
	a, err := ndk.Open(ifname, opts)
	if err != nil {
		return nil, fmt.Errorf("ndkverbs: open %s: %w", ifname, err)
	}
	d, err := New(a)
	if err != nil {
		a.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// Dial connects to the ndkxdp daemon serving at socket (ndk.Dial: a path
// or "unix://PATH") and makes a Device on the adapter it gives; Close
// closes both. The daemon owns the interface: the endpoints post into
// rings shared with it, and their memory comes from Endpoint.Alloc.
func Dial(ctx context.Context, socket string) (*Device, error) {
	a, err := ndk.Dial(ctx, socket)
	if errors.Is(err, ndk.ErrNDISAdapterNotReady) {
		return nil, fmt.Errorf("ndkverbs: no daemon answers at %s (is `ndkxdp daemon` running, and may this user connect?): %w", socket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ndkverbs: dial the daemon at %s: %w", socket, err)
	}
	d, err := New(a)
	if err != nil {
		a.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// New creates a protection domain on a for the endpoints it will make.
func New(a *ndk.Adapter) (*Device, error) {
	pd, err := a.CreatePD()
	if err != nil {
		return nil, fmt.Errorf("ndkverbs: create pd: %w", err)
	}
	return &Device{Adapter: a, PD: pd}, nil
}

// Close closes the protection domain (after the endpoints are closed),
// and the adapter when Open opened it.
func (d *Device) Close() {
	d.PD.Close()
	if d.owned {
		d.Adapter.Close()
	}
}

// Depths size an endpoint's queues; zero fields take the defaults.
type Depths struct {
	Send, Receive int // default 1024 each
}

// Endpoint is one ndk QP with its CQ, as verbs.Endpoint and verbs.Atomics.
type Endpoint struct {
	dev *Device
	qp  *ndk.QP
	scq *ndk.CQ // initiator completions
	rcq *ndk.CQ // receive completions

	// sendsOut counts signaled SENDs not yet completed; while there are
	// any, Poll holds receive completions back (see Poll).
	sendsOut int
	failed   bool // a completion failed: the QP is in error, nothing is held
	// unordered holds nothing (verbs.ConnParams.Unordered).
	unordered bool

	mu  sync.Mutex // guards mrs and closed against Close from another goroutine
	mrs []*ndk.MR

	// Poster and poller scratch: the contract has one goroutine calling.
	sgl     [1]ndk.SGE
	results [64]ndk.ResultEx

	gone atomic.Bool // the peer disconnected
	// goneAt is when Poll first found the peer gone and no completion.
	goneAt time.Time
	// wake gets a token from the CQs' notifications, the QP's peer-write
	// arm and the peer's disconnect; Wait blocks on it.
	wake chan struct{}
	// wakeTo is where those tokens go: wake, or the wake of the endpoint
	// whose WaitAny last armed this one.
	wakeTo *atomic.Pointer[chan struct{}]
	// peeked is PeerWrites as the last Peek loaded it: Wait does not
	// block if a WRITE was placed since.
	peeked     uint64
	disconnect func() error
	// peerData is the user private data of the peer's REQ or REP
	// (verbs.PeerData), peer the peer's address and port.
	peerData []byte
	peer     netip.AddrPort
	closed   bool
	// ud is where a UD endpoint's sends go (ud.go); nil on RC endpoints
	// and on a UD server's, which only receive.
	ud *ndk.UDDestination
	// udQKey is a UD endpoint's Q_Key (0 on RC endpoints).
	udQKey uint32
}

var (
	_ verbs.Endpoint  = (*Endpoint)(nil)
	_ verbs.Atomics   = (*Endpoint)(nil)
	_ verbs.PeerData  = (*Endpoint)(nil)
	_ verbs.Immediate = (*Endpoint)(nil)
)

// Endpoint creates a QP and its CQ, unconnected: receives may be posted,
// and the caller connects QP() and then calls Connected.
func (d *Device) Endpoint(q Depths) (*Endpoint, error) { return d.endpoint(q, nil, false) }

// EndpointOn is Endpoint with a QP on srq (NdkCreateQpWithSrq): it has
// no receive queue of its own, and the SEND it receives complete on its
// receive CQ with the ID of the SRQ's receive each took.
func (d *Device) EndpointOn(q Depths, srq *SRQ) (*Endpoint, error) {
	if srq == nil || srq.dev != d {
		return nil, fmt.Errorf("ndkverbs: endpoint on an SRQ of another device: %w", verbs.ErrInvalid)
	}
	return d.endpoint(q, srq, false)
}

// endpoint makes an endpoint on srq (nil: its own receive queue), of a UC
// QP if uc.
func (d *Device) endpoint(q Depths, srq *SRQ, uc bool) (*Endpoint, error) {
	return d.newEndpoint(q, "create qp", func(cfg ndk.QPConfig) (*ndk.QP, error) {
		if srq != nil {
			cfg.SRQ, cfg.ReceiveQueueDepth, cfg.MaxReceiveRequestSGE = srq.srq, 0, 0
		}
		cfg.UC = uc
		return d.PD.CreateQP(cfg)
	})
}

// newEndpoint makes an endpoint's two CQs (depths 1024 where q says 0),
// then its QP with create, given the CQs and depths.
func (d *Device) newEndpoint(q Depths, op string, create func(ndk.QPConfig) (*ndk.QP, error)) (*Endpoint, error) {
	if q.Send == 0 {
		q.Send = 1024
	}
	if q.Receive == 0 {
		q.Receive = 1024
	}
	wake := make(chan struct{}, 1)
	wakeTo := new(atomic.Pointer[chan struct{}])
	wakeTo.Store(&wake)
	notify := func(ndk.Status) { signal(*wakeTo.Load()) }
	scq, err := d.Adapter.CreateCQ(q.Send, notify)
	if err != nil {
		return nil, fmt.Errorf("ndkverbs: create initiator cq: %w", err)
	}
	rcq, err := d.Adapter.CreateCQ(q.Receive, notify)
	if err != nil {
		scq.Close()
		return nil, fmt.Errorf("ndkverbs: create receive cq: %w", err)
	}
	qp, err := create(ndk.QPConfig{ReceiveCQ: rcq, InitiatorCQ: scq,
		ReceiveQueueDepth: q.Receive, InitiatorQueueDepth: q.Send,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		scq.Close()
		rcq.Close()
		return nil, fmt.Errorf("ndkverbs: %s: %w", op, err)
	}
	return &Endpoint{dev: d, qp: qp, scq: scq, rcq: rcq, wake: wake, wakeTo: wakeTo}, nil
}

// signal puts a token on ch unless one is there.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// QP returns the endpoint's QP, to connect it.
func (e *Endpoint) QP() *ndk.QP { return e.qp }

// PeerPrivateData implements verbs.PeerData.
func (e *Endpoint) PeerPrivateData() []byte { return e.peerData }

// PeerAddress is the connected peer's address and rdma_cm port.
func (e *Endpoint) PeerAddress() netip.AddrPort { return e.peer }

// Connected records how Close disconnects (nil: nothing to tell the peer).
func (e *Endpoint) Connected(disconnect func() error) { e.disconnect = disconnect }

// PeerDisconnected tells the endpoint the peer has gone (its DREQ
// arrived): Poll returns verbs.ErrDisconnected once the CQ is empty. Safe
// from any goroutine.
func (e *Endpoint) PeerDisconnected() {
	e.gone.Store(true)
	signal(*e.wakeTo.Load())
}

// Alloc implements verbs.Endpoint: ndk.Adapter.Memory, Go memory on an
// adapter from Open, memory shared with the daemon on one from Dial.
func (e *Endpoint) Alloc(n int) ([]byte, error) {
	buf, err := e.dev.Adapter.Memory(n)
	if err != nil {
		return nil, fmt.Errorf("alloc %d bytes: %w: %w", n, verbs.ErrInvalid, err)
	}
	return buf, nil
}

// Register implements verbs.Endpoint.
func (e *Endpoint) Register(buf []byte, access verbs.Access) (verbs.Region, error) {
	flags := ndk.MRFlag(access &^ verbs.AccessRemoteAtomic)
	if access&verbs.AccessRemoteAtomic != 0 {
		flags |= ndk.MRFlagAllowRemoteAtomic
	}
	mr, err := e.dev.PD.RegisterMR(buf, flags)
	if err != nil {
		return verbs.Region{}, fmt.Errorf("register %d bytes (%v): %w: %w", len(buf), flags, verbs.ErrInvalid, err)
	}
	e.mu.Lock()
	e.mrs = append(e.mrs, mr)
	e.mu.Unlock()
	return verbs.Region{Buf: buf, Addr: mr.Addr(), LKey: mr.LocalToken(), RKey: mr.RemoteToken()}, nil
}

func (e *Endpoint) sge(s verbs.Segment) []ndk.SGE {
	e.sgl[0] = ndk.SGE{Addr: s.Region.Addr + uint64(s.Off), Length: uint32(s.Len), Token: s.Region.LKey}
	return e.sgl[:]
}

func silent(signaled bool) ndk.OpFlag {
	if signaled {
		return 0
	}
	return ndk.OpFlagSilentSuccess
}

// postErr maps an ndk post failure onto the verbs sentinels. Only failures
// reach it, so it may allocate.
func postErr(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, ndk.ErrInsufficientResources):
		return fmt.Errorf("%s: %w: %w", op, verbs.ErrQueueFull, err)
	case errors.Is(err, ndk.ErrConnectionInvalid):
		return fmt.Errorf("%s: %w: %w", op, verbs.ErrDisconnected, err)
	}
	return fmt.Errorf("%s: %w: %w", op, verbs.ErrInvalid, err)
}

// Send implements verbs.Endpoint.
func (e *Endpoint) Send(id uint64, local verbs.Segment, signaled bool) error {
	var err error
	switch {
	case e.ud != nil:
		err = e.qp.SendTo(id, e.sge(local), *e.ud, silent(signaled))
	case e.qp.UDQKey() != 0:
		err = fmt.Errorf("a UD server endpoint has no destination: %w", verbs.ErrInvalid)
	default:
		err = e.qp.Send(id, e.sge(local), silent(signaled))
	}
	if err != nil {
		return postErr("send", err)
	}
	if signaled {
		e.sendsOut++
	}
	return nil
}

// Receive implements verbs.Endpoint. An empty segment posts a receive
// with no SGE, which only an RDMA WRITE with immediate or an empty SEND
// can complete.
func (e *Endpoint) Receive(id uint64, local verbs.Segment) error {
	return postErr("receive", e.qp.Receive(id, e.sgeOrNone(local)))
}

// sgeOrNone is sge, or no SGE for an empty segment: a zero-length request
// names no memory (a zero-length WRITE checks no key, IBTA 9.4.3).
func (e *Endpoint) sgeOrNone(s verbs.Segment) []ndk.SGE {
	if s.Len == 0 {
		return nil
	}
	return e.sge(s)
}

// Read implements verbs.Endpoint.
func (e *Endpoint) Read(id uint64, local verbs.Segment, remoteAddr uint64, rkey uint32, signaled bool) error {
	return postErr("read", e.qp.Read(id, e.sge(local), remoteAddr, rkey, silent(signaled)))
}

// Write implements verbs.Endpoint.
func (e *Endpoint) Write(id uint64, local verbs.Segment, remoteAddr uint64, rkey uint32, signaled bool) error {
	return postErr("write", e.qp.Write(id, e.sgeOrNone(local), remoteAddr, rkey, silent(signaled)))
}

// WriteImm implements verbs.Immediate (ndk.QP.WriteWithImmediate).
func (e *Endpoint) WriteImm(id uint64, local verbs.Segment, remoteAddr uint64, rkey uint32, imm uint32, signaled bool) error {
	return postErr("write with immediate", e.qp.WriteWithImmediate(id, e.sgeOrNone(local), remoteAddr, rkey, silent(signaled), imm))
}

// FetchAdd implements verbs.Atomics.
func (e *Endpoint) FetchAdd(id uint64, local verbs.Segment, remoteAddr uint64, rkey uint32, add uint64, signaled bool) error {
	return postErr("fetch and add", e.qp.FetchAndAdd(id, e.sge(local)[0], remoteAddr, rkey, add, silent(signaled)))
}

// CompareSwap implements verbs.Atomics.
func (e *Endpoint) CompareSwap(id uint64, local verbs.Segment, remoteAddr uint64, rkey uint32, compare, swap uint64, signaled bool) error {
	return postErr("compare and swap", e.qp.CompareAndSwap(id, e.sge(local)[0], remoteAddr, rkey, compare, swap, silent(signaled)))
}

func opOf(t ndk.OperationType) verbs.Op {
	switch t {
	case ndk.OpSend:
		return verbs.OpSend
	case ndk.OpReceive, ndk.OpReceiveAndInvalidate:
		return verbs.OpReceive
	case ndk.OpReceiveWriteWithImmediate:
		return verbs.OpRecvRDMAWithImm
	case ndk.OpRead:
		return verbs.OpRead
	case ndk.OpWrite:
		return verbs.OpWrite
	case ndk.OpFetchAndAdd:
		return verbs.OpFetchAdd
	case ndk.OpCompareAndSwap:
		return verbs.OpCompareSwap
	}
	return 0
}

// ib_wc_status values ndk gives as ProviderErrorCode (ndk doc: completion
// statuses): IB_WC_REM_ACCESS_ERR, a request the peer refused, and
// IB_WC_RETRY_EXC_ERR, one it never acknowledged.
const (
	ibWCRemAccessErr = 10
	ibWCRetryExcErr  = 12
)

// completionErr maps a failed completion; only failures reach it.
func completionErr(r *ndk.ResultEx) error {
	switch {
	case r.Status == ndk.StatusCancelled:
		return verbs.ErrFlushed
	case r.ProviderErrorCode == ibWCRemAccessErr:
		return fmt.Errorf("%v (ib_wc_status %d): %w", r.Status, r.ProviderErrorCode, verbs.ErrAccess)
	case r.ProviderErrorCode == ibWCRetryExcErr:
		return fmt.Errorf("%v (ib_wc_status %d): %w", r.Status, r.ProviderErrorCode, verbs.ErrRetryExceeded)
	case r.Status == ndk.StatusBufferOverflow:
		return fmt.Errorf("%v: %w", r.Status, verbs.ErrTooLong)
	}
	return fmt.Errorf("completion status %v (ib_wc_status %d)", r.Status, r.ProviderErrorCode)
}

// Poll implements verbs.Endpoint. Initiator completions come first; a
// receive completion is held back while a signaled SEND of ours is still
// unacknowledged. The peer's answer to a SEND can overtake the ACK of that
// SEND (our engine or the peer's holds ACKs briefly to ride with data, and
// a lost ACK is only repaired by a retransmission), and perftest and rping
// wait for their SEND's completion before they look for the answer, as
// perftest's separate send and receive CQs let them. Holding the answer
// keeps that order on one Poll; after a failure or the peer's disconnect,
// and on an endpoint opened Unordered, nothing is held.
func (e *Endpoint) Poll(out []verbs.Completion) (int, error) {
	// The disconnect is read before the CQs: a completion the engine
	// queued before the peer's DREQ arrived (the ACK of our last SEND,
	// then the DREQ) is then read below, never reported as a disconnect.
	gone := e.gone.Load()
	n := 0
	want := min(len(out), len(e.results))
	k := e.scq.GetResultsEx(e.results[:want])
	for i := range e.results[:k] {
		out[n] = e.completion(&e.results[i])
		if c := &out[n]; c.Op == verbs.OpSend && c.Err == nil && e.sendsOut > 0 {
			e.sendsOut--
		}
		n++
	}
	if (e.sendsOut == 0 || e.unordered || e.failed || gone) && n < want {
		k = e.rcq.GetResultsEx(e.results[:want-n])
		for i := range e.results[:k] {
			out[n] = e.completion(&e.results[i])
			n++
		}
	}
	if n == 0 && gone {
		if err := e.dev.Adapter.Err(); err != nil {
			return 0, err // the daemon went away, not the peer
		}
		// Through a daemon the disconnect event and the completions
		// take different ways (the control socket, the relay's rings):
		// the CQs must stay empty a while after the disconnect was seen.
		if e.goneAt.IsZero() {
			e.goneAt = time.Now()
		}
		if time.Since(e.goneAt) < goneGrace {
			return 0, nil
		}
		return 0, verbs.ErrDisconnected
	}
	return n, nil
}

// goneGrace is how long Poll goes on looking for completions after it saw
// the peer's disconnect and none: far more than a daemon's relay takes to
// hand over what the engine completed before the DREQ came.
// A variable so that a test on a loaded machine may wait longer.
var goneGrace = 20 * time.Millisecond

func (e *Endpoint) completion(r *ndk.ResultEx) verbs.Completion {
	id, _ := r.RequestContext.(uint64)
	c := verbs.Completion{ID: id, Op: opOf(r.Type)}
	switch r.Type {
	case ndk.OpReceive, ndk.OpReceiveAndInvalidate:
		c.Bytes = int(r.BytesTransferred)
	case ndk.OpReceiveWriteWithImmediate:
		c.Bytes, c.Imm = int(r.BytesTransferred), r.Immediate
	}
	if r.Status != ndk.StatusSuccess {
		c.Err = completionErr(r)
		e.failed = true
	}
	*r = ndk.ResultEx{}
	return c
}

// Peek implements verbs.Endpoint: QP.PeerWrites orders the read after the
// placement of every WRITE packet the engine has executed.
func (e *Endpoint) Peek(r verbs.Region, off int) byte {
	e.peeked = e.qp.PeerWrites()
	return r.Buf[off]
}

// Wait implements verbs.Endpoint: it arms both CQs (NdkArmCq, any
// completion) and the QP's peer-write notification, and blocks until one
// of them, the peer's disconnect or ctx ends the wait. An arm fires at
// once for completions already queued, and a WRITE placed since the last
// Peek returns at once, so none is slept through.
func (e *Endpoint) Wait(ctx context.Context) error {
	ready, err := e.arm(&e.wake)
	if err != nil || ready {
		return err
	}
	return e.block(ctx)
}

// arm points the endpoint's notifications at *to and arms them; ready
// says that news came before the arm and the caller must not block. A
// notification fires once for the completions that came since the last
// one: where it went to another channel (a WaitAny's, or the endpoint's
// own), the caller may not have seen it, so a switch counts as news.
func (e *Endpoint) arm(to *chan struct{}) (ready bool, err error) {
	if e.wakeTo.Swap(to) != to {
		return true, nil
	}
	e.qp.ArmPeerWrites(*to)
	if err := e.scq.Arm(ndk.CQNotifyAny); err != nil {
		return false, fmt.Errorf("ndkverbs: arm initiator cq: %w", err)
	}
	if err := e.rcq.Arm(ndk.CQNotifyAny); err != nil {
		return false, fmt.Errorf("ndkverbs: arm receive cq: %w", err)
	}
	// The engine counts a placed WRITE before it looks at the arm: one
	// placed before the arm shows in the count.
	return e.gone.Load() || e.qp.PeerWrites() != e.peeked, nil
}

// WaitAny implements verbs.AnyWaiter for endpoints of e's Device: it
// points the notifications of every endpoint in eps at e's token
// channel, arms them all, and blocks as Wait does until one fires (the
// arms fire at once for completions already queued, so none is slept
// through). Each endpoint's own Wait points them back.
func (e *Endpoint) WaitAny(ctx context.Context, eps []verbs.Endpoint) error {
	for _, v := range eps {
		x, ok := v.(*Endpoint)
		if !ok || x.dev != e.dev {
			return fmt.Errorf("ndkverbs: WaitAny over %T of another device: %w", v, verbs.ErrInvalid)
		}
		ready, err := x.arm(&e.wake)
		if err != nil || ready {
			return err
		}
	}
	return e.block(ctx)
}

// block waits for a token on e.wake, the adapter's end or ctx's.
func (e *Endpoint) block(ctx context.Context) error {
	select {
	case <-e.wake:
		return nil
	case <-e.dev.Adapter.Gone():
		return e.dev.Adapter.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Settling bounds for Close.
const (
	settleSends = time.Second
	// settleAck outlasts the engine's ACK hold (rc ackHoldTime, 20 us):
	// a receive the consumer saw may still have its ACK held back.
	settleAck = time.Millisecond
)

// settle lets the last exchange finish before the connection goes: the
// signaled SENDs still unacknowledged complete (rping's server closes
// right after posting its last go-ahead, and a DREQ or a closed QP would
// otherwise cancel it), and held ACKs leave. Their completions are
// discarded; the caller is closing.
func (e *Endpoint) settle() {
	deadline := time.Now().Add(settleSends)
	for e.sendsOut > 0 && !e.failed && !e.gone.Load() && time.Now().Before(deadline) {
		k := e.scq.GetResultsEx(e.results[:])
		for i := range e.results[:k] {
			if e.completion(&e.results[i]).Op == verbs.OpSend && e.sendsOut > 0 {
				e.sendsOut--
			}
		}
		if k == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	time.Sleep(settleAck)
}

// Close implements verbs.Endpoint: it lets the last SENDs and ACKs finish
// (bounded, see settle), disconnects (when a hook was given),
// closes the QP (pending requests are flushed), deregisters the endpoint's
// memory and closes its CQ.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	mrs := e.mrs
	e.mrs = nil
	e.mu.Unlock()
	e.settle()
	var errs []error
	if e.disconnect != nil {
		if err := e.disconnect(); err != nil {
			errs = append(errs, fmt.Errorf("disconnect: %w", err))
		}
	}
	if err := e.qp.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close qp: %w", err))
	}
	for _, mr := range mrs {
		if err := mr.Deregister(); err != nil {
			errs = append(errs, fmt.Errorf("deregister: %w", err))
		}
	}
	e.scq.Close()
	e.rcq.Close()
	return errors.Join(errs...)
}

// QPN implements perftest.QPNumberer: the QP's number, which perftest
// prints and exchanges.
func (e *Endpoint) QPN() uint32 { return e.qp.QPN() }

// GID implements perftest.GIDer: the adapter's address as a GID
// (IPv4-mapped for IPv4, RoCEv2's rule).
func (e *Endpoint) GID() [16]byte { return e.dev.Adapter.LocalAddress().As16() }
