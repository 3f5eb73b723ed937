package daemon

import (
	"context"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// dispatchCM carries out the connector, listener and shared endpoint
// requests: the daemon's adapter runs the IB CM, and the client's
// connectors, listeners and endpoints are its objects.
func (ss *session) dispatchCM(ctx context.Context, req *proto.Request) (*proto.Message, []int, error) {
	a := ss.srv.a
	switch req.Op {
	case proto.OpCreateConnector:
		c, err := a.CreateConnector()
		if err != nil {
			return nil, nil, err
		}
		return ss.addConnector(c)
	case proto.OpConnect:
		return ss.connect(ctx, req)
	case proto.OpCompleteConnect:
		c, err := lookup[*sConnector](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, c.c.CompleteConnectEx(ss.onDisconnect(c))
	case proto.OpAccept:
		c, err := lookup[*sConnector](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		q, err := lookup[*sQP](ss, req.QP)
		if err != nil {
			return nil, nil, err
		}
		if err := setRetry(c.c, req.Opts); err != nil {
			return nil, nil, err
		}
		c.qp.Store(q)
		if err := c.c.AcceptEx(ctx, q.qp, req.IRD, req.ORD, req.Data, ss.onDisconnect(c)); err != nil {
			return nil, nil, err
		}
		return connMessage(c.c), nil, nil
	case proto.OpReject:
		c, err := lookup[*sConnector](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, c.c.Reject(req.Data)
	case proto.OpDisconnect:
		c, err := lookup[*sConnector](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		err = c.c.DisconnectEx(ctx, req.Abortive)
		ss.syncState(c)
		return nil, nil, err
	case proto.OpConnData:
		c, err := lookup[*sConnector](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		buf := make([]byte, max(ndk.MaxCallerData, ndk.MaxCalleeData))
		ird, ord, n, err := c.c.GetConnectionData(buf)
		if err != nil {
			return nil, nil, err
		}
		m := connMessage(c.c)
		m.IRD, m.ORD, m.Data = ird, ord, buf[:n]
		return m, nil, nil
	case proto.OpCloseConnector:
		c, err := lookup[*sConnector](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		c.c.Close() // addConnector's watcher reports the end
		return nil, nil, nil
	case proto.OpCreateEndpoint:
		addr, err := netip.ParseAddrPort(req.Addr)
		if err != nil {
			return nil, nil, statusErr(ndk.StatusInvalidAddress, "endpoint address %q: %v", req.Addr, err)
		}
		se, err := a.CreateSharedEndpoint(addr)
		if err != nil {
			return nil, nil, err
		}
		e := &sEndpoint{se: se}
		if e.h, err = ss.add(e); err != nil {
			se.Close()
			return nil, nil, err
		}
		return &proto.Message{H: e.h, Addr: se.LocalAddress().String()}, nil, nil
	case proto.OpCloseEndpoint:
		e, err := lookup[*sEndpoint](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		ss.drop(e.h)
		e.se.Close()
		return nil, nil, nil
	case proto.OpCreateListener, proto.OpListen, proto.OpPauseListener, proto.OpCloseListener:
		return ss.dispatchListener(req)
	}
	return nil, nil, statusErr(ndk.StatusInvalidDeviceRequest, "unknown operation %q", req.Op)
}

// dispatchListener carries out the listener requests of dispatchCM.
func (ss *session) dispatchListener(req *proto.Request) (*proto.Message, []int, error) {
	a := ss.srv.a
	switch req.Op {
	case proto.OpCreateListener:
		l := &sListener{}
		var err error
		l.l, err = a.CreateListener(func(c *ndk.Connector) {
			m, _, err := ss.addConnector(c)
			if err != nil {
				_ = c.Reject(nil)
				c.Close()
				return
			}
			m.Ev, m.H2, m.H = proto.EvIncoming, m.H, l.h
			ss.send(m)
		})
		if err != nil {
			return nil, nil, err
		}
		if l.h, err = ss.add(l); err != nil {
			l.l.Close()
			return nil, nil, err
		}
		return &proto.Message{H: l.h}, nil, nil
	case proto.OpListen:
		l, err := lookup[*sListener](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		addr, err := netip.ParseAddrPort(req.Addr)
		if err != nil {
			return nil, nil, statusErr(ndk.StatusInvalidAddress, "listen address %q: %v", req.Addr, err)
		}
		if err := l.l.Listen(addr); err != nil {
			return nil, nil, err
		}
		return &proto.Message{Addr: l.l.LocalAddress().String()}, nil, nil
	case proto.OpPauseListener:
		l, err := lookup[*sListener](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		l.l.ControlConnectEvents(req.Pause)
		return nil, nil, nil
	case proto.OpCloseListener:
		l, err := lookup[*sListener](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		l.l.Close()
		ss.whenClosed(l.l.Closed(), l.h, proto.EvListenerClosed)
		return nil, nil, nil
	}
	return nil, nil, statusErr(ndk.StatusInvalidDeviceRequest, "unknown operation %q", req.Op)
}

// addConnector gives c a handle, and tells the client when c's close
// completes: after the client's close request, and after the closes the
// daemon's adapter makes itself (a Connect or Accept whose context ended
// abandons its connector).
func (ss *session) addConnector(c *ndk.Connector) (*proto.Message, []int, error) {
	x := &sConnector{c: c}
	var err error
	if x.h, err = ss.add(x); err != nil {
		c.Close()
		return nil, nil, err
	}
	go func() {
		select {
		case <-c.Closed():
			ss.drop(x.h)
			ss.event(proto.EvConnectorClosed, x.h, ndk.StatusSuccess)
		case <-ss.ctx.Done():
		}
	}()
	m := connMessage(c)
	m.H = x.h
	return m, nil, nil
}

func connMessage(c *ndk.Connector) *proto.Message {
	m := &proto.Message{}
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
func (ss *session) connect(ctx context.Context, req *proto.Request) (*proto.Message, []int, error) {
	c, err := lookup[*sConnector](ss, req.H)
	if err != nil {
		return nil, nil, err
	}
	q, err := lookup[*sQP](ss, req.QP)
	if err != nil {
		return nil, nil, err
	}
	dst, err := netip.ParseAddrPort(req.Addr2)
	if err != nil {
		return nil, nil, statusErr(ndk.StatusInvalidAddress, "destination %q: %v", req.Addr2, err)
	}
	var src netip.AddrPort
	if req.Addr != "" {
		if src, err = netip.ParseAddrPort(req.Addr); err != nil {
			return nil, nil, statusErr(ndk.StatusInvalidAddress, "source %q: %v", req.Addr, err)
		}
	}
	if err := setRetry(c.c, req.Opts); err != nil {
		return nil, nil, err
	}
	c.qp.Store(q)
	if req.SE != 0 {
		e, err := lookup[*sEndpoint](ss, req.SE)
		if err != nil {
			return nil, nil, err
		}
		err = c.c.ConnectWithSharedEndpoint(ctx, q.qp, e.se, dst, req.IRD, req.ORD, req.Data)
		if err != nil {
			return nil, nil, err
		}
	} else if err := c.c.Connect(ctx, q.qp, src, dst, req.IRD, req.ORD, req.Data); err != nil {
		return nil, nil, err
	}
	return connMessage(c.c), nil, nil
}
