package ndk

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// daemonConnector is a daemon-backed connector: the daemon's adapter runs
// the IB CM; the disconnect event comes back as an event message.
type daemonConnector struct {
	h uint32

	mu           sync.Mutex
	local, peer  netip.AddrPort
	onDisconnect func(reason uint32)

	disconnectedAt atomic.Bool // the peer's disconnect was delivered
}

func (rc *daemonConnector) addrs(m *proto.Message) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if a, err := netip.ParseAddrPort(m.Addr); err == nil {
		rc.local = a
	}
	if a, err := netip.ParseAddrPort(m.Addr2); err == nil {
		rc.peer = a
	}
}

func (r *daemonLink) newConnector(a *Adapter, m *proto.Message) *Connector {
	c := &Connector{a: a, r: &daemonConnector{h: m.H}, done: make(chan struct{})}
	c.r.addrs(m)
	r.mu.Lock()
	r.connectors[m.H] = c
	r.mu.Unlock()
	return c
}

func (r *daemonLink) createConnector(a *Adapter) (*Connector, error) {
	m, err := r.do("create connector", &proto.Request{Op: proto.OpCreateConnector})
	if err != nil {
		return nil, err
	}
	return r.newConnector(a, m), nil
}

// daemonConnect is Connect (se nil) and ConnectWithSharedEndpoint on a
// daemon-backed adapter.
func (c *Connector) daemonConnect(ctx context.Context, op string, qp *QP, src netip.AddrPort, se *SharedEndpoint, dst netip.AddrPort, ird, ord int, pdata []byte) error {
	if err := c.checkQP(op, qp); err != nil {
		return err
	}
	if len(pdata) > MaxCallerData {
		return errorf(StatusInvalidParameter, op, "%d bytes of private data exceed MaxCallerData %d", len(pdata), MaxCallerData)
	}
	req := &proto.Request{Op: proto.OpConnect, H: c.r.h, QP: qp.r.h, Addr2: dst.String(), IRD: ird, ORD: ord, Data: pdata, Opts: c.daemonRetry()}
	switch {
	case se != nil:
		req.SE = se.rh
	case src.IsValid():
		req.Addr = src.String()
	}
	if se != nil {
		req.SE = se.rh
	}
	m, _, err := c.a.daemon.call(ctx, op, req)
	if err != nil {
		return err
	}
	c.r.addrs(m)
	c.bindQP(qp)
	return nil
}

func (c *Connector) daemonCompleteConnect(onDisconnect func(DisconnectReason)) error {
	c.r.mu.Lock()
	c.r.onDisconnect = c.event(onDisconnect)
	c.r.mu.Unlock()
	if _, err := c.a.daemon.do("complete connect", &proto.Request{Op: proto.OpCompleteConnect, H: c.r.h}); err != nil {
		return err
	}
	if qp := c.QP(); qp != nil {
		qp.r.connected.Store(true)
	}
	return nil
}

func (c *Connector) daemonAccept(ctx context.Context, qp *QP, ird, ord int, pdata []byte, onDisconnect func(DisconnectReason)) error {
	const op = "accept"
	if err := c.checkQP(op, qp); err != nil {
		return err
	}
	if len(pdata) > MaxCalleeData {
		return errorf(StatusInvalidParameter, op, "%d bytes of private data exceed MaxCalleeData %d", len(pdata), MaxCalleeData)
	}
	c.r.mu.Lock()
	c.r.onDisconnect = c.event(onDisconnect)
	c.r.mu.Unlock()
	// The QP is connected once the daemon's is; a SEND may arrive before
	// Accept's reply, and receives were posted before.
	m, _, err := c.a.daemon.call(ctx, op, &proto.Request{Op: proto.OpAccept, H: c.r.h, QP: qp.r.h, IRD: ird, ORD: ord, Data: pdata, Opts: c.daemonRetry()})
	if err != nil {
		return err
	}
	c.r.addrs(m)
	c.bindQP(qp)
	qp.r.connected.Store(true)
	return nil
}

func (c *Connector) daemonConnData(buf []byte) (int, int, int, error) {
	const op = "get connection data"
	m, err := c.a.daemon.do(op, &proto.Request{Op: proto.OpConnData, H: c.r.h})
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

// daemonRetry carries SetRetryCounts to the daemon's connector.
func (c *Connector) daemonRetry() *proto.ConnOpts {
	r := c.retryCounts()
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

func (rc *daemonConnector) closed(r *daemonLink, c *Connector) {
	r.mu.Lock()
	delete(r.connectors, rc.h)
	r.mu.Unlock()
	c.finishRemote()
}

func (c *Connector) finishRemote() {
	c.mu.Lock()
	c.cmClosed = true
	c.finishLocked()
	c.mu.Unlock()
}

func (c *Connector) daemonClose() {
	if _, err := c.a.daemon.do("close connector", &proto.Request{Op: proto.OpCloseConnector, H: c.r.h}); err != nil {
		c.finishRemote()
	}
}

func (r *daemonLink) createSharedEndpoint(a *Adapter, addr netip.AddrPort) (*SharedEndpoint, error) {
	m, err := r.do("create shared endpoint", &proto.Request{Op: proto.OpCreateEndpoint, Addr: addr.String()})
	if err != nil {
		return nil, err
	}
	x := &SharedEndpoint{a: a, rh: m.H}
	x.local, _ = netip.ParseAddrPort(m.Addr)
	return x, nil
}

// daemonListener is a daemon-backed listener.
type daemonListener struct {
	h         uint32
	onConnect func(*Connector)
	mu        sync.Mutex
	local     netip.AddrPort
}

func (r *daemonLink) createListener(a *Adapter, onConnect func(*Connector)) (*Listener, error) {
	m, err := r.do("create listener", &proto.Request{Op: proto.OpCreateListener})
	if err != nil {
		return nil, err
	}
	x := &Listener{a: a, r: &daemonListener{h: m.H, onConnect: onConnect}, done: make(chan struct{})}
	r.mu.Lock()
	r.listeners[m.H] = x
	r.mu.Unlock()
	return x, nil
}

func (rl *daemonListener) incoming(r *daemonLink, m *proto.Message) {
	c := &Connector{a: r.a, r: &daemonConnector{h: m.H2}, done: make(chan struct{})}
	c.r.addrs(m)
	r.mu.Lock()
	r.connectors[m.H2] = c
	r.mu.Unlock()
	go rl.onConnect(c)
}

func (x *Listener) daemonListen(addr netip.AddrPort) error {
	m, err := x.a.daemon.do("listen", &proto.Request{Op: proto.OpListen, H: x.r.h, Addr: addr.String()})
	if err != nil {
		return err
	}
	if a, err := netip.ParseAddrPort(m.Addr); err == nil {
		x.r.mu.Lock()
		x.r.local = a
		x.r.mu.Unlock()
	}
	return nil
}

func (rl *daemonListener) closed(r *daemonLink, x *Listener) {
	r.mu.Lock()
	delete(r.listeners, rl.h)
	r.mu.Unlock()
	x.finishRemote()
}

func (x *Listener) finishRemote() {
	x.mu.Lock()
	x.cmClosed = true
	x.finishLocked()
	x.mu.Unlock()
}
