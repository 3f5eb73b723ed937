package ndk

import (
	"context"
	"errors"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The in-process provider's side of the UD extension (ud.go).

func (b *inprocPD) createUDQP(cfg QPConfig, qkey uint32) (*QP, error) {
	const op = "create ud qp"
	q, err := b.newQP(cfg, true)
	if err != nil {
		return nil, err
	}
	p, e := b.pd.adapter.provider(), q.be.(*inprocQP).rc
	if err := e.ActivateUD(rc.UDParams{
		Local: rc.Endpoint{IP: p.Address(), MAC: p.MAC(), QPN: e.QPN()}, QKey: qkey, PathMTU: p.PathMTU(),
	}); err != nil {
		_ = q.Close()
		return nil, &Error{Status: StatusInsufficientResources, Op: op, Err: err}
	}
	q.ud = &udInfo{qkey: qkey, mtu: e.UDPathMTU()}
	return q, nil
}

func (b *inprocAdapter) serveUD(addr netip.AddrPort, q *QP) (udServer, error) {
	const op = "serve ud"
	m := b.manager()
	switch {
	case m == nil:
		return nil, errorf(StatusNotSupported, op, "adapter has no connection management")
	case q == nil || q.ud == nil || q.adapter.be != b:
		return nil, errorf(StatusInvalidDeviceRequest, op, "not a UD QP of this adapter")
	}
	s, err := m.ServeUD(addr, q.QPN(), q.ud.qkey)
	if err != nil {
		return nil, cmError(op, err)
	}
	return s, nil
}

func (b *inprocAdapter) resolveUD(ctx context.Context, dst netip.AddrPort) (UDDestination, error) {
	const op = "resolve ud"
	m := b.manager()
	if m == nil {
		return UDDestination{}, errorf(StatusNotSupported, op, "adapter has no connection management")
	}
	path, err := b.prov.ResolvePath(netip.Addr{}, dst.Addr().Unmap())
	if err != nil {
		return UDDestination{}, cmError(op, err)
	}
	t, err := m.ResolveUD(ctx, path, dst, 0, 0)
	if err != nil {
		return UDDestination{}, cmError(op, err)
	}
	return UDDestination{IP: t.Path.RemoteIP, MAC: t.Path.RemoteMAC, QPN: t.QPN, QKey: t.QKey}, nil
}

func (b *inprocAdapter) nextHop(ip netip.Addr) (rocev2.MAC, error) {
	const op = "ud reply to"
	if b.prov == nil {
		return rocev2.MAC{}, errorf(StatusNotSupported, op, "adapter has no transport (use ndk.Open)")
	}
	path, err := b.prov.ResolvePath(netip.Addr{}, ip)
	if err != nil {
		return rocev2.MAC{}, cmError(op, err)
	}
	return path.RemoteMAC, nil
}

func (b *inprocQP) joinMulticast(group netip.Addr) error {
	if err := b.q.adapter.provider().JoinMulticast(b.rc, group); err != nil {
		return multicastError("join multicast", err)
	}
	return nil
}

func (b *inprocQP) leaveMulticast(group netip.Addr) error {
	if err := b.q.adapter.provider().LeaveMulticast(b.rc, group); err != nil {
		return multicastError("leave multicast", err)
	}
	return nil
}

// multicastError gives a provider's refusal its status.
func multicastError(op string, err error) error {
	st := StatusInsufficientResources // the kernel's or the steering map's room
	switch {
	case errors.Is(err, rc.ErrNotAttached):
		st = StatusInvalidParameter
	case errors.Is(err, rc.ErrBadState), errors.Is(err, inproc.ErrClosed):
		st = StatusInvalidHandle
	case errors.Is(err, rc.ErrBadConfig):
		st = StatusInvalidParameter
	}
	return &Error{Status: st, Op: op, Err: err}
}
