package daemon

import (
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// The connector, listener and shared endpoint requests: the daemon's
// adapter runs the IB CM, and the client's connectors, listeners and
// endpoints are its objects.

func (ss *session) createConnector(*call, *proto.CreateConnector) (*proto.ConnReply, error) {
	c, err := ss.srv.a.CreateConnector()
	if err != nil {
		return nil, err
	}
	return ss.addConnector(c)
}

func (ss *session) completeConnect(_ *call, r *proto.CompleteConnect) (*proto.None, error) {
	c, err := lookup[*sConnector](ss, r.H)
	if err != nil {
		return nil, err
	}
	return nil, c.c.CompleteConnectEx(ss.onDisconnect(c))
}

func (ss *session) accept(cl *call, r *proto.Accept) (*proto.ConnReply, error) {
	c, err := lookup[*sConnector](ss, r.H)
	if err != nil {
		return nil, err
	}
	q, err := lookup[*sQP](ss, r.QP)
	if err != nil {
		return nil, err
	}
	if err := setRetry(c.c, r.Opts); err != nil {
		return nil, err
	}
	c.qp.Store(q)
	if err := c.c.AcceptEx(cl.ctx, q.qp, r.IRD, r.ORD, r.Data, ss.onDisconnect(c)); err != nil {
		return nil, err
	}
	return connReply(c.c), nil
}

func (ss *session) reject(_ *call, r *proto.Reject) (*proto.None, error) {
	c, err := lookup[*sConnector](ss, r.H)
	if err != nil {
		return nil, err
	}
	return nil, c.c.Reject(r.Data)
}

func (ss *session) disconnect(cl *call, r *proto.Disconnect) (*proto.None, error) {
	c, err := lookup[*sConnector](ss, r.H)
	if err != nil {
		return nil, err
	}
	err = c.c.DisconnectEx(cl.ctx, r.Abortive)
	ss.syncState(c)
	return nil, err
}

func (ss *session) connData(_ *call, r *proto.ConnData) (*proto.ConnReply, error) {
	c, err := lookup[*sConnector](ss, r.H)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, max(ndk.MaxCallerData, ndk.MaxCalleeData))
	ird, ord, n, err := c.c.GetConnectionData(buf)
	if err != nil {
		return nil, err
	}
	m := connReply(c.c)
	m.IRD, m.ORD, m.Data = ird, ord, buf[:n]
	return m, nil
}

func (ss *session) closeConnector(_ *call, r *proto.CloseConnector) (*proto.None, error) {
	c, err := lookup[*sConnector](ss, r.H)
	if err != nil {
		return nil, err
	}
	c.c.Close() // addConnector's watcher reports the end
	return nil, nil
}

func (ss *session) createEndpoint(_ *call, r *proto.CreateEndpoint) (*proto.AddrReply, error) {
	addr, err := netip.ParseAddrPort(r.Addr)
	if err != nil {
		return nil, statusErr(ndk.StatusInvalidAddress, "endpoint address %q: %v", r.Addr, err)
	}
	se, err := ss.srv.a.CreateSharedEndpoint(addr)
	if err != nil {
		return nil, err
	}
	e := &sEndpoint{se: se}
	if e.h, err = ss.add(e); err != nil {
		se.Close()
		return nil, err
	}
	return &proto.AddrReply{H: e.h, Addr: se.LocalAddress().String()}, nil
}

func (ss *session) closeEndpoint(_ *call, r *proto.CloseEndpoint) (*proto.None, error) {
	e, err := lookup[*sEndpoint](ss, r.H)
	if err != nil {
		return nil, err
	}
	ss.drop(e.h)
	e.se.Close()
	return nil, nil
}

func (ss *session) createListener(*call, *proto.CreateListener) (*proto.Handle, error) {
	l := &sListener{}
	var err error
	l.l, err = ss.srv.a.CreateListener(func(c *ndk.Connector) {
		r, err := ss.addConnector(c)
		if err != nil {
			_ = c.Reject(nil)
			c.Close()
			return
		}
		ss.send(&proto.Message{Ev: proto.EvIncoming, H: l.h, H2: r.H, Addr: r.Addr, Addr2: r.Addr2})
	})
	if err != nil {
		return nil, err
	}
	if l.h, err = ss.add(l); err != nil {
		l.l.Close()
		return nil, err
	}
	return &proto.Handle{H: l.h}, nil
}

func (ss *session) listen(_ *call, r *proto.Listen) (*proto.AddrReply, error) {
	l, err := lookup[*sListener](ss, r.H)
	if err != nil {
		return nil, err
	}
	addr, err := netip.ParseAddrPort(r.Addr)
	if err != nil {
		return nil, statusErr(ndk.StatusInvalidAddress, "listen address %q: %v", r.Addr, err)
	}
	if err := l.l.Listen(addr); err != nil {
		return nil, err
	}
	return &proto.AddrReply{Addr: l.l.LocalAddress().String()}, nil
}

func (ss *session) pauseListener(_ *call, r *proto.PauseListener) (*proto.None, error) {
	l, err := lookup[*sListener](ss, r.H)
	if err != nil {
		return nil, err
	}
	l.l.ControlConnectEvents(r.Pause)
	return nil, nil
}

func (ss *session) closeListener(_ *call, r *proto.CloseListener) (*proto.None, error) {
	l, err := lookup[*sListener](ss, r.H)
	if err != nil {
		return nil, err
	}
	l.l.Close()
	ss.whenClosed(l.l.Closed(), l.h, proto.EvListenerClosed)
	return nil, nil
}

// addConnector gives c a handle, and tells the client when c's close
// completes: after the client's close request, and after the closes the
// daemon's adapter makes itself (a Connect or Accept whose context ended
// abandons its connector).
func (ss *session) addConnector(c *ndk.Connector) (*proto.ConnReply, error) {
	x := &sConnector{c: c}
	var err error
	if x.h, err = ss.add(x); err != nil {
		c.Close()
		return nil, err
	}
	go func() {
		select {
		case <-c.Closed():
			ss.drop(x.h)
			ss.event(proto.EvConnectorClosed, x.h, ndk.StatusSuccess)
		case <-ss.ctx.Done():
		}
	}()
	m := connReply(c)
	m.H = x.h
	return m, nil
}

func connReply(c *ndk.Connector) *proto.ConnReply {
	m := &proto.ConnReply{}
	if a := c.LocalAddress(); a.IsValid() {
		m.Addr = a.String()
	}
	if a := c.PeerAddress(); a.IsValid() {
		m.Addr2 = a.String()
	}
	return m
}

func (ss *session) onDisconnect(c *sConnector) func(ndk.DisconnectReason) {
	return func(r ndk.DisconnectReason) {
		ss.syncState(c)
		ss.send(&proto.Message{Ev: proto.EvDisconnect, H: c.h, Reason: uint32(r)})
	}
}

// syncState publishes the state of c's QP before the client hears of a
// disconnect, so that QP.Connected agrees with it, as in process.
func (ss *session) syncState(c *sConnector) {
	if q := c.qp.Load(); q != nil {
		ss.relay.syncState(q)
	}
}

// setRetry applies a client's Connector.SetRetryCounts, which connect and
// accept carry in Opts.
func setRetry(c *ndk.Connector, o *proto.ConnOpts) error {
	if o == nil || o.RetryCount == nil || o.RNRRetry == nil {
		return nil
	}
	return c.SetRetryCounts(*o.RetryCount, *o.RNRRetry)
}

// connect is NdkConnect (or NdkConnectWithSharedEndpoint, req.SE) of a
// client's connector and QP.
func (ss *session) connect(cl *call, req *proto.Connect) (*proto.ConnReply, error) {
	ctx := cl.ctx
	c, err := lookup[*sConnector](ss, req.H)
	if err != nil {
		return nil, err
	}
	q, err := lookup[*sQP](ss, req.QP)
	if err != nil {
		return nil, err
	}
	dst, err := netip.ParseAddrPort(req.Addr2)
	if err != nil {
		return nil, statusErr(ndk.StatusInvalidAddress, "destination %q: %v", req.Addr2, err)
	}
	var src netip.AddrPort
	if req.Addr != "" {
		if src, err = netip.ParseAddrPort(req.Addr); err != nil {
			return nil, statusErr(ndk.StatusInvalidAddress, "source %q: %v", req.Addr, err)
		}
	}
	if err := setRetry(c.c, req.Opts); err != nil {
		return nil, err
	}
	c.qp.Store(q)
	if req.SE != 0 {
		e, err := lookup[*sEndpoint](ss, req.SE)
		if err != nil {
			return nil, err
		}
		err = c.c.ConnectWithSharedEndpoint(ctx, q.qp, e.se, dst, req.IRD, req.ORD, req.Data)
		if err != nil {
			return nil, err
		}
	} else if err := c.c.Connect(ctx, q.qp, src, dst, req.IRD, req.ORD, req.Data); err != nil {
		return nil, err
	}
	return connReply(c.c), nil
}
