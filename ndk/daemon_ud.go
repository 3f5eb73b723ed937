package ndk

import (
	"context"
	"net"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The daemon-backed provider's side of the UD extension (ud.go). A UD QP
// is a daemon QP like an RC one, its rings in a segment of its own; each
// SEND's record carries its destination (proto.UDDest), and the daemon's
// QP sends it there. Receives, and their completions with the sender's
// QPN, the immediate and the GRH written into the client's buffer, take
// the RC QP's path unchanged. SIDR runs on the daemon's CM.

func (b *daemonPD) createUDQP(cfg QPConfig, qkey uint32) (*QP, error) {
	const op = "create ud qp"
	pd := b.pd
	if err := holdSuccessor(pd, cfg.ReceiveCQ, cfg.InitiatorCQ); err != nil {
		return nil, &Error{Status: StatusInvalidHandle, Op: op, Err: err}
	}
	ud := &udCreate{qkey: qkey}
	q, err := b.newQP(cfg, ud)
	if err != nil {
		releaseSuccessor(pd, cfg.ReceiveCQ, cfg.InitiatorCQ)
		return nil, err
	}
	q.rcq, q.icq, q.done = cfg.ReceiveCQ, cfg.InitiatorCQ, make(chan struct{})
	if ud.maxMessage == 0 {
		_ = q.Close()
		return nil, errorf(StatusInternalError, op, "daemon sent no UD datagram size")
	}
	q.ud = &udInfo{qkey: qkey, mtu: ud.maxMessage}
	// A UD QP is ready at once: nothing connects it.
	q.be.(*daemonQP).connectedAt.Store(true)
	return q, nil
}

// udCreate is what newQP does differently for a UD QP: the create_qp
// fields it sets, and what the reply adds (QPReply.MaxMessage). A nil
// *udCreate is an RC QP's.
type udCreate struct {
	qkey       uint32
	maxMessage uint32
}

func (u *udCreate) request(req *proto.CreateQP) {
	if u != nil {
		req.UD, req.QKey = true, u.qkey
	}
}

func (u *udCreate) replied(m *proto.QPReply) {
	if u != nil {
		u.maxMessage = m.MaxMessage
	}
}

// checkUD is the engine's post-time check of a UD QP's request (rc's
// checkUD), made in the client as the in-process post makes it inline:
// UD carries SENDs only, each to a destination with an address and a QPN,
// of at most one path MTU. RC QPs pass.
func (rq *daemonQP) checkUD(op string, wr *rc.SendWR) error {
	u := rq.q.ud
	if u == nil {
		return nil
	}
	st := StatusSuccess
	var total uint64
	for i := range wr.SGL {
		total += uint64(wr.SGL[i].Length)
	}
	switch d := &wr.UD; {
	case wr.Op != rc.OpSend && wr.Op != rc.OpSendImm:
		st = StatusNotSupported
	case d.QPN == 0 || d.QPN > rocev2.PSNMask || !d.IP.IsValid() || total > uint64(u.mtu):
		st = StatusInvalidParameter
	}
	if st == StatusSuccess {
		return nil
	}
	rq.link.ringDeferred(rq)
	return postError(op, st)
}

// udDest is the destination a send record carries: a UD QP's SEND's, none
// for an RC QP.
func (rq *daemonQP) udDest(wr *rc.SendWR) proto.UDDest {
	if rq.q.ud == nil {
		return proto.UDDest{}
	}
	d := &wr.UD
	return proto.UDDest{Set: true, IP: d.IP, MAC: d.MAC, QPN: d.QPN, QKey: d.QKey, TOS: d.TOS, SetTOS: d.SetTOS}
}

// daemonUDService is a UD service on the daemon's CM (udServer).
type daemonUDService struct {
	link *daemonLink
	h    uint32
	addr netip.AddrPort
}

func (r *daemonLink) serveUD(addr netip.AddrPort, q *QP) (udServer, error) {
	const op = "serve ud"
	if q == nil || q.ud == nil || q.adapter.be != r {
		return nil, errorf(StatusInvalidDeviceRequest, op, "not a UD QP of this adapter")
	}
	m, err := tell(r, op, &proto.ServeUD{Addr: addr.String(), QP: q.be.(*daemonQP).h})
	if err != nil {
		return nil, err
	}
	served, perr := netip.ParseAddrPort(m.Addr)
	if perr != nil {
		_, _ = tell(r, op, &proto.CloseUDService{H: m.H})
		return nil, errorf(StatusInternalError, op, "daemon served %q: %v", m.Addr, perr)
	}
	return &daemonUDService{link: r, h: m.H, addr: served}, nil
}

func (s *daemonUDService) Addr() netip.AddrPort { return s.addr }

// Answered asks the daemon; 0 once the daemon is gone or the service
// closed.
func (s *daemonUDService) Answered() uint64 {
	m, err := tell(s.link, "ud service answered", &proto.UDAnswered{H: s.h})
	if err != nil {
		return 0
	}
	return m.Answered
}

// Close closes the daemon's service; a second Close does nothing, as in
// process (the daemon refuses the handle it no longer has).
func (s *daemonUDService) Close() {
	_, _ = tell(s.link, "close ud service", &proto.CloseUDService{H: s.h})
}

// resolveUD blocks in the daemon until ctx ends: the request carries
// ctx's deadline, and the typed client cancels it when ctx ends first.
func (r *daemonLink) resolveUD(ctx context.Context, dst netip.AddrPort) (UDDestination, error) {
	const op = "resolve ud"
	m, fds, err := ask(r, ctx, op, &proto.ResolveUD{Addr: dst.String()})
	closeFDs(fds)
	if err != nil {
		return UDDestination{}, err
	}
	d, perr := udDestination(m)
	if perr != nil {
		return UDDestination{}, errorf(StatusInternalError, op, "daemon's answer: %v", perr)
	}
	return d, nil
}

func (r *daemonLink) nextHop(ip netip.Addr) (rocev2.MAC, error) {
	const op = "ud reply to"
	m, err := tell(r, op, &proto.NextHop{Addr: ip.String()})
	if err != nil {
		return rocev2.MAC{}, err
	}
	d, perr := udDestination(m)
	if perr != nil {
		return rocev2.MAC{}, errorf(StatusInternalError, op, "daemon's answer: %v", perr)
	}
	return d.MAC, nil
}

func udDestination(rep *proto.UDDestReply) (UDDestination, error) {
	var d UDDestination
	hw, err := net.ParseMAC(rep.MAC)
	if err != nil || len(hw) != 6 {
		return UDDestination{}, &net.AddrError{Err: "bad MAC", Addr: rep.MAC}
	}
	d.MAC = rocev2.MAC(hw)
	if rep.Addr != "" {
		if d.IP, err = netip.ParseAddr(rep.Addr); err != nil {
			return UDDestination{}, err
		}
	}
	d.QPN, d.QKey = rep.QPN, rep.QKey
	return d, nil
}

func (rq *daemonQP) joinMulticast(group netip.Addr) error {
	_, err := tell(rq.link, "join multicast", &proto.JoinMulticast{QP: rq.h, Addr: group.String()})
	return err
}

func (rq *daemonQP) leaveMulticast(group netip.Addr) error {
	_, err := tell(rq.link, "leave multicast", &proto.LeaveMulticast{QP: rq.h, Addr: group.String()})
	return err
}
