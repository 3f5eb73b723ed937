package ndk

import (
	"net/netip"
	"sync"
)

// Listener hands incoming connect requests for one address and port to its
// consumer (NDK_LISTENER). Peers reach it through the rdma_cm ServiceID of
// its port (RDMA_PS_TCP | port), so librdmacm clients (rping -c, perftest
// -R) connect to it as to a Linux listener.
type Listener struct {
	a  *Adapter
	be listenerBackend // inproc_cm.go, daemon_cm.go

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
	if onConnect == nil {
		return nil, errorf(StatusInvalidParameter, "create listener", "no connect callback")
	}
	return a.backend().createListener(onConnect)
}

// Listen starts listening on addr (NdkListen). Port 0 picks a free one
// from 49152-65535 (LocalAddress tells which); an unspecified address
// listens on every address of its family. It fails with
// STATUS_SHARING_VIOLATION when the address and port are taken, also by
// connectors of a closed listener still open, and STATUS_INVALID_ADDRESS
// for an address that is not the adapter's.
func (x *Listener) Listen(addr netip.AddrPort) error { return x.be.listen(addr) }

// LocalAddress returns the address and port listened on
// (NdkGetListenerLocalAddress), with the port picked for port 0.
func (x *Listener) LocalAddress() netip.AddrPort { return x.be.localAddress() }

// ControlConnectEvents pauses or resumes connect events
// (NdkControlConnectEvents). While paused, requests are refused as if
// nobody listened (the peer sees STATUS_CONNECTION_REFUSED).
func (x *Listener) ControlConnectEvents(pause bool) { x.be.controlConnectEvents(pause) }

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
	x.be.close()
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
	be endpointBackend // inproc_cm.go, daemon_cm.go
}

// CreateSharedEndpoint takes addr for shared use (NdkCreateSharedEndpoint);
// port 0 picks one from 49152-65535. It fails with
// STATUS_SHARING_VIOLATION when the address and port are taken and
// STATUS_INVALID_ADDRESS for an address that is not the adapter's.
func (a *Adapter) CreateSharedEndpoint(addr netip.AddrPort) (*SharedEndpoint, error) {
	return a.backend().createSharedEndpoint(addr)
}

// LocalAddress returns the endpoint's address and port
// (NdkGetSharedEndpointLocalAddress).
func (x *SharedEndpoint) LocalAddress() netip.AddrPort { return x.be.localAddress() }

// Close drops the endpoint's own reference: connectors using it keep the
// address and port taken until they close.
func (x *SharedEndpoint) Close() { x.be.close() }
