package ndk

import (
	"net/netip"
	"sync"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// Listener hands incoming connect requests for one address and port to its
// consumer (NDK_LISTENER). Peers reach it through the rdma_cm ServiceID of
// its port (RDMA_PS_TCP | port), so librdmacm clients (rping -c, perftest
// -R) connect to it as to a Linux listener.
type Listener struct {
	a *Adapter
	l *cm.Listener
	r *daemonListener // a daemon-backed listener (daemon_cm.go); l is nil

	mu       sync.Mutex
	inflight int // connect callbacks running
	closing  bool
	cmClosed bool
	done     chan struct{}
}

// CreateListener returns a listener whose connect requests go to onConnect
// (NdkCreateListener). onConnect runs on a goroutine of its own for each
// request with a new Connector: call GetConnectionData, then Accept or
// Reject, and Close the connector when done with it. A connector neither
// accepted nor rejected counts against the listener's backlog (128), and
// requests beyond it are refused.
func (a *Adapter) CreateListener(onConnect func(*Connector)) (*Listener, error) {
	const op = "create listener"
	if a.daemon != nil {
		if onConnect == nil {
			return nil, errorf(StatusInvalidParameter, op, "no connect callback")
		}
		return a.daemon.createListener(a, onConnect)
	}
	m := a.manager()
	if m == nil {
		return nil, errorf(StatusNotSupported, op, "adapter has no connection management (use ndk.Open)")
	}
	if onConnect == nil {
		return nil, errorf(StatusInvalidParameter, op, "no connect callback")
	}
	x := &Listener{a: a, done: make(chan struct{})}
	l, err := m.NewListener(func(cc *cm.Connector) { x.connectEvent(cc, onConnect) })
	if err != nil {
		return nil, cmError(op, err)
	}
	x.l = l
	if err := a.conns.track(func() { a.conns.listeners[x] = struct{}{} }); err != nil {
		l.Close(nil)
		return nil, &Error{Status: StatusInvalidHandle, Op: op, Err: err}
	}
	return x, nil
}

// connectEvent runs on the CM's goroutine: it wraps the request in a
// Connector and hands it over on a goroutine of its own, so that the
// consumer may call Accept, which waits for the CM's next MAD.
func (x *Listener) connectEvent(cc *cm.Connector, onConnect func(*Connector)) {
	c, err := x.a.newConnector(cc)
	if err != nil {
		return // the adapter is closing; the CM refuses the request
	}
	x.mu.Lock()
	if x.closing {
		x.mu.Unlock()
		c.Close()
		return
	}
	x.inflight++
	x.mu.Unlock()
	go func() {
		defer func() {
			x.mu.Lock()
			x.inflight--
			x.finishLocked()
			x.mu.Unlock()
		}()
		onConnect(c)
	}()
}

// Listen starts listening on addr (NdkListen). Port 0 picks a free one
// from 49152-65535 (LocalAddress tells which); an unspecified address
// listens on every address of its family. It fails with
// STATUS_SHARING_VIOLATION when the address and port are taken, also by
// connectors of a closed listener still open, and STATUS_INVALID_ADDRESS
// for an address that is not the adapter's.
func (x *Listener) Listen(addr netip.AddrPort) error {
	if x.r != nil {
		return x.daemonListen(addr)
	}
	return cmError("listen", x.l.Listen(addr))
}

// LocalAddress returns the address and port listened on
// (NdkGetListenerLocalAddress), with the port picked for port 0.
func (x *Listener) LocalAddress() netip.AddrPort {
	if x.r != nil {
		x.r.mu.Lock()
		defer x.r.mu.Unlock()
		return x.r.local
	}
	return x.l.LocalAddr()
}

// ControlConnectEvents pauses or resumes connect events
// (NdkControlConnectEvents). While paused, requests are refused as if
// nobody listened (the peer sees STATUS_CONNECTION_REFUSED).
func (x *Listener) ControlConnectEvents(pause bool) {
	if x.r != nil {
		_, _ = x.a.daemon.do("control connect events", &proto.Request{Op: proto.OpPauseListener, H: x.r.h, Pause: pause})
		return
	}
	x.l.ControlConnectEvents(pause)
}

// Close stops listening at once: later requests are refused. Connectors
// already handed over live on and keep the address and port taken until
// they close; the close completes (Closed) when they have and every connect
// callback returned (NDKPI.md §8). Close does not wait and may be called
// from a callback. A second Close does nothing.
func (x *Listener) Close() {
	x.mu.Lock()
	if x.closing {
		x.mu.Unlock()
		return
	}
	x.closing = true
	x.mu.Unlock()
	if x.r != nil {
		if _, err := x.a.daemon.do("close listener", &proto.Request{Op: proto.OpCloseListener, H: x.r.h}); err != nil {
			x.finishRemote()
		}
		return
	}
	if x.l.Close(x.cmCloseDone) {
		x.cmCloseDone()
	}
}

// Closed returns a channel closed when the listener's close completed.
func (x *Listener) Closed() <-chan struct{} { return x.done }

func (x *Listener) cmCloseDone() {
	x.mu.Lock()
	x.cmClosed = true
	x.finishLocked()
	x.mu.Unlock()
}

func (x *Listener) finishLocked() {
	if !x.cmClosed || x.inflight > 0 {
		return
	}
	select {
	case <-x.done:
		return
	default:
	}
	close(x.done)
	x.a.conns.forget(func() { delete(x.a.conns.listeners, x) })
}

// SharedEndpoint is one local address and port for several outgoing
// connections (NDK_SHARED_ENDPOINT; Connector.ConnectWithSharedEndpoint).
type SharedEndpoint struct {
	a  *Adapter
	se *cm.SharedEndpoint
	// A daemon-backed adapter's endpoint (daemon_cm.go): the daemon's
	// handle and the address it took.
	rh    uint32
	local netip.AddrPort
}

// CreateSharedEndpoint takes addr for shared use (NdkCreateSharedEndpoint);
// port 0 picks one from 49152-65535. It fails with
// STATUS_SHARING_VIOLATION when the address and port are taken and
// STATUS_INVALID_ADDRESS for an address that is not the adapter's.
func (a *Adapter) CreateSharedEndpoint(addr netip.AddrPort) (*SharedEndpoint, error) {
	const op = "create shared endpoint"
	if a.daemon != nil {
		return a.daemon.createSharedEndpoint(a, addr)
	}
	m := a.manager()
	if m == nil {
		return nil, errorf(StatusNotSupported, op, "adapter has no connection management (use ndk.Open)")
	}
	se, err := m.NewSharedEndpoint(addr)
	if err != nil {
		return nil, cmError(op, err)
	}
	x := &SharedEndpoint{a: a, se: se}
	if err := a.conns.track(func() { a.conns.endpoints[x] = struct{}{} }); err != nil {
		se.Close()
		return nil, &Error{Status: StatusInvalidHandle, Op: op, Err: err}
	}
	return x, nil
}

// LocalAddress returns the endpoint's address and port
// (NdkGetSharedEndpointLocalAddress).
func (x *SharedEndpoint) LocalAddress() netip.AddrPort {
	if x.se == nil {
		return x.local
	}
	return x.se.LocalAddr()
}

// Close drops the endpoint's own reference: connectors using it keep the
// address and port taken until they close.
func (x *SharedEndpoint) Close() {
	if x.se == nil {
		_, _ = x.a.daemon.do("close shared endpoint", &proto.Request{Op: proto.OpCloseEndpoint, H: x.rh})
		return
	}
	x.se.Close()
	x.a.conns.forget(func() { delete(x.a.conns.endpoints, x) })
}
