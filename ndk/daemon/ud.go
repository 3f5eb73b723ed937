package daemon

import (
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// The UD extension for clients (proto/ud.go): UD QPs made on the daemon's
// adapter, with the rings of any client QP, whose SEND records name their
// destination; and rdma_cm's UD services (SIDR) on the daemon's CM, which
// answer with the client's QP, and resolutions of a peer's.

// sUDService is a client's UD service on the daemon's CM.
type sUDService struct {
	h uint32
	s *ndk.UDService
}

// checkUDQP is what create_qp checks of a UD QP beyond an RC QP's: no
// SRQ, and a Q_Key a client may use (ndk.PD.CreateUDQP's statuses).
func checkUDQP(req *proto.CreateQP) error {
	if req.SRQ != 0 {
		return statusErr(ndk.StatusNotSupported, "a UD QP on an SRQ")
	}
	if req.QKey&0x80000000 != 0 {
		return statusErr(ndk.StatusInvalidParameter, "Q_Key %#x has the controlled bit set", req.QKey)
	}
	return nil
}

func (ss *session) serveUD(_ *call, r *proto.ServeUD) (*proto.AddrReply, error) {
	addr, err := netip.ParseAddrPort(r.Addr)
	if err != nil {
		return nil, statusErr(ndk.StatusInvalidAddress, "UD service address %q: %v", r.Addr, err)
	}
	q, err := lookup[*sQP](ss, r.QP)
	if err != nil {
		return nil, err
	}
	s, err := ss.srv.a.ServeUD(addr, q.qp)
	if err != nil {
		return nil, err
	}
	x := &sUDService{s: s}
	if x.h, err = ss.add(x); err != nil {
		s.Close()
		return nil, err
	}
	return &proto.AddrReply{H: x.h, Addr: s.Addr().String()}, nil
}

func (ss *session) udAnswered(_ *call, r *proto.UDAnswered) (*proto.UDAnsweredReply, error) {
	x, err := lookup[*sUDService](ss, r.H)
	if err != nil {
		return nil, err
	}
	return &proto.UDAnsweredReply{Answered: x.s.Answered()}, nil
}

func (ss *session) closeUDService(_ *call, r *proto.CloseUDService) (*proto.None, error) {
	x, err := lookup[*sUDService](ss, r.H)
	if err != nil {
		return nil, err
	}
	ss.drop(x.h)
	x.s.Close()
	return nil, nil
}

// resolveUD blocks (handlers.go): c.ctx ends at the request's deadline
// or its cancel.
func (ss *session) resolveUD(c *call, r *proto.ResolveUD) (*proto.UDDestReply, error) {
	dst, err := netip.ParseAddrPort(r.Addr)
	if err != nil {
		return nil, statusErr(ndk.StatusInvalidAddress, "UD service address %q: %v", r.Addr, err)
	}
	d, err := ss.srv.a.ResolveUD(c.ctx, dst)
	if err != nil {
		return nil, err
	}
	return udDestReply(d), nil
}

func (ss *session) nextHop(_ *call, r *proto.NextHop) (*proto.UDDestReply, error) {
	ip, err := netip.ParseAddr(r.Addr)
	if err != nil {
		return nil, statusErr(ndk.StatusInvalidAddress, "next hop of %q: %v", r.Addr, err)
	}
	// UDReplyTo is the adapter's next hop of the GRH's sender: give it a
	// GRH that names ip.
	d, err := ss.srv.a.UDReplyTo(grhFrom(ip), 1, 0)
	if err != nil {
		return nil, err
	}
	return udDestReply(ndk.UDDestination{MAC: d.MAC}), nil
}

func udDestReply(d ndk.UDDestination) *proto.UDDestReply {
	r := &proto.UDDestReply{MAC: d.MAC.String(), QPN: d.QPN, QKey: d.QKey}
	if d.IP.IsValid() {
		r.Addr = d.IP.String()
	}
	return r
}

// grhFrom is the GRH of a datagram from ip, as the engine writes it
// ahead of a UD receive (ndk.UDSource reads it back).
func grhFrom(ip netip.Addr) []byte {
	g := make([]byte, ndk.UDGRHSize)
	if ip.Is4() {
		g[20] = 0x45
		a := ip.As4()
		copy(g[32:36], a[:])
	} else {
		g[0] = 0x60
		a := ip.As16()
		copy(g[8:24], a[:])
	}
	return g
}

// opUDSend is what udOp says of a UD QP's SEND that names its destination.
const opUDSend = 0xff

// udOp is the operation the relay posts for s: a UD QP's SEND with its
// destination goes by SendTo. Any other record takes the RC path, where
// the daemon's QP refuses what its kind does not carry.
func udOp(q *sQP, s *proto.Send) uint8 {
	if s.Dest.Set && (s.Op == proto.OpSend || s.Op == proto.OpSendImm) && q.qp.UDMaxMessage() != 0 {
		return opUDSend
	}
	return s.Op
}

// postUD posts a UD SEND of the record's destination.
func postUD(q *sQP, slot *reqSlot, sgl []ndk.SGE, s *proto.Send, flags ndk.OpFlag) error {
	d := ndk.UDDestination{IP: s.Dest.IP, MAC: s.Dest.MAC, QPN: s.Dest.QPN, QKey: s.Dest.QKey, TOS: s.Dest.TOS, SetTOS: s.Dest.SetTOS}
	if s.Op == proto.OpSendImm {
		return q.qp.SendToWithImmediate(slot, sgl, d, s.Imm, flags)
	}
	return q.qp.SendTo(slot, sgl, d, flags)
}

// joinMulticast and leaveMulticast are the client's UD QP's on the
// daemon's adapter: the daemon's interface joins the group for the first
// member of any client, and the client's QP takes its datagrams through
// the QP's rings as any other. A group the session has no member of yet
// is charged to its quota (resGroups).
func (ss *session) joinMulticast(_ *call, r *proto.JoinMulticast) (*proto.None, error) {
	q, group, err := ss.multicastArgs(r.QP, r.Addr)
	if err != nil {
		return nil, err
	}
	ss.mcMu.Lock()
	defer ss.mcMu.Unlock()
	if q.groups[group] {
		return nil, nil // a member already: nothing, as in process
	}
	first := ss.groups[group] == 0
	if first {
		if err := ss.take(resGroups); err != nil {
			return nil, err
		}
	}
	if err := q.qp.JoinMulticast(group); err != nil {
		if first {
			ss.give(resGroups)
		}
		return nil, err
	}
	if q.groups == nil {
		q.groups = make(map[netip.Addr]bool)
	}
	if ss.groups == nil {
		ss.groups = make(map[netip.Addr]int)
	}
	q.groups[group] = true
	ss.groups[group]++
	return nil, nil
}

func (ss *session) leaveMulticast(_ *call, r *proto.LeaveMulticast) (*proto.None, error) {
	q, group, err := ss.multicastArgs(r.QP, r.Addr)
	if err != nil {
		return nil, err
	}
	ss.mcMu.Lock()
	defer ss.mcMu.Unlock()
	if err := q.qp.LeaveMulticast(group); err != nil {
		return nil, err
	}
	ss.forgetMember(q, group)
	return nil, nil
}

// forgetMember takes q out of the session's count of group's members;
// ss.mcMu is held.
func (ss *session) forgetMember(q *sQP, group netip.Addr) {
	if !q.groups[group] {
		return
	}
	delete(q.groups, group)
	if ss.groups[group]--; ss.groups[group] <= 0 {
		delete(ss.groups, group)
		ss.give(resGroups)
	}
}

// leaveAll forgets the memberships of q, whose close ended them.
func (ss *session) leaveAll(q *sQP) {
	ss.mcMu.Lock()
	defer ss.mcMu.Unlock()
	for g := range q.groups {
		ss.forgetMember(q, g)
	}
}

func (ss *session) multicastArgs(h uint32, addr string) (*sQP, netip.Addr, error) {
	group, err := netip.ParseAddr(addr)
	if err != nil {
		return nil, netip.Addr{}, statusErr(ndk.StatusInvalidAddress, "multicast group %q: %v", addr, err)
	}
	group = group.Unmap()
	q, err := lookup[*sQP](ss, h)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	return q, group, nil
}
