package ndk

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// management is an adapter's connection management: the IB CM (package
// cm) and its wire, QP1. The management queue's engine hands each GSI
// datagram to onGSI, which copies the MAD into a bounded queue and
// returns; one goroutine of the adapter feeds the queue to the CM, so
// that neither the data path nor the CM's timers ever wait for each other.
// The CM's MADs go out through SendMAD: framed here, transmitted by the
// management queue's engine ahead of its data (rc.Engine.TransmitGSI).
type management struct {
	t      *transport
	m      *cm.Manager
	eng    *rc.Engine // the management queue's engine (queue 0)
	framer cm.GSIFramer

	in   chan gsiEvent
	stop chan struct{}
	done chan struct{}

	// ns is the adapter's network namespace, where routes and neighbours
	// are looked up whatever thread calls Connect; nsOK is false for an
	// adapter without one (over an in-memory pipe).
	ns   netns.NsHandle
	nsOK bool
	nl   *netlink.Handle
	// resolve replaces the kernel's tables (tests over a pipe).
	resolve func(src, dst netip.Addr) (cm.PathInfo, error)
	faults  func(mad []byte) (copies int, delay time.Duration)

	queueDrops atomic.Uint64 // MADs lost to a full receive queue
	sendDrops  atomic.Uint64 // MADs lost to a full transmit queue
	delayed    sync.WaitGroup
	stopped    atomic.Bool // the engines are stopping: MADs are dropped

	mu         sync.Mutex
	closed     bool
	addrs      map[netip.Addr]bool // the interface's addresses, refreshed on a miss
	connectors map[*Connector]struct{}
	listeners  map[*Listener]struct{}
	endpoints  map[*SharedEndpoint]struct{}
}

// gsiQueue bounds the MADs waiting for the CM goroutine. A full queue
// drops (and counts) the MAD: the sender's CM retransmits it.
const gsiQueue = 512

type gsiEvent struct {
	path    cm.PathInfo
	srcQP   uint32
	commEst uint32 // not 0: the QP with this number received its first packet
	mad     [rocev2.MADLen]byte
}

func newManagement(t *transport, faults func([]byte) (int, time.Duration)) *management {
	return &management{
		t:          t,
		in:         make(chan gsiEvent, gsiQueue),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		faults:     faults,
		addrs:      map[netip.Addr]bool{},
		connectors: map[*Connector]struct{}{},
		listeners:  map[*Listener]struct{}{},
		endpoints:  map[*SharedEndpoint]struct{}{},
	}
}

// openNamespace remembers the calling thread's network namespace, which
// Open runs in, so that later route lookups happen there.
func (g *management) openNamespace() error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return fmt.Errorf("netlink in the adapter's namespace: %w", err)
	}
	g.ns, g.nsOK, g.nl = ns, true, nl
	return nil
}

// start creates the CM once the engines run and starts feeding it.
func (g *management) start(params cm.Params) error {
	if len(g.t.engines) == 0 {
		return errors.New("connection management needs an engine")
	}
	g.eng = g.t.engines[0]
	m, err := cm.New(cm.Config{Transport: g, CAGUID: rocev2.EUI64(g.t.mac), Params: params, IsLocalAddr: g.isLocal})
	if err != nil {
		return err
	}
	g.m = m
	go g.serve()
	return nil
}

// onGSI runs on the management queue's engine for every UD datagram to
// QP1. It does not block and does not allocate.
func (g *management) onGSI(p *rocev2.Packet) {
	reply, srcQP, mad, err := cm.CheckGSI(p)
	if err != nil {
		return
	}
	ev := gsiEvent{path: reply, srcQP: srcQP}
	// The reply leaves through our interface: its MTU bounds the path MTU
	// the passive side accepts.
	ev.path.MTU, ev.path.Ifindex = g.t.mtu, g.t.ifindex
	copy(ev.mad[:], mad)
	select {
	case g.in <- ev:
	default:
		g.queueDrops.Add(1)
	}
}

// onFirstPacket runs on any engine when a connected QP receives its first
// packet: a passive side still waiting for RTU counts as established.
func (g *management) onFirstPacket(qpn uint32) {
	select {
	case g.in <- gsiEvent{commEst: qpn}:
	default:
		// The REP retransmission still brings the RTU.
		g.queueDrops.Add(1)
	}
}

func (g *management) serve() {
	defer close(g.done)
	for {
		select {
		case <-g.stop:
			return
		case ev := <-g.in:
			if ev.commEst != 0 {
				g.m.CommEstablished(ev.commEst)
			} else {
				g.m.HandleMAD(ev.path, ev.srcQP, ev.mad[:])
			}
		}
	}
}

// SendMAD implements cm.Transport.
func (g *management) SendMAD(dst cm.PathInfo, mad *[rocev2.MADLen]byte) error {
	copies, delay := 1, time.Duration(0)
	if g.faults != nil {
		copies, delay = g.faults(mad[:])
	}
	for range copies {
		frame := make([]byte, cm.GSIFrameLen6)
		n, err := g.framer.Build(frame, &dst, mad)
		if err != nil {
			return err
		}
		if delay <= 0 {
			if err := g.transmit(frame[:n]); err != nil {
				return err
			}
			continue
		}
		g.delayed.Add(1)
		time.AfterFunc(delay, func() {
			defer g.delayed.Done()
			_ = g.transmit(frame[:n])
		})
	}
	return nil
}

func (g *management) transmit(frame []byte) error {
	if g.stopped.Load() {
		return errors.New("adapter closed")
	}
	if err := g.eng.TransmitGSI(frame); err != nil {
		g.sendDrops.Add(1)
		return err
	}
	return nil
}

// isLocal reports whether a is an address of the adapter's interface.
func (g *management) isLocal(a netip.Addr) bool {
	a = a.Unmap()
	if a == g.t.addr {
		return true
	}
	if g.nl == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.addrs[a] {
		return true
	}
	link, err := g.nl.LinkByIndex(g.t.ifindex)
	if err != nil {
		return false
	}
	list, err := g.nl.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return false
	}
	for _, x := range list {
		if ip, ok := netip.AddrFromSlice(x.IP); ok {
			g.addrs[ip.Unmap()] = true
		}
	}
	return g.addrs[a]
}

// resolvePath finds the route and next-hop MAC from src (zero: the
// kernel's choice) to dst in the adapter's namespace, and checks that it
// leaves through the adapter's interface.
func (g *management) resolvePath(op string, src, dst netip.Addr) (cm.PathInfo, error) {
	var path cm.PathInfo
	var err error
	switch {
	case g.resolve != nil:
		path, err = g.resolve(src, dst)
	case g.nsOK:
		path, err = g.inNamespace(func() (cm.PathInfo, error) {
			var r cm.Resolver
			return r.Resolve(src, dst)
		})
	default:
		return path, errorf(StatusNotSupported, op, "adapter has no network namespace to resolve %v in", dst)
	}
	if err != nil {
		return path, cmError(op, err)
	}
	if g.t.ifindex != 0 && path.Ifindex != g.t.ifindex {
		return path, errorf(StatusNetworkUnreachable, op, "the route to %v leaves through %s, not the adapter's interface", dst, path.Ifname)
	}
	return path, nil
}

// inNamespace runs fn on a thread that entered the adapter's network
// namespace. If the thread cannot go back, it stays locked and dies with
// its goroutine rather than serve others from the wrong namespace.
func (g *management) inNamespace(fn func() (cm.PathInfo, error)) (cm.PathInfo, error) {
	type result struct {
		p   cm.PathInfo
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("network namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(g.ns); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter the adapter's namespace: %w", err)}
			return
		}
		p, err := fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{p, err}
	}()
	r := <-ch
	return r.p, r.err
}

// close closes what the consumer left open (sending the REJ or DREQ each
// needs while the engine still runs), then stops the CM.
func (g *management) close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	conns, ls, eps := g.connectors, g.listeners, g.endpoints
	g.connectors, g.listeners, g.endpoints = nil, nil, nil
	g.mu.Unlock()
	if g.m != nil {
		for c := range conns {
			c.Close()
		}
		for l := range ls {
			l.Close()
		}
		for s := range eps {
			s.Close()
		}
		g.m.Close()
		close(g.stop)
		<-g.done
		g.delayed.Wait()
	}
	// Nothing may reach the engines once they stop.
	g.stopped.Store(true)
	if g.nl != nil {
		g.nl.Close()
	}
	if g.nsOK {
		g.ns.Close()
	}
}

// track and forget keep the objects the adapter must close with it.
func (g *management) track(add func()) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errors.New("adapter closed")
	}
	add()
	return nil
}

func (g *management) forget(remove func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		remove()
	}
}

// CMStats are the adapter's connection-management counters: MADs by
// attribute, retransmissions, duplicates answered from state, and MADs
// lost locally.
type CMStats struct {
	Sent, Received map[rocev2.AttributeID]uint64
	Retransmits    uint64 // REQ, REP and DREQ resent after a timeout
	Duplicates     uint64 // received MADs answered from state
	Unmatched      uint64 // MADs for no known connection
	Malformed      uint64
	QueueDrops     uint64 // received MADs dropped because the CM's queue was full
	SendDrops      uint64 // MADs dropped because the engine's queue was full
}

// CMStats returns the connection-management counters.
func (a *Adapter) CMStats() CMStats {
	g := a.mgmt()
	if g == nil || g.m == nil {
		return CMStats{}
	}
	s := g.m.Stats()
	return CMStats{Sent: s.Sent, Received: s.Received, Retransmits: s.Retransmits, Duplicates: s.Duplicates,
		Unmatched: s.Unmatched, Malformed: s.Malformed, QueueDrops: g.queueDrops.Load(), SendDrops: g.sendDrops.Load()}
}

func (a *Adapter) mgmt() *management {
	if a.transport == nil {
		return nil
	}
	return a.transport.mgmt
}

// cmError turns an error of package cm into the ndk error with the same
// NTSTATUS, keeping it as the cause.
func cmError(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Status: Status(cm.StatusOf(err)), Op: op, Err: err}
}

// cmQP drives an ndk QP for one connection (cm.QP): the RTR parameters
// are kept until RTS connects the RC QP with all of them at once.
type cmQP struct {
	q   *QP
	eng *rc.Engine
	ri  cm.RemoteInfo
	rtr bool
}

func (q *QP) forCM() *cmQP {
	t := q.adapter.transport
	t.mu.Lock()
	defer t.mu.Unlock()
	var e *rc.Engine
	if q.queue < len(t.engines) {
		e = t.engines[q.queue]
	}
	return &cmQP{q: q, eng: e}
}

func (x *cmQP) QPN() uint32             { return x.q.QPN() }
func (x *cmQP) StartingPSN() rocev2.PSN { return rocev2.PSN(x.q.psn) & rocev2.PSNMask }

func (x *cmQP) ToRTR(ri cm.RemoteInfo) error {
	t := x.q.adapter.transport
	switch {
	case !ri.Path.LocalIP.IsValid() || !ri.Path.RemoteIP.IsValid():
		return fmt.Errorf("QP %#x: path without addresses", x.q.QPN())
	case ri.PathMTU > t.pmtu:
		return fmt.Errorf("QP %#x: path MTU %d exceeds the interface's %d", x.q.QPN(), ri.PathMTU.Bytes(), t.pmtu.Bytes())
	}
	x.ri, x.rtr = ri, true
	return nil
}

func (x *cmQP) ToRTS() error {
	if !x.rtr {
		return fmt.Errorf("QP %#x: RTS before RTR", x.q.QPN())
	}
	ri := &x.ri
	// Linux takes each side's StartingPSN as the PSN that side receives
	// first: the active side sends from the REP's PSN and the passive side
	// from the REQ's (cm.c cm_rep_handler sets sq_psn from the REP). The
	// rxe capture linlinw5__rdma_ib_tutorial/rping.pcap shows it: REQ PSN
	// 0x3da6, REP PSN 0xfebd3d, the client's first SEND 0xfebd3d and the
	// server's first READ 0x3da6. So our requester starts at the peer's
	// StartingPSN and our responder expects our own.
	p := rc.ConnParams{
		Local:             rc.Endpoint{IP: ri.Path.LocalIP.Unmap(), MAC: ri.Path.LocalMAC, QPN: x.q.QPN(), PSN: uint32(ri.PSN)},
		Remote:            rc.Endpoint{IP: ri.Path.RemoteIP.Unmap(), MAC: ri.Path.RemoteMAC, QPN: ri.QPN, PSN: x.q.psn},
		PathMTU:           ri.PathMTU,
		InboundReadLimit:  int(ri.InboundReadLimit),
		OutboundReadLimit: int(ri.OutboundReadLimit),
		AckTimeout:        ri.AckTimeoutDuration(),
		RetryCount:        int(ri.RetryCount),
		RNRRetry:          int(ri.RNRRetry),
		MinRNRTimer:       rocev2.RNRTimerFor(10 * time.Microsecond),
	}
	return x.q.rc.Connect(p)
}

func (x *cmQP) ToError() { x.q.rc.Flush() }

// Drained waits, on a goroutine of its own, until the engine has put the
// QP in the error state, then orders itself after the engine's step that
// did so (Stats runs on the engine): every request was cancelled and no
// DMA on the QP can follow.
func (x *cmQP) Drained(f func()) {
	go func() {
		wait := 20 * time.Microsecond
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if s := x.q.rc.State(); s == rc.StateError || s == rc.StateClosed {
				break
			}
			time.Sleep(wait)
			wait = min(2*wait, 5*time.Millisecond)
		}
		if x.eng != nil {
			x.eng.Stats()
		}
		f()
	}()
}

// CMOptions tune the IB CM. Zero fields take the values Linux's rdma_cm
// uses (CMA_CM_RESPONSE_TIMEOUT, CMA_IBOE_PACKET_LIFETIME,
// CMA_MAX_CM_RETRIES), which is what peers expect; shorter timers suit a
// test network. A REQ is resent after 2·2^(PacketLifeTime-8) +
// 2^(ResponseTimeout-8) ms, MaxRetries times, before Connect fails with
// STATUS_IO_TIMEOUT.
type CMOptions struct {
	// ResponseTimeout is the CM response timeout exponent (4.096 µs ·
	// 2^n, 8-31): 0 means 20, about 4.3 s.
	ResponseTimeout int
	// PacketLifeTime is the path's packet lifetime exponent (8-30); it
	// also sets the QP's ACK timeout: 0 means 16.
	PacketLifeTime int
	// MaxRetries is how often a REQ, REP or DREQ is resent (1-15): 0
	// means 15.
	MaxRetries int
}

func (o CMOptions) params() (cm.Params, error) {
	p := cm.DefaultParams()
	switch {
	case o.ResponseTimeout != 0 && (o.ResponseTimeout < 8 || o.ResponseTimeout > 31):
		return p, fmt.Errorf("CM ResponseTimeout %d outside 8-31", o.ResponseTimeout)
	case o.PacketLifeTime != 0 && (o.PacketLifeTime < 8 || o.PacketLifeTime > 30):
		return p, fmt.Errorf("CM PacketLifeTime %d outside 8-30", o.PacketLifeTime)
	case o.MaxRetries < 0 || o.MaxRetries > 15:
		return p, fmt.Errorf("CM MaxRetries %d outside 1-15", o.MaxRetries)
	}
	if o.ResponseTimeout != 0 {
		p.CMResponseTimeout = uint8(o.ResponseTimeout)
	}
	if o.PacketLifeTime != 0 {
		p.PacketLifeTime = uint8(o.PacketLifeTime)
	}
	if o.MaxRetries != 0 {
		p.MaxCMRetries = uint8(o.MaxRetries)
	}
	return p, nil
}
