package demo

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

const demoQueueDepth = 1024

// Port is the port B listens on: its rdma_cm ServiceID is
// RDMA_PS_TCP | 7174, as for `rping -s -p 7174`.
const Port = 7174

// demoReadLimit is both sides' inbound and outbound read limit.
const demoReadLimit = 16

// CMServer is B's listener: each connect request is accepted with the QP
// the next phase handed it.
type CMServer struct {
	l        *ndk.Listener
	qps      chan *ndk.QP
	accepted chan acceptResult
}

type acceptResult struct {
	c   *ndk.Connector
	err error
}

// ListenCM listens on b at addr, accepting each connect request with
// the QP ConnectCM handed it and rejecting any other.
func ListenCM(ctx context.Context, b *Host, addr netip.AddrPort) (*CMServer, error) {
	s := &CMServer{qps: make(chan *ndk.QP, 1), accepted: make(chan acceptResult, 1)}
	var err error
	s.l, err = b.Adapter.CreateListener(func(c *ndk.Connector) {
		var qp *ndk.QP
		select {
		case qp = <-s.qps:
		default:
			c.Reject(nil) // a request the demo did not make
			c.Close()
			return
		}
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s.accepted <- acceptResult{c, c.Accept(actx, qp, demoReadLimit, demoReadLimit, nil, nil)}
	})
	if err != nil {
		return nil, err
	}
	if err := s.l.Listen(addr); err != nil {
		s.l.Close()
		return nil, err
	}
	return s, nil
}

// Connection is one phase's connection: a QP and a connector per side.
type Connection struct {
	qa, qb *ndk.QP
	ca, cb *ndk.Connector
}

// ConnectCM gives both hosts fresh CQs and QPs and connects them through
// the IB CM: A's Connector sends REQ to B's listener, which accepts (REP),
// and A completes (RTU).
func ConnectCM(ctx context.Context, a, b *Host, srv *CMServer) (*Connection, error) {
	for _, x := range []*Host{a, b} {
		if err := x.NewCQs(); err != nil {
			return nil, err
		}
	}
	cn := &Connection{}
	var err error
	if cn.qa, err = a.PD.CreateQP(demoQPConfig(a)); err != nil {
		return nil, err
	}
	if cn.qb, err = b.PD.CreateQP(demoQPConfig(b)); err != nil {
		cn.qa.Close()
		return nil, err
	}
	if cn.ca, err = a.Adapter.CreateConnector(); err != nil {
		cn.close()
		return nil, err
	}
	srv.qps <- cn.qb
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cn.ca.Connect(cctx, cn.qa, netip.AddrPort{}, srv.l.LocalAddress(), demoReadLimit, demoReadLimit, nil); err != nil {
		select {
		case <-srv.qps: // the request never reached the listener
		default:
		}
		cn.close()
		return nil, fmt.Errorf("connect to %v: %w", srv.l.LocalAddress(), err)
	}
	if err := cn.ca.CompleteConnect(nil); err != nil {
		cn.close()
		return nil, err
	}
	select {
	case r := <-srv.accepted:
		cn.cb = r.c
		if r.err != nil {
			cn.close()
			return nil, fmt.Errorf("accept: %w", r.err)
		}
	case <-cctx.Done():
		cn.close()
		return nil, fmt.Errorf("accept: %w", cctx.Err())
	}
	return cn, nil
}

// demoQPConfig is a phase's QP on x, on x's current CQs.
func demoQPConfig(x *Host) ndk.QPConfig {
	return ndk.QPConfig{ReceiveCQ: x.RCQ.cq, InitiatorCQ: x.ICQ.cq, ReceiveQueueDepth: demoQueueDepth,
		InitiatorQueueDepth: demoQueueDepth, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}
}

// Disconnect ends the connection from A (DREQ, answered by DREP) and
// closes both connectors and QPs.
func (cn *Connection) Disconnect(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := cn.ca.Disconnect(dctx)
	cn.close()
	if err != nil {
		return fmt.Errorf("disconnect: %w", err)
	}
	return nil
}

// QPs returns A's and B's QP.
func (cn *Connection) QPs() (a, b *ndk.QP) { return cn.qa, cn.qb }

// Close stops listening.
func (s *CMServer) Close() { s.l.Close() }

func (cn *Connection) close() {
	for _, c := range []*ndk.Connector{cn.ca, cn.cb} {
		if c != nil {
			c.Close()
			select {
			case <-c.Closed():
			case <-time.After(10 * time.Second):
			}
		}
	}
	for _, q := range []*ndk.QP{cn.qa, cn.qb} {
		if q != nil {
			q.Close()
		}
	}
}
