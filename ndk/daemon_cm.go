package ndk

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// daemonConnector is a daemon-backed connector (connectorBackend): the
// daemon's adapter runs the IB CM; the disconnect event comes back as an
// event message.
type daemonConnector struct {
	x    *Connector
	link *daemonLink
	h    uint32

	mu           sync.Mutex
	local, peer  netip.AddrPort
	onDisconnect func(reason uint32)

	disconnectedAt atomic.Bool // the peer's disconnect was delivered
}

// addrs takes the connector's addresses from the daemon's answer: local
// and peer, each empty while unknown.
func (rc *daemonConnector) addrs(local, peer string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if a, err := netip.ParseAddrPort(local); err == nil {
		rc.local = a
	}
	if a, err := netip.ParseAddrPort(peer); err == nil {
		rc.peer = a
	}
}

// newConnector makes the client's half of the daemon's connector h.
func (r *daemonLink) newConnector(h uint32, local, peer string) *Connector {
	c := &Connector{a: r.a, done: make(chan struct{})}
	rc := &daemonConnector{x: c, link: r, h: h}
	c.be = rc
	rc.addrs(local, peer)
	r.mu.Lock()
	r.connectors[h] = rc
	r.mu.Unlock()
	return c
}

func (r *daemonLink) createConnector() (*Connector, error) {
	m, err := tell(r, "create connector", &proto.CreateConnector{})
	if err != nil {
		return nil, err
	}
	return r.newConnector(m.H, m.Addr, m.Addr2), nil
}

// connect is Connect (se nil) and ConnectWithSharedEndpoint on a
// daemon-backed adapter.
func (rc *daemonConnector) connect(ctx context.Context, op string, qp *QP, src netip.AddrPort, se *SharedEndpoint, dst netip.AddrPort, ird, ord int, pdata []byte) error {
	c := rc.x
	if err := c.checkQP(op, qp); err != nil {
		return err
	}
	if len(pdata) > MaxCallerData {
		return errorf(StatusInvalidParameter, op, "%d bytes of private data exceed MaxCallerData %d", len(pdata), MaxCallerData)
	}
	req := &proto.Connect{H: rc.h, QP: qp.be.(*daemonQP).h, Addr2: dst.String(), IRD: ird, ORD: ord, Data: pdata, Opts: rc.retry()}
	switch {
	case se != nil:
		req.SE = se.be.(*daemonEndpoint).h
	case src.IsValid():
		req.Addr = src.String()
	}
	m, _, err := ask(rc.link, ctx, op, req)
	if err != nil {
		return err
	}
	rc.addrs(m.Addr, m.Addr2)
	c.bindQP(qp)
	return nil
}

func (rc *daemonConnector) completeConnect(onDisconnect func(DisconnectReason)) error {
	c := rc.x
	rc.mu.Lock()
	rc.onDisconnect = c.event(onDisconnect)
	rc.mu.Unlock()
	if _, err := tell(rc.link, "complete connect", &proto.CompleteConnect{H: rc.h}); err != nil {
		return err
	}
	if qp := c.QP(); qp != nil {
		qp.be.(*daemonQP).connectedAt.Store(true)
	}
	return nil
}

func (rc *daemonConnector) accept(ctx context.Context, qp *QP, ird, ord int, pdata []byte, onDisconnect func(DisconnectReason)) error {
	const op = "accept"
	c := rc.x
	if err := c.checkQP(op, qp); err != nil {
		return err
	}
	if len(pdata) > MaxCalleeData {
		return errorf(StatusInvalidParameter, op, "%d bytes of private data exceed MaxCalleeData %d", len(pdata), MaxCalleeData)
	}
	rc.mu.Lock()
	rc.onDisconnect = c.event(onDisconnect)
	rc.mu.Unlock()
	// The QP is connected once the daemon's is; a SEND may arrive before
	// Accept's reply, and receives were posted before.
	rq := qp.be.(*daemonQP)
	m, _, err := ask(rc.link, ctx, op, &proto.Accept{H: rc.h, QP: rq.h, IRD: ird, ORD: ord, Data: pdata, Opts: rc.retry()})
	if err != nil {
		return err
	}
	rc.addrs(m.Addr, m.Addr2)
	c.bindQP(qp)
	rq.connectedAt.Store(true)
	return nil
}

func (rc *daemonConnector) reject(privateData []byte) error {
	_, err := tell(rc.link, "reject", &proto.Reject{H: rc.h, Data: privateData})
	return err
}

func (rc *daemonConnector) disconnect(ctx context.Context, abortive bool) error {
	op := "disconnect"
	if abortive {
		op = "abortive disconnect"
	}
	_, _, err := ask(rc.link, ctx, op, &proto.Disconnect{H: rc.h, Abortive: abortive})
	return err
}

func (rc *daemonConnector) connectionData(buf []byte) (int, int, int, error) {
	const op = "get connection data"
	m, err := tell(rc.link, op, &proto.ConnData{H: rc.h})
	if err != nil {
		return 0, 0, 0, err
	}
	if len(buf) == 0 { // a size query
		return m.IRD, m.ORD, len(m.Data), nil
	}
	if len(m.Data) > len(buf) {
		return 0, 0, len(m.Data), errorf(StatusBufferTooSmall, op, "%d bytes of private data, buffer holds %d", len(m.Data), len(buf))
	}
	copy(buf, m.Data)
	return m.IRD, m.ORD, len(m.Data), nil
}

func (rc *daemonConnector) localAddress() netip.AddrPort {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.local
}

func (rc *daemonConnector) peerAddress() netip.AddrPort {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.peer
}

// retry carries SetRetryCounts to the daemon's connector.
func (rc *daemonConnector) retry() *proto.ConnOpts {
	r := rc.x.retryCounts()
	if r == nil {
		return nil
	}
	retry, rnr := int(r.Count), int(r.RNR)
	return &proto.ConnOpts{RetryCount: &retry, RNRRetry: &rnr}
}

// disconnected delivers the peer's disconnect, once, with the daemon's
// reason (DisconnectReason).
func (rc *daemonConnector) disconnected(reason uint32) {
	if rc.disconnectedAt.Swap(true) {
		return
	}
	rc.mu.Lock()
	f := rc.onDisconnect
	rc.mu.Unlock()
	if f != nil {
		f(reason)
	}
}

func (rc *daemonConnector) closed() {
	r := rc.link
	r.mu.Lock()
	delete(r.connectors, rc.h)
	r.mu.Unlock()
	rc.x.finishRemote()
}

func (c *Connector) finishRemote() {
	c.mu.Lock()
	c.cmClosed = true
	c.finishLocked()
	c.mu.Unlock()
}

func (rc *daemonConnector) close() {
	if _, err := tell(rc.link, "close connector", &proto.CloseConnector{H: rc.h}); err != nil {
		rc.x.finishRemote()
	}
}

// daemonEndpoint is a daemon-backed shared endpoint: the daemon's handle
// and the address it took.
type daemonEndpoint struct {
	link  *daemonLink
	h     uint32
	local netip.AddrPort
}

func (r *daemonLink) createSharedEndpoint(addr netip.AddrPort) (*SharedEndpoint, error) {
	m, err := tell(r, "create shared endpoint", &proto.CreateEndpoint{Addr: addr.String()})
	if err != nil {
		return nil, err
	}
	e := &daemonEndpoint{link: r, h: m.H}
	e.local, _ = netip.ParseAddrPort(m.Addr)
	return &SharedEndpoint{a: r.a, be: e}, nil
}

func (e *daemonEndpoint) localAddress() netip.AddrPort { return e.local }

func (e *daemonEndpoint) close() {
	_, _ = tell(e.link, "close shared endpoint", &proto.CloseEndpoint{H: e.h})
}

// daemonListener is a daemon-backed listener.
type daemonListener struct {
	x         *Listener
	link      *daemonLink
	h         uint32
	onConnect func(*Connector)
	mu        sync.Mutex
	local     netip.AddrPort
}

func (r *daemonLink) createListener(onConnect func(*Connector)) (*Listener, error) {
	m, err := tell(r, "create listener", &proto.CreateListener{})
	if err != nil {
		return nil, err
	}
	x := &Listener{a: r.a, done: make(chan struct{})}
	rl := &daemonListener{x: x, link: r, h: m.H, onConnect: onConnect}
	x.be = rl
	r.mu.Lock()
	r.listeners[m.H] = rl
	r.mu.Unlock()
	return x, nil
}

func (rl *daemonListener) incoming(m *proto.Message) {
	c := rl.link.newConnector(m.H2, m.Addr, m.Addr2)
	go rl.onConnect(c)
}

func (rl *daemonListener) listen(addr netip.AddrPort) error {
	m, err := tell(rl.link, "listen", &proto.Listen{H: rl.h, Addr: addr.String()})
	if err != nil {
		return err
	}
	if a, err := netip.ParseAddrPort(m.Addr); err == nil {
		rl.mu.Lock()
		rl.local = a
		rl.mu.Unlock()
	}
	return nil
}

func (rl *daemonListener) localAddress() netip.AddrPort {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.local
}

func (rl *daemonListener) controlConnectEvents(pause bool) {
	_, _ = tell(rl.link, "control connect events", &proto.PauseListener{H: rl.h, Pause: pause})
}

func (rl *daemonListener) close() {
	if _, err := tell(rl.link, "close listener", &proto.CloseListener{H: rl.h}); err != nil {
		rl.x.finishRemote()
	}
}

func (rl *daemonListener) closed() {
	r := rl.link
	r.mu.Lock()
	delete(r.listeners, rl.h)
	r.mu.Unlock()
	rl.x.finishRemote()
}

func (x *Listener) finishRemote() {
	x.mu.Lock()
	x.cmClosed = true
	x.finishLocked()
	x.mu.Unlock()
}
