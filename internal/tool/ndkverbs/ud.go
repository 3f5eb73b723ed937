package ndkverbs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

var (
	_ verbs.UDConnector = (*Connector)(nil)
	_ verbs.UDListener  = (*Listener)(nil)
)

// udEndpoint is endpoint with a UD QP of rdma_cm's Q_Key.
func (d *Device) udEndpoint(q Depths) (*Endpoint, error) { return d.udEndpointQKey(q, ndk.RDMAUDPQKey) }

// udEndpointQKey is endpoint with a UD QP of Q_Key qkey, whose sends
// carry it.
func (d *Device) udEndpointQKey(q Depths, qkey uint32) (*Endpoint, error) {
	ep, err := d.newEndpoint(q, "create ud qp", func(cfg ndk.QPConfig) (*ndk.QP, error) {
		return d.PD.CreateUDQP(cfg, qkey)
	})
	if err == nil {
		ep.udQKey = qkey
	}
	return ep, err
}

// ConnectUD implements verbs.UDConnector: a new UD endpoint, prepared with
// p.Prepare, whose sends go to the UD QP that the peer's SIDR_REP names
// for port. A refusal is a *verbs.RejectError with reason 8.
func (c *Connector) ConnectUD(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	ep, err := c.Dev.udEndpoint(c.Depths)
	if err != nil {
		return nil, err
	}
	if p.Prepare != nil {
		if err := p.Prepare(ep); err != nil {
			ep.Close()
			return nil, fmt.Errorf("prepare endpoint: %w", err)
		}
	}
	dst := netip.AddrPortFrom(c.Peer, port)
	d, err := c.Dev.Adapter.ResolveUD(ctx, dst)
	if err != nil {
		ep.Close()
		if errors.Is(err, ndk.ErrConnectionRefused) {
			err = fmt.Errorf("%w: %w", &verbs.RejectError{Reason: verbs.RejectInvalidServiceID}, err)
		}
		return nil, fmt.Errorf("resolve the UD service at %v: %w", dst, err)
	}
	ep.ud = &d
	if p.UDAnnounce {
		if err := ep.announce(ctx); err != nil {
			ep.Close()
			return nil, err
		}
	}
	return ep, nil
}

// idAnnounce is the work request ID of the UD connection parameters'
// send and receive (perftest's wr_id 0).
const idAnnounce = 0

// announce sends perftest's UD connection parameters: 4 bytes, the
// immediate our QPN, signaled, and waits for the completion.
func (e *Endpoint) announce(ctx context.Context) error {
	buf, err := e.Alloc(4)
	if err != nil {
		return err
	}
	r, err := e.Register(buf, 0)
	if err != nil {
		return err
	}
	seg, _ := r.Seg(0, 4)
	if err := e.qp.SendToWithImmediate(uint64(idAnnounce), e.sge(seg), *e.ud, e.qp.QPN(), 0); err != nil {
		return fmt.Errorf("send the UD connection parameters: %w", err)
	}
	res, err := e.one(ctx, e.scq)
	switch {
	case err != nil:
		return fmt.Errorf("send the UD connection parameters: %w", err)
	case res.Status != ndk.StatusSuccess:
		return fmt.Errorf("send the UD connection parameters: %w", completionErr(&res))
	}
	return nil
}

// one waits for the next completion of cq.
func (e *Endpoint) one(ctx context.Context, cq *ndk.CQ) (ndk.ResultEx, error) {
	var r [1]ndk.ResultEx
	for cq.GetResultsEx(r[:]) == 0 {
		select {
		case <-ctx.Done():
			return r[0], ctx.Err()
		case <-e.dev.Adapter.Gone():
			return r[0], e.dev.Adapter.Err()
		case <-time.After(50 * time.Microsecond):
		}
	}
	return r[0], nil
}

// AcceptUD implements verbs.UDListener: a new UD endpoint, prepared with
// p.Prepare, serves the listener's address and port in rdma_cm's UDP
// port space until it closes; AcceptUD returns once a client's request
// was answered.
func (x *Listener) AcceptUD(ctx context.Context, p verbs.ConnParams) (verbs.Endpoint, error) {
	ep, err := x.dev.udEndpoint(x.depths)
	if err != nil {
		return nil, err
	}
	var grh verbs.Region
	if p.UDAnnounce {
		// The parameters' receive goes first, so that the datagram
		// lands in it and not in one of Prepare's (which may be shorter).
		buf, err := ep.Alloc(verbs.GRHLen + 4)
		if err == nil {
			grh, err = ep.Register(buf, verbs.AccessLocalWrite)
		}
		if err == nil {
			seg, _ := grh.Seg(0, verbs.GRHLen+4)
			err = ep.Receive(uint64(idAnnounce), seg)
		}
		if err != nil {
			ep.Close()
			return nil, fmt.Errorf("post the UD connection parameters' receive: %w", err)
		}
	}
	if p.Prepare != nil {
		if err := p.Prepare(ep); err != nil {
			ep.Close()
			return nil, fmt.Errorf("prepare endpoint: %w", err)
		}
	}
	beforeServeUD()
	svc, err := x.dev.Adapter.ServeUD(x.l.LocalAddress(), ep.qp)
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("serve UD on %v: %w", x.l.LocalAddress(), err)
	}
	ep.Connected(func() error { svc.Close(); return nil })
	if p.Served != nil {
		p.Served()
	}
	for svc.Answered() == 0 {
		select {
		case <-ctx.Done():
			ep.Close()
			return nil, fmt.Errorf("accept UD: %w", ctx.Err())
		case <-x.done:
			ep.Close()
			return nil, fmt.Errorf("accept UD: listener closed: %w", verbs.ErrInvalid)
		case <-time.After(time.Millisecond):
		}
	}
	if p.UDAnnounce {
		res, err := ep.one(ctx, ep.rcq)
		if err == nil && (res.Status != ndk.StatusSuccess || res.RequestContext != uint64(idAnnounce)) {
			err = fmt.Errorf("completion %+v: %w", res, verbs.ErrInvalid)
		}
		var d ndk.UDDestination
		if err == nil {
			d, err = x.dev.Adapter.UDReplyTo(grh.Buf[:verbs.GRHLen], uint32(res.TypeSpecificCompletionOutput), ep.qp.UDQKey())
		}
		if err != nil {
			ep.Close()
			return nil, fmt.Errorf("receive the UD connection parameters: %w", err)
		}
		ep.ud = &d
	}
	return ep, nil
}

// beforeServeUD runs in AcceptUD just before the service answers; a test
// delays it to show that a server's client never resolves before then.
var beforeServeUD = func() {}
