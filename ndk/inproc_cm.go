package ndk

import (
	"context"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
)

// The in-process provider's connection objects (backend.go): the IB CM of
// ndk/internal/cm, which the provider runs on QP1.

// inprocConnector is a connector of the adapter's own CM.
type inprocConnector struct {
	x *Connector
	c *cm.Connector
}

// forCM returns the CM's handle on qp, a QP of the in-process provider
// (checkQP made sure it is the connector's adapter's).
func forCM(qp *QP) cm.QP {
	return qp.adapter.provider().ConnectionQP(qp.be.(*inprocQP).rc, qp.psn)
}

func (b *inprocConnector) connect(ctx context.Context, op string, qp *QP, src netip.AddrPort, se *SharedEndpoint, dst netip.AddrPort,
	inbound, outbound int, privateData []byte) error {
	c := b.x
	if err := c.checkQP(op, qp); err != nil {
		return err
	}
	in, out, err := c.readLimits(op, inbound, outbound)
	if err != nil {
		return err
	}
	if len(privateData) > MaxCallerData {
		return errorf(StatusInvalidParameter, op, "%d bytes of private data exceed MaxCallerData %d", len(privateData), MaxCallerData)
	}
	if !dst.IsValid() || dst.Port() == 0 {
		return errorf(StatusInvalidAddress, op, "destination %v needs an address and a port", dst)
	}
	if se != nil {
		src = se.LocalAddress()
	}
	path, err := b.resolvePath(ctx, op, src.Addr(), dst.Addr())
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	p := cm.ConnectParams{InboundReadLimit: in, OutboundReadLimit: out, PrivateData: privateData, Retry: c.retryCounts()}
	cb := func(err error) { done <- err }
	if se != nil {
		err = b.c.ConnectWithSharedEndpoint(forCM(qp), path, se.be.(*inprocEndpoint).se, dst, p, cb)
	} else {
		err = b.c.Connect(forCM(qp), path, src, dst, p, cb)
	}
	if err != nil {
		return cmError(op, err)
	}
	c.bindQP(qp)
	return c.wait(ctx, op, done, true)
}

// resolvePath resolves the route and the next hop's MAC, or gives up when
// ctx ends: neighbour resolution may wait seconds for an answer that never
// comes, and the caller's deadline or cancellation comes first. The
// abandoned lookup ends on its own (the resolver's NeighbourTimeout), and
// the connector is closed as for any abandoned Connect.
func (b *inprocConnector) resolvePath(ctx context.Context, op string, src, dst netip.Addr) (cm.PathInfo, error) {
	type result struct {
		path cm.PathInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		path, err := b.x.a.provider().ResolvePath(src, dst)
		done <- result{path, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return r.path, cmError(op, r.err)
		}
		return r.path, nil
	case <-ctx.Done():
		b.x.Close() // as for an abandoned Connect (see wait)
		return cm.PathInfo{}, &Error{Status: StatusCancelled, Op: op, Detail: "context ended while resolving the path to " + dst.String(), Err: ctx.Err()}
	}
}

func (b *inprocConnector) completeConnect(onDisconnect func(DisconnectReason)) error {
	return cmError("complete connect", b.c.CompleteConnectEx(b.x.event(onDisconnect)))
}

func (b *inprocConnector) accept(ctx context.Context, qp *QP, inboundReadLimit, outboundReadLimit int, privateData []byte, onDisconnect func(DisconnectReason)) error {
	const op = "accept"
	c := b.x
	if err := c.checkQP(op, qp); err != nil {
		return err
	}
	in, out, err := c.readLimits(op, inboundReadLimit, outboundReadLimit)
	if err != nil {
		return err
	}
	if len(privateData) > MaxCalleeData {
		return errorf(StatusInvalidParameter, op, "%d bytes of private data exceed MaxCalleeData %d", len(privateData), MaxCalleeData)
	}
	done := make(chan error, 1)
	p := cm.AcceptParams{InboundReadLimit: in, OutboundReadLimit: out, PrivateData: privateData, Retry: c.retryCounts()}
	if err := b.c.AcceptEx(forCM(qp), p, c.event(onDisconnect), func(err error) { done <- err }); err != nil {
		return cmError(op, err)
	}
	c.bindQP(qp)
	return c.wait(ctx, op, done, true)
}

func (b *inprocConnector) reject(privateData []byte) error {
	return cmError("reject", b.c.Reject(privateData))
}

func (b *inprocConnector) disconnect(ctx context.Context, abortive bool) error {
	op := "disconnect"
	done := make(chan error, 1)
	cb := func(err error) { done <- err }
	var err error
	if abortive {
		op = "abortive disconnect"
		err = b.c.Abort(cb)
	} else {
		err = b.c.Disconnect(cb)
	}
	if err != nil {
		return cmError(op, err)
	}
	return b.x.wait(ctx, op, done, false)
}

func (b *inprocConnector) connectionData(buf []byte) (inboundReadLimit, outboundReadLimit, size int, err error) {
	const op = "get connection data"
	d, err := b.c.ConnectionData()
	if err != nil {
		return 0, 0, 0, cmError(op, err)
	}
	size = len(d.PrivateData)
	if len(buf) == 0 {
		return int(d.InboundReadLimit), int(d.OutboundReadLimit), size, nil
	}
	if len(buf) < size {
		return 0, 0, size, errorf(StatusBufferTooSmall, op, "%d bytes of private data, buffer holds %d", size, len(buf))
	}
	copy(buf, d.PrivateData)
	return int(d.InboundReadLimit), int(d.OutboundReadLimit), size, nil
}

func (b *inprocConnector) localAddress() netip.AddrPort { return b.c.LocalAddr() }

func (b *inprocConnector) peerAddress() netip.AddrPort { return b.c.PeerAddr() }

func (b *inprocConnector) close() {
	if b.c.Close(b.x.cmCloseDone) {
		b.x.cmCloseDone()
	}
}

// inprocListener is a listener of the adapter's own CM.
type inprocListener struct {
	x *Listener
	l *cm.Listener
}

// connectEvent runs on the CM's goroutine: it wraps the request in a
// Connector and hands it over on a goroutine of its own, so that the
// consumer may call Accept, which waits for the CM's next MAD.
func (b *inprocListener) connectEvent(a *inprocAdapter, cc *cm.Connector, onConnect func(*Connector)) {
	x := b.x
	c, err := a.newConnector(cc)
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

func (b *inprocListener) listen(addr netip.AddrPort) error {
	return cmError("listen", b.l.Listen(addr))
}

func (b *inprocListener) localAddress() netip.AddrPort { return b.l.LocalAddr() }

func (b *inprocListener) controlConnectEvents(pause bool) { b.l.ControlConnectEvents(pause) }

func (b *inprocListener) close() {
	if b.l.Close(b.x.cmCloseDone) {
		b.x.cmCloseDone()
	}
}

// inprocEndpoint is a shared endpoint of the adapter's own CM.
type inprocEndpoint struct {
	x  *SharedEndpoint
	se *cm.SharedEndpoint
}

func (b *inprocEndpoint) localAddress() netip.AddrPort { return b.se.LocalAddr() }

func (b *inprocEndpoint) close() {
	x := b.x
	b.se.Close()
	x.a.conns.forget(func() { delete(x.a.conns.endpoints, x) })
}
