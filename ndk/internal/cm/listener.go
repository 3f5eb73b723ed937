package cm

import (
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

type epKind uint8

const (
	epListener epKind = iota
	epConnector
	epShared
)

// endpoint is a local address and port in use. It is reference counted
// as NDKPI.md §8 describes: a listener's counts the listener and each
// connector it handed over, a plain Connect's counts that connector, a
// shared endpoint's counts itself and each connector using it. The address
// and port stay taken until the count drops to 0.
type endpoint struct {
	addr  netip.AddrPort
	kind  epKind
	refs  int
	peers map[netip.AddrPort]int // active connections by destination
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// usableAddr reports whether a can be one end of a RoCE connection: a
// unicast address that is neither unspecified nor loopback (rdma_cm's
// validate_net_dev refuses the same).
func usableAddr(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && !a.IsLoopback() &&
		a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

func (m *Manager) checkLocal(a netip.Addr, op string) error {
	if m.isAddr != nil && !m.isAddr(a) {
		return ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "%v is not an address of this adapter", a)
	}
	return nil
}

// conflict returns the endpoint that already holds a's port, counting a
// wildcard address on either side as overlapping every address of its
// family.
func (m *Manager) conflict(a netip.Addr, port uint16) *endpoint {
	for _, ep := range m.endpoints[port] {
		b := ep.addr.Addr()
		if b.Is4() != a.Is4() {
			continue
		}
		if b == a || b.IsUnspecified() || a.IsUnspecified() {
			return ep
		}
	}
	return nil
}

// bind takes addr (port 0: an ephemeral port) for a new endpoint. dst is
// the destination of a plain Connect, to tell a duplicate 4-tuple
// (ADDRESS_ALREADY_EXISTS) from a taken port (SHARING_VIOLATION).
func (m *Manager) bind(addr netip.AddrPort, kind epKind, dst netip.AddrPort, op string) (*endpoint, error) {
	a, port := addr.Addr(), addr.Port()
	if port == 0 {
		const n = EphemeralLast - EphemeralFirst + 1
		start := m.rng.IntN(n)
		for i := 0; i < n; i++ {
			p := uint16(EphemeralFirst + (start+i)%n)
			if m.conflict(a, p) == nil {
				port = p
				break
			}
		}
		if port == 0 {
			return nil, ndkpi.Errorf(ndkpi.StatusTooManyAddresses, op, nil, "no free port in %d-%d on %v", EphemeralFirst, EphemeralLast, a)
		}
	} else if ep := m.conflict(a, port); ep != nil {
		if kind == epConnector && ep.kind != epListener && ep.peers[dst] > 0 {
			return nil, ndkpi.Errorf(ndkpi.StatusAddressAlreadyExists, op, nil, "connection %v -> %v exists", addr, dst)
		}
		return nil, ndkpi.Errorf(ndkpi.StatusSharingViolation, op, nil, "%v is in use by %v", addr, ep.addr)
	}
	ep := &endpoint{addr: netip.AddrPortFrom(a, port), kind: kind, refs: 1, peers: map[netip.AddrPort]int{}}
	m.endpoints[port] = append(m.endpoints[port], ep)
	return ep, nil
}

func (m *Manager) unbind(ep *endpoint) {
	if ep.refs--; ep.refs > 0 {
		return
	}
	port := ep.addr.Port()
	eps := m.endpoints[port]
	for i, e := range eps {
		if e == ep {
			eps = append(eps[:i], eps[i+1:]...)
			break
		}
	}
	if len(eps) == 0 {
		delete(m.endpoints, port)
	} else {
		m.endpoints[port] = eps
	}
}

// SharedEndpoint is one local address and port for several outgoing
// connections (NDK_SHARED_ENDPOINT).
type SharedEndpoint struct {
	m      *Manager
	ep     *endpoint
	addr   netip.AddrPort
	closed bool
}

// NewSharedEndpoint takes addr for shared use (NdkCreateSharedEndpoint);
// port 0 picks one from 49152-65535. It fails with SHARING_VIOLATION when
// the address and port are taken and INVALID_ADDRESS for an address that
// cannot be a connection's end.
func (m *Manager) NewSharedEndpoint(addr netip.AddrPort) (*SharedEndpoint, error) {
	const op = "create shared endpoint"
	addr = unmap(addr)
	if !usableAddr(addr.Addr()) {
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "%v is not a unicast address", addr.Addr())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocal(addr.Addr(), op); err != nil {
		return nil, err
	}
	ep, err := m.bind(addr, epShared, netip.AddrPort{}, op)
	if err != nil {
		return nil, err
	}
	return &SharedEndpoint{m: m, ep: ep, addr: ep.addr}, nil
}

// LocalAddr returns the endpoint's address and port.
func (s *SharedEndpoint) LocalAddr() netip.AddrPort { return s.addr }

// Close drops the endpoint's own reference; connectors using it keep the
// address taken until they close.
func (s *SharedEndpoint) Close() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.m.unbind(s.ep)
	}
}

// Listener hands incoming connect requests for one address and port to
// its consumer (NDK_LISTENER).
type Listener struct {
	m         *Manager
	lt        lifetime
	onConnect func(*Connector)
	ep        *endpoint
	addr      netip.AddrPort
	listening bool
	paused    bool
	pending   int // half-open connections (Params.ListenBacklog)
	conns     int // connectors handed over and not yet closed
}

// NewListener returns a listener whose connect requests go to onConnect
// (NdkCreateListener). onConnect is called once per request with a new
// passive Connector, which the consumer accepts, rejects or closes.
func (m *Manager) NewListener(onConnect func(*Connector)) (*Listener, error) {
	if onConnect == nil {
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidParameter, "create listener", nil, "connect callback is required")
	}
	l := &Listener{m: m, onConnect: onConnect}
	l.lt.extra = func() bool { return l.conns > 0 }
	return l, nil
}

// Listen starts listening on addr (NdkListen): rdma_cm peers reach it
// through the ServiceID RDMA_PS_TCP | port. Port 0 picks one from
// 49152-65535; an unspecified address listens on every address of its
// family. It fails with SHARING_VIOLATION when the address and port are
// taken (also by connectors still holding them) and INVALID_ADDRESS for a
// multicast, broadcast, loopback or foreign address.
func (l *Listener) Listen(addr netip.AddrPort) error {
	const op = "listen"
	m := l.m
	addr = unmap(addr)
	a := addr.Addr()
	if !a.IsValid() || (!a.IsUnspecified() && !usableAddr(a)) {
		return ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "%v cannot be listened on", a)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed || l.lt.closed:
		return ndkpi.Errorf(ndkpi.StatusInvalidHandle, op, nil, "listener or manager closed")
	case l.listening:
		return ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "already listening on %v", l.addr)
	}
	if !a.IsUnspecified() {
		if err := m.checkLocal(a, op); err != nil {
			return err
		}
	}
	ep, err := m.bind(addr, epListener, netip.AddrPort{}, op)
	if err != nil {
		return err
	}
	l.ep, l.addr, l.listening = ep, ep.addr, true
	port := ep.addr.Port()
	m.listeners[port] = append(m.listeners[port], l)
	return nil
}

// LocalAddr returns the address and port listened on, with the port the
// Manager picked for port 0 (NdkGetListenerLocalAddress).
func (l *Listener) LocalAddr() netip.AddrPort {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return l.addr
}

// ControlConnectEvents pauses or resumes connect events
// (NdkControlConnectEvents). While paused, requests are refused as if no
// listener existed: REJ reason 8, invalid ServiceID, as Linux's CM answers
// a ServiceID nobody listens on.
func (l *Listener) ControlConnectEvents(pause bool) {
	l.m.mu.Lock()
	l.paused = pause
	l.m.mu.Unlock()
}

// Close stops listening at once: later requests are refused (REJ reason
// 8). Connectors already handed over live on and keep the address and port
// taken until they close. Close reports true when complete; false means a
// connect callback is running or handed-over connectors are still open,
// and done (if not nil) is called when the last of them is gone (NDKPI.md
// §8: a listener close stays pending until its connectors are closed).
func (l *Listener) Close(done func()) bool {
	m := l.m
	m.mu.Lock()
	if l.lt.closed {
		m.mu.Unlock()
		return true
	}
	l.lt.closed = true
	if l.listening {
		l.listening = false
		port := l.addr.Port()
		ls := m.listeners[port]
		for i, x := range ls {
			if x == l {
				ls = append(ls[:i], ls[i+1:]...)
				break
			}
		}
		if len(ls) == 0 {
			delete(m.listeners, port)
		} else {
			m.listeners[port] = ls
		}
		m.unbind(l.ep)
	}
	complete := l.lt.inflight == 0 && l.conns == 0
	if !complete {
		l.lt.closeDone = done
	}
	m.mu.Unlock()
	return complete
}

// findListener picks the listener for a port and destination address: an
// exact address before a wildcard of the same family.
func (m *Manager) findListener(port uint16, dst netip.Addr) *Listener {
	var wild *Listener
	for _, l := range m.listeners[port] {
		a := l.addr.Addr()
		switch {
		case !dst.IsValid():
			if wild == nil {
				wild = l
			}
		case a == dst:
			return l
		case a.IsUnspecified() && a.Is4() == dst.Is4():
			wild = l
		}
	}
	return wild
}
