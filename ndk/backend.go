package ndk

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The seam between the API and its two providers. Each public object
// holds one backend and calls it; the API keeps what both providers share
// (argument checks against AdapterInfo, the NDK lifetime rules, the
// objects' bookkeeping) and never asks which provider it runs on. The
// in-process provider's backends are in inproc_*.go, over the engines
// (ndk/internal/rc, provider.go); the daemon-client provider's in
// daemon_*.go and dial.go, over the daemon's control socket and the rings
// it shares (ndk/internal/client, ndk/internal/proto, ndk/internal/shm).
// A new capability is a method here, implemented by both: the compiler
// names the provider that lacks it.
//
// The data-path methods (post, receive, getResults, arm) take no pointer
// to the caller's stack: an argument of an interface call escapes, so a
// work request goes by value.

// adapterBackend is the provider behind an Adapter: it makes the
// adapter's top-level objects and answers for the wire.
type adapterBackend interface {
	localAddress() netip.Addr
	mac() net.HardwareAddr
	pathMTU() int
	stats() []EngineStats
	cmStats() CMStats
	// memory is Adapter.Memory: n bytes the provider can register.
	memory(n int) ([]byte, error)
	// bufferPool returns AllocBuffer's pool, nil for heap memory.
	bufferPool() (*bufferPool, error)
	// createCQ and createPD make the objects; the depth was checked.
	createCQ(depth int, notify func(Status)) (*CQ, error)
	createPD() (*PD, error)
	createConnector() (*Connector, error)
	// createListener: onConnect is not nil.
	createListener(onConnect func(*Connector)) (*Listener, error)
	createSharedEndpoint(addr netip.AddrPort) (*SharedEndpoint, error)
	// serveUD, resolveUD and nextHop are the UD extension's connection
	// management (ud.go): SIDR both ways, and the next hop's MAC for an
	// address.
	// serveUD's q is the caller's, unchecked.
	serveUD(addr netip.AddrPort, q *QP) (udServer, error)
	resolveUD(ctx context.Context, dst netip.AddrPort) (UDDestination, error)
	nextHop(ip netip.Addr) (rocev2.MAC, error)
	// gone and err are Adapter.Gone and Adapter.Err.
	gone() <-chan struct{}
	err() error
	// close closes the provider and what the adapter still holds, the
	// CQs and PDs Adapter.Close took from it.
	close(cqs map[*CQ]struct{}, pds map[*PD]struct{})
}

// pdBackend is the provider's protection domain: registrations, windows,
// fast-register MRs, and the QPs and SRQs made on it.
type pdBackend interface {
	// register is RegisterMR (invalidatable: RegisterInvalidatableMR).
	register(buf []byte, flags MRFlag, invalidatable bool) (*MR, error)
	deregister(m *MR) error
	// initFastRegister is InitializeFastRegister; m is a fast MR and
	// pages was checked.
	initFastRegister(m *MR, pages int, remoteAccess bool) error
	createMW() (*MW, error)
	closeMW(mw *MW)
	// createSRQ and createQP: the arguments were checked against
	// AdapterInfo.
	createSRQ(depth, maxSGE, threshold int, notify func(Status)) (*SRQ, error)
	createQP(cfg QPConfig) (*QP, error)
	// createUDQP makes a UD QP with Q_Key qkey, ready at once (ud.go).
	createUDQP(cfg QPConfig, qkey uint32) (*QP, error)
	close()
	// finishIfIdleLocked completes a pending close once no successor is
	// left; pd.mu is held.
	finishIfIdleLocked()
}

// cqBackend is the provider's completion queue. getResults, getResultsEx
// and arm are the data path: they allocate nothing.
type cqBackend interface {
	depth() int
	getResults(results []Result) int
	getResultsEx(results []ResultEx) int
	// arm: n is a known notification type.
	arm(n CQNotify) error
	// resize and moderate: the arguments were checked.
	resize(depth int) error
	moderate(interval time.Duration, count uint64) error
	close()
}

// qpBackend is the provider's queue pair. post, receive, bind,
// fastRegister and ringDeferred are the data path: they allocate nothing
// when they succeed.
type qpBackend interface {
	qpn() uint32
	connected() bool
	// post posts wr, whose flags were checked for pop.
	post(op string, wr rc.SendWR) error
	// ringDeferred rings the doorbell for DEFER posts left waiting, as
	// every inline failure must (NDKPI.md §8).
	ringDeferred()
	receive(ctx any, sgl []SGE) error
	bind(ctx any, mr *MR, mw *MW, addr, length uint64, flags OpFlag) error
	fastRegister(ctx any, mr *MR, buf []byte, flags OpFlag) error
	// invalidated follows a successful post of Invalidate of obj.
	invalidated(obj Invalidatable)
	connectOOB(remote Endpoint, opts ConnectOptions) error
	// joinMulticast and leaveMulticast: q is UD, group multicast (ud.go).
	joinMulticast(group netip.Addr) error
	leaveMulticast(group netip.Addr) error
	peerWrites() uint64
	armPeerWrites(ch chan struct{})
	flush()
	// close closes the provider's QP; the caller then releases the
	// antecedents.
	close() error
}

// srqBackend is the provider's shared receive queue.
type srqBackend interface {
	receive(ctx any, sgl []SGE) error
	modify(depth, threshold int) error
	capacity() int
	length() int
	close()
}

// connectorBackend is the provider's connector; the Connector keeps the
// callbacks' bookkeeping and the close's completion.
type connectorBackend interface {
	// connect is Connect (se nil) and ConnectWithSharedEndpoint.
	connect(ctx context.Context, op string, qp *QP, src netip.AddrPort, se *SharedEndpoint, dst netip.AddrPort, inbound, outbound int, privateData []byte) error
	completeConnect(onDisconnect func(DisconnectReason)) error
	accept(ctx context.Context, qp *QP, inbound, outbound int, privateData []byte, onDisconnect func(DisconnectReason)) error
	reject(privateData []byte) error
	disconnect(ctx context.Context, abortive bool) error
	connectionData(buf []byte) (inbound, outbound, size int, err error)
	localAddress() netip.AddrPort
	peerAddress() netip.AddrPort
	close()
}

// listenerBackend is the provider's listener.
type listenerBackend interface {
	listen(addr netip.AddrPort) error
	localAddress() netip.AddrPort
	controlConnectEvents(pause bool)
	close()
}

// endpointBackend is the provider's shared endpoint.
type endpointBackend interface {
	localAddress() netip.AddrPort
	close()
}
