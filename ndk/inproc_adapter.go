package ndk

import (
	"net"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// inprocAdapter is the in-process provider's adapter (backend.go): the
// engines of provider.go, and the adapter's own token table. Without a
// provider (tests build the object model alone) it has no wire: QPs and
// connections fail with STATUS_NOT_SUPPORTED.
type inprocAdapter struct {
	a    *Adapter
	prov provider // nil without one
}

// attach makes p the adapter's provider.
func (a *Adapter) attach(p provider) {
	a.be.(*inprocAdapter).prov = p
	if b := p.Buffers(); b != nil {
		a.buffers = newBufferPool(b, p.BufferSlots())
	}
}

// provider returns the in-process provider, nil without one (or on a
// daemon-backed adapter).
func (a *Adapter) provider() provider {
	if b, ok := a.be.(*inprocAdapter); ok {
		return b.prov
	}
	return nil
}

func (b *inprocAdapter) localAddress() netip.Addr {
	if b.prov == nil {
		return netip.Addr{}
	}
	return b.prov.Address()
}

func (b *inprocAdapter) mac() net.HardwareAddr {
	var m rocev2.MAC
	if b.prov != nil {
		m = b.prov.MAC()
	}
	return net.HardwareAddr(m[:])
}

func (b *inprocAdapter) pathMTU() int {
	if b.prov == nil {
		return rocev2.MTU(0).Bytes()
	}
	return b.prov.PathMTU().Bytes()
}

func (b *inprocAdapter) stats() []EngineStats {
	if b.prov == nil {
		return []EngineStats{}
	}
	return engineStats(b.prov.Stats())
}

func (b *inprocAdapter) cmStats() CMStats {
	m := b.manager()
	if m == nil {
		return CMStats{}
	}
	s := m.Stats()
	queue, send := b.prov.MADDrops()
	return CMStats{Sent: s.Sent, Received: s.Received, Retransmits: s.Retransmits, Duplicates: s.Duplicates,
		Unmatched: s.Unmatched, Malformed: s.Malformed, QueueDrops: queue, SendDrops: send,
		Connections: s.Connections, HalfOpen: s.HalfOpen, TimeWait: s.TimeWait,
		TimeWaitEvictions: s.TimeWaitEvictions, BacklogRefusals: s.BacklogRefusals}
}

// manager returns the adapter's IB CM, or nil without one.
func (b *inprocAdapter) manager() *cm.Manager {
	if b.prov == nil {
		return nil
	}
	return b.prov.Manager()
}

func (b *inprocAdapter) memory(n int) ([]byte, error) { return make([]byte, n), nil }

func (b *inprocAdapter) bufferPool() (*bufferPool, error) { return b.a.buffers, nil }

func (b *inprocAdapter) createCQ(depth int, notify func(Status)) (*CQ, error) {
	const op = "create cq"
	a := b.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errorf(StatusInvalidHandle, op, "adapter closed")
	}
	core, err := cq.New(depth, notify)
	if err != nil {
		return nil, &Error{Status: StatusInsufficientResources, Op: op, Detail: "completion ring", Err: err}
	}
	c := &CQ{adapter: a, done: make(chan struct{})}
	c.be = &inprocCQ{c: c, core: core, prov: b.prov}
	a.cqs[c] = struct{}{}
	return c, nil
}

func (b *inprocAdapter) createPD() (*PD, error) {
	a := b.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errorf(StatusInvalidHandle, "create pd", "adapter closed")
	}
	if a.nextPD == ^uint32(0) {
		return nil, errorf(StatusInsufficientResources, "create pd", "protection domain ids exhausted")
	}
	a.nextPD++
	pd := &PD{adapter: a, id: a.nextPD, mrs: make(map[*MR]struct{}), done: make(chan struct{})}
	pd.be = &inprocPD{pd: pd}
	a.pds[pd] = struct{}{}
	return pd, nil
}

func (b *inprocAdapter) createConnector() (*Connector, error) {
	m := b.manager()
	if m == nil {
		return nil, errorf(StatusNotSupported, "create connector", "adapter has no connection management (use ndk.Open)")
	}
	return b.newConnector(m.NewConnector())
}

func (b *inprocAdapter) newConnector(c *cm.Connector) (*Connector, error) {
	a := b.a
	x := &Connector{a: a, done: make(chan struct{})}
	x.be = &inprocConnector{x: x, c: c}
	if err := a.conns.track(func() { a.conns.connectors[x] = struct{}{} }); err != nil {
		c.Close(nil)
		return nil, &Error{Status: StatusInvalidHandle, Op: "create connector", Err: err}
	}
	return x, nil
}

func (b *inprocAdapter) createListener(onConnect func(*Connector)) (*Listener, error) {
	const op = "create listener"
	a := b.a
	m := b.manager()
	if m == nil {
		return nil, errorf(StatusNotSupported, op, "adapter has no connection management (use ndk.Open)")
	}
	x := &Listener{a: a, done: make(chan struct{})}
	il := &inprocListener{x: x}
	l, err := m.NewListener(func(cc *cm.Connector) { il.connectEvent(b, cc, onConnect) })
	if err != nil {
		return nil, cmError(op, err)
	}
	il.l = l
	x.be = il
	if err := a.conns.track(func() { a.conns.listeners[x] = struct{}{} }); err != nil {
		l.Close(nil)
		return nil, &Error{Status: StatusInvalidHandle, Op: op, Err: err}
	}
	return x, nil
}

func (b *inprocAdapter) createSharedEndpoint(addr netip.AddrPort) (*SharedEndpoint, error) {
	const op = "create shared endpoint"
	a := b.a
	m := b.manager()
	if m == nil {
		return nil, errorf(StatusNotSupported, op, "adapter has no connection management (use ndk.Open)")
	}
	se, err := m.NewSharedEndpoint(addr)
	if err != nil {
		return nil, cmError(op, err)
	}
	x := &SharedEndpoint{a: a}
	x.be = &inprocEndpoint{x: x, se: se}
	if err := a.conns.track(func() { a.conns.endpoints[x] = struct{}{} }); err != nil {
		se.Close()
		return nil, &Error{Status: StatusInvalidHandle, Op: op, Err: err}
	}
	return x, nil
}

func (b *inprocAdapter) gone() <-chan struct{} { return nil }

func (b *inprocAdapter) err() error { return nil }

func (b *inprocAdapter) close(cqs map[*CQ]struct{}, pds map[*PD]struct{}) {
	// Connections first, sending the REJ or DREQ each needs while the
	// engines still run, and waiting for their connect and disconnect
	// callbacks (NDKPI.md §8: adapter close blocks until every callback
	// on every descendant returned); then the engines: their QPs cancel
	// what is pending into the CQs, which then close after the last
	// callback.
	b.a.conns.closeAll()
	if b.prov != nil {
		b.prov.Close()
	}

	for c := range cqs {
		c.closed.Store(true)
		c.finishClose() // QPs that still use it stopped with the engines
	}
	for pd := range pds {
		pd.closeWithSuccessors()
	}
}

// backend is the adapter's provider. An Adapter that no Open or Dial made
// (the zero value) has none: it answers as an in-process adapter without
// a transport, with no engines and errors for what needs one, never a
// nil dereference.
func (a *Adapter) backend() adapterBackend {
	if a.be == nil {
		return &inprocAdapter{a: a}
	}
	return a.be
}
