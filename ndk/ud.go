package ndk

import (
	"context"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The UD extension. NDKPI has only connected QPs; RoCE peers also use
// unreliable datagrams (IB UD: ib_send_bw -c UD, udaddy, anything over
// rdma_cm's RDMA_PS_UDP). ndkxdp offers them as an extension of its own,
// outside NDKPI, shaped after verbs:
//
//   - PD.CreateUDQP makes a QP that is ready at once, with a Q_Key;
//   - QP.SendTo posts a SEND to a UDDestination (verbs' address handle,
//     remote QPN and Q_Key), at most one path MTU long, which completes
//     once it is on the wire: nothing acknowledges it;
//   - Receive works as on any QP, and each receive buffer gets UDGRHSize
//     bytes of GRH ahead of the payload, as verbs gives them (UDSource
//     reads the sender's address out of them); the completion's
//     BytesTransferred counts both, and its ResultEx
//     TypeSpecificCompletionOutput is the sender's QPN (and, for
//     SendToWithImmediate's datagrams, Flags has ResultWithImmediate and
//     Immediate the immediate);
//   - Adapter.ServeUD and Adapter.ResolveUD are rdma_cm's UD service
//     resolution (SIDR), both ways;
//   - QP.JoinMulticast and LeaveMulticast make the QP a member of a
//     multicast group, and MulticastDestination addresses the group.
//
// Datagrams with another Q_Key than the QP's, and datagrams that find no
// receive large enough, are dropped and counted (EngineStats BadQKey and
// UDDropped). Through a daemon all of it works as in process: the
// daemon's QP sends each datagram to the destination its send record
// names, and ServeUD and ResolveUD run on the daemon's CM.

// UDGRHSize is the room a UD receive gives the GRH ahead of the payload:
// post receives of UDGRHSize more bytes than the largest datagram.
const UDGRHSize = rc.GRHLen

// RDMAUDPQKey is the Q_Key of rdma_cm's UD QPs (RDMA_UDP_QKEY): give it
// to CreateUDQP for a QP that serves or talks to rdma_cm peers.
const RDMAUDPQKey = cm.RDMAUDPQKey

// UDDestination is where SendTo sends: the peer's address and MAC (verbs'
// address handle), its QP number and Q_Key, and, where SetTOS, the IP TOS
// byte (DSCP and ECN) its datagrams carry instead of the QP's traffic
// class, as an address handle's grh.traffic_class. UDReplyTo sets TOS to
// the request's, as ibv_create_ah_from_wc does.
type UDDestination struct {
	IP     netip.Addr
	MAC    rocev2.MAC
	QPN    uint32
	QKey   uint32
	TOS    uint8
	SetTOS bool
}

// udInfo is what a UD QP keeps beside its engine QP.
type udInfo struct {
	qkey uint32
	mtu  uint32
}

// CreateUDQP creates a UD QP on the PD with Q_Key qkey (ndkxdp
// extension): cfg as for CreateQP, without an SRQ. The QP is ready at
// once: post receives, then SendTo; Connect and Accept refuse it. Its
// datagrams are at most the adapter's path MTU (QP.UDMaxMessage).
func (pd *PD) CreateUDQP(cfg QPConfig, qkey uint32) (*QP, error) {
	const op = "create ud qp"
	switch {
	case cfg.SRQ != nil:
		return nil, errorf(StatusNotSupported, op, "a UD QP on an SRQ")
	case qkey&0x80000000 != 0:
		return nil, errorf(StatusInvalidParameter, op, "Q_Key %#x has the controlled bit set", qkey)
	}
	// CreateQP's checks, then the provider's createUDQP.
	return pd.createQP(cfg, true, qkey)
}

// UDQKey returns a UD QP's Q_Key (0 for other QPs).
func (q *QP) UDQKey() uint32 {
	if q.ud == nil {
		return 0
	}
	return q.ud.qkey
}

// UDMaxMessage returns the most bytes one datagram of a UD QP carries:
// the path MTU (0 for other QPs).
func (q *QP) UDMaxMessage() uint32 {
	if q.ud == nil {
		return 0
	}
	return q.ud.mtu
}

// SendTo posts a datagram of the bytes sgl names to dest on a UD QP
// (ndkxdp extension; verbs' IBV_WR_SEND on IB_QPT_UD). Flags as for Send.
// dest.QKey with its high bit set sends the QP's own Q_Key (IBTA 10.2.5).
// The completion, Type OpSend, comes once the datagram left.
//
// It fails inline with STATUS_INVALID_DEVICE_REQUEST on a QP that is not
// UD, STATUS_INVALID_PARAMETER for a message over UDMaxMessage or a
// destination without address or QPN, and otherwise as Send. Allocates
// nothing when it succeeds.
func (q *QP) SendTo(ctx any, sgl []SGE, dest UDDestination, flags OpFlag) error {
	return q.sendTo("send to", ctx, sgl, dest, false, 0, flags)
}

// SendToWithImmediate is SendTo of a datagram that carries imm (UD
// SEND_ONLY_WITH_IMMEDIATE, verbs' IBV_WR_SEND_WITH_IMM): udaddy names
// its QPN so, and its server answers the QPN it reads there.
func (q *QP) SendToWithImmediate(ctx any, sgl []SGE, dest UDDestination, imm uint32, flags OpFlag) error {
	return q.sendTo("send to with immediate", ctx, sgl, dest, true, imm, flags)
}

func (q *QP) sendTo(op string, ctx any, sgl []SGE, dest UDDestination, withImm bool, imm uint32, flags OpFlag) error {
	if q.ud == nil {
		q.be.ringDeferred()
		return errorf(StatusInvalidDeviceRequest, op, "not a UD QP (CreateUDQP)")
	}
	var total uint64
	for i := range sgl {
		total += uint64(sgl[i].Length)
	}
	switch {
	case total > uint64(q.ud.mtu):
		q.be.ringDeferred()
		return errorf(StatusInvalidParameter, op, "datagram of %d bytes over the path MTU of %d: UD carries one packet per message", total, q.ud.mtu)
	case !dest.IP.IsValid() || dest.QPN == 0 || dest.QPN > rocev2.PSNMask:
		q.be.ringDeferred()
		return errorf(StatusInvalidParameter, op, "destination %v QPN %#x: an address and a QPN in [1, 2^24) are needed", dest.IP, dest.QPN)
	case dest.SetTOS && rocev2.ECNOf(dest.TOS) == rocev2.CE:
		q.be.ringDeferred()
		return errorf(StatusInvalidParameter, op, "TOS %#x: its ECN bits say CE, which a switch sets and no sender", dest.TOS)
	}
	wr := rc.SendWR{Op: rc.OpSend, Flags: flags, Context: ctx, SGL: engineSGL(sgl),
		UD: rc.UDDest{IP: dest.IP, MAC: dest.MAC, QPN: dest.QPN, QKey: dest.QKey, TOS: dest.TOS, SetTOS: dest.SetTOS}}
	if withImm {
		wr.Op, wr.Imm = rc.OpSendImm, imm
	}
	return q.post("send", postSend, &wr)
}

// UDSource returns the sender's address from the GRH bytes a UD receive
// starts with: the IPv6 source of an IPv6 datagram, the IPv4 source of
// an IPv4 one (whose header fills the last 20 of the 40 bytes, as rxe
// writes them). It is the zero Addr if grh is short or holds neither.
func UDSource(grh []byte) netip.Addr {
	if len(grh) < UDGRHSize {
		return netip.Addr{}
	}
	switch {
	case grh[20]>>4 == 4:
		return netip.AddrFrom4([4]byte(grh[32:36]))
	case grh[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(grh[8:24]))
	}
	return netip.Addr{}
}

// UDTOS returns the IP TOS byte (DSCP and ECN) of the datagram whose GRH
// bytes a UD receive starts with: the IPv4 TOS or the IPv6 traffic class.
// ok is false where grh holds neither header.
func UDTOS(grh []byte) (tos uint8, ok bool) {
	switch {
	case len(grh) < UDGRHSize:
		return 0, false
	case grh[20]>>4 == 4:
		return grh[21], true
	case grh[0]>>4 == 6:
		return grh[0]<<4 | grh[1]>>4, true
	}
	return 0, false
}

// UDReplyTo is verbs' ibv_create_ah_from_wc: the destination that answers
// a datagram received with grh (the receive buffer's first UDGRHSize
// bytes) from QP srcQPN, with Q_Key qkey, and with the datagram's DSCP
// and ECN (the address handle's traffic class; a CE mark, which a switch
// set on the way, is answered as ECT(0)). The next hop's MAC comes from
// the kernel's routes and neighbours, as for Connect. It fails with
// STATUS_INVALID_PARAMETER when grh names no sender, and as Connect when
// no route or neighbour is found.
func (a *Adapter) UDReplyTo(grh []byte, srcQPN, qkey uint32) (UDDestination, error) {
	const op = "ud reply to"
	ip := UDSource(grh)
	if !ip.IsValid() {
		return UDDestination{}, errorf(StatusInvalidParameter, op, "no IPv4 or IPv6 header in the GRH")
	}
	mac, err := a.backend().nextHop(ip)
	if err != nil {
		return UDDestination{}, err
	}
	tos, _ := UDTOS(grh)
	if rocev2.ECNOf(tos) == rocev2.CE {
		tos = rocev2.TOS(rocev2.DSCPOf(tos), rocev2.ECT0)
	}
	return UDDestination{IP: ip, MAC: mac, QPN: srcQPN, QKey: qkey, TOS: tos, SetTOS: true}, nil
}

// UDDestinationTo is verbs' ibv_create_ah for a peer known by its
// address: the destination of UD QP qpn with Q_Key qkey at ip, whose next
// hop's MAC comes from the kernel's routes and neighbours, as for Connect.
// Tools that exchange GIDs out of band (ibv_ud_pingpong) address their
// peer so. It fails with STATUS_INVALID_PARAMETER for an invalid address
// or a QPN outside [1, 2^24), and as Connect when no route or neighbour is
// found.
func (a *Adapter) UDDestinationTo(ip netip.Addr, qpn, qkey uint32) (UDDestination, error) {
	const op = "ud destination"
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsUnspecified() || qpn == 0 || qpn > rocev2.PSNMask {
		return UDDestination{}, errorf(StatusInvalidParameter, op, "destination %v QPN %#x: an address and a QPN in [1, 2^24) are needed", ip, qpn)
	}
	mac, err := a.backend().nextHop(ip)
	if err != nil {
		return UDDestination{}, err
	}
	return UDDestination{IP: ip, MAC: mac, QPN: qpn, QKey: qkey}, nil
}

// UDService answers rdma_cm's UD service resolution (SIDR) for one port
// with a UD QP (ndkxdp extension; rdma_listen on RDMA_PS_UDP with every
// request accepted).
type UDService struct {
	s udServer
}

// udServer is a provider's UD service: the CM's in process
// (*cm.UDService), the daemon's through one (daemon_ud.go).
type udServer interface {
	Addr() netip.AddrPort
	Answered() uint64
	Close()
}

// ServeUD answers SIDR_REQs for addr (an unspecified address serves every
// address of the adapter; the port must not be 0) with q's number and
// Q_Key, until Close. It fails with STATUS_INVALID_DEVICE_REQUEST for a
// QP that is not UD, STATUS_ADDRESS_ALREADY_EXISTS for a port served
// already, STATUS_NOT_SUPPORTED without connection management.
func (a *Adapter) ServeUD(addr netip.AddrPort, q *QP) (*UDService, error) {
	s, err := a.backend().serveUD(addr, q)
	if err != nil {
		return nil, err
	}
	return &UDService{s: s}, nil
}

// Addr returns the address and port served.
func (s *UDService) Addr() netip.AddrPort { return s.s.Addr() }

// Answered returns how many requests the service answered with its QP.
func (s *UDService) Answered() uint64 { return s.s.Answered() }

// Close stops answering; later requests are refused (IB_SIDR_UNSUPPORTED).
func (s *UDService) Close() { s.s.Close() }

// ResolveUD finds the UD QP that serves dst (rdma_cm's rdma_resolve_route
// and SIDR on RDMA_PS_UDP, as udaddy's client does): the route and
// neighbour through the kernel, then a SIDR_REQ, resent as rdma_cm does
// until the peer answers or ctx ends. It fails with
// STATUS_CONNECTION_REFUSED when the peer refuses (no service on the
// port), STATUS_IO_TIMEOUT when it never answers, STATUS_CANCELLED when
// ctx ends, and as Connect when no route or neighbour is found.
func (a *Adapter) ResolveUD(ctx context.Context, dst netip.AddrPort) (UDDestination, error) {
	return a.backend().resolveUD(ctx, dst)
}

// JoinMulticast makes a UD QP a member of the multicast group (an IPv4 or
// IPv6 multicast address), as rdma_join_multicast and ibv_attach_mcast do
// together (ndkxdp extension): the QP then takes the datagrams sent to
// the group with its Q_Key, each in a receive of its own, as it takes
// those sent to it, and every member QP of the adapter gets its copy:
// a datagram a QP of the adapter sends to the group reaches the adapter's
// members too, the sender itself if it is one (multicast loopback, as an
// HCA's; QPConfig.BlockSelfMulticastLoopback keeps a QP's own out). The
// adapter's interface joins the group in the kernel (an IGMP or MLD
// report goes out; the NIC takes the group's MAC) for its first member,
// and leaves it after its last. Joining a group twice does nothing;
// closing the QP leaves its groups.
//
// It fails with STATUS_INVALID_DEVICE_REQUEST on a QP that is not UD,
// STATUS_INVALID_PARAMETER for an address that is not multicast, and
// STATUS_INSUFFICIENT_RESOURCES when the kernel or the steering program
// has no room for another group (the error says which).
func (q *QP) JoinMulticast(group netip.Addr) error {
	const op = "join multicast"
	if err := q.checkMulticast(op, group); err != nil {
		return err
	}
	return q.be.joinMulticast(group.Unmap())
}

// LeaveMulticast ends the QP's membership of group; it fails with
// STATUS_INVALID_PARAMETER if the QP is not a member.
func (q *QP) LeaveMulticast(group netip.Addr) error {
	const op = "leave multicast"
	if err := q.checkMulticast(op, group); err != nil {
		return err
	}
	return q.be.leaveMulticast(group.Unmap())
}

func (q *QP) checkMulticast(op string, group netip.Addr) error {
	if q.ud == nil {
		return errorf(StatusInvalidDeviceRequest, op, "not a UD QP (CreateUDQP)")
	}
	if !group.Unmap().IsMulticast() {
		return errorf(StatusInvalidParameter, op, "%v is not a multicast address", group)
	}
	return nil
}

// MulticastDestination is the destination of a datagram to a multicast
// group (verbs' address handle of rdma_cm's multicast join): the group's
// address and MAC (RFC 1112, 2464), QPN rocev2.MulticastQPN, and the
// group's Q_Key (RDMAUDPQKey for groups rdma_cm peers join). It fails
// with STATUS_INVALID_PARAMETER for an address that is not multicast.
func MulticastDestination(group netip.Addr, qkey uint32) (UDDestination, error) {
	group = group.Unmap()
	mac, ok := rocev2.MulticastMAC(group)
	if !ok {
		return UDDestination{}, errorf(StatusInvalidParameter, "multicast destination", "%v is not a multicast address", group)
	}
	return UDDestination{IP: group, MAC: mac, QPN: rocev2.MulticastQPN, QKey: qkey}, nil
}
