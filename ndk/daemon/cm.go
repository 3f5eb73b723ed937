package daemon

import (
	"context"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// dispatchCM carries out the connector and listener requests: the daemon's
// adapter runs the IB CM, and the client's connectors and listeners are
// its objects.
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
		if req.Endpoint != 0 {
			se, err := lookup[*sEndpoint](ss, req.Endpoint)
			if err != nil {
				return nil, nil, err
			}
			err = c.c.ConnectWithSharedEndpoint(ctx, q.qp, se.se, dst, req.IRD, req.ORD, req.Data)
			if err != nil {
				return nil, nil, err
			}
			return connMessage(c.c), nil, nil
		}
		if err := c.c.Connect(ctx, q.qp, src, dst, req.IRD, req.ORD, req.Data); err != nil {
			return nil, nil, err
		}
		return connMessage(c.c), nil, nil
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
		return nil, nil, c.c.DisconnectEx(ctx, req.Abortive)
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
		c.c.Close()
		ss.whenClosed(c.c.Closed(), c.h, proto.EvConnectorClosed)
		return nil, nil, nil
	case proto.OpCreateListener, proto.OpListen, proto.OpPauseListener, proto.OpCloseListener:
		return ss.dispatchListener(req)
	case proto.OpCreateEndpoint:
		addr, err := netip.ParseAddrPort(req.Addr)
		if err != nil {
			return nil, nil, statusErr(ndk.StatusInvalidAddress, "endpoint address %q: %v", req.Addr, err)
		}
		se, err := a.CreateSharedEndpoint(addr)
		if err != nil {
			return nil, nil, err
		}
		x := &sEndpoint{se: se}
		if x.h, err = ss.add(x); err != nil {
			se.Close()
			return nil, nil, err
		}
		return &proto.Message{H: x.h, Addr: se.LocalAddress().String()}, nil, nil
	case proto.OpCloseEndpoint:
		x, err := lookup[*sEndpoint](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		x.se.Close()
		ss.drop(x.h)
		return nil, nil, nil
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

func (ss *session) addConnector(c *ndk.Connector) (*proto.Message, []int, error) {
	x := &sConnector{c: c}
	var err error
	if x.h, err = ss.add(x); err != nil {
		c.Close()
		return nil, nil, err
	}
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
		ss.send(&proto.Message{Ev: proto.EvDisconnect, H: c.h, Reason: uint32(r)})
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
