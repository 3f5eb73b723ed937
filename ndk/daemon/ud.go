package daemon

import (
	"context"
	"encoding/json"
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

// dispatchUD carries out the UD extension's control requests.
func (ss *session) dispatchUD(ctx context.Context, req *proto.Request) (*proto.Message, []int, error) {
	a := ss.srv.a
	switch req.Op {
	case proto.OpCreateUDQP:
		var b proto.CreateUDQP
		if err := udBody(req, &b); err != nil {
			return nil, nil, err
		}
		if b.QKey&0x80000000 != 0 {
			return nil, nil, statusErr(ndk.StatusInvalidParameter, "Q_Key %#x has the controlled bit set", b.QKey)
		}
		// The RC QP's checks and rings (a UD QP has no SRQ); only the
		// daemon's QP differs.
		m, fds, err := ss.createQPWith(&proto.Request{
			PD: b.PD, RecvCQ: b.RecvCQ, SendCQ: b.SendCQ, Depth: b.Depth, SendDepth: b.SendDepth,
			RecvSGE: b.RecvSGE, SendSGE: b.SendSGE, Inline: b.Inline,
		}, func(pd *ndk.PD, cfg ndk.QPConfig) (*ndk.QP, error) { return pd.CreateUDQP(cfg, b.QKey) })
		if err != nil {
			return nil, nil, err
		}
		q, err := lookup[*sQP](ss, m.H)
		if err == nil {
			m.Raw, err = json.Marshal(proto.CreateUDQPReply{MaxMessage: q.qp.UDMaxMessage()})
		}
		if err != nil {
			closeFDs(fds)
			return nil, nil, err
		}
		return m, fds, nil
	case proto.OpServeUD:
		var b proto.ServeUD
		if err := udBody(req, &b); err != nil {
			return nil, nil, err
		}
		addr, err := netip.ParseAddrPort(b.Addr)
		if err != nil {
			return nil, nil, statusErr(ndk.StatusInvalidAddress, "UD service address %q: %v", b.Addr, err)
		}
		q, err := lookup[*sQP](ss, b.QP)
		if err != nil {
			return nil, nil, err
		}
		s, err := a.ServeUD(addr, q.qp)
		if err != nil {
			return nil, nil, err
		}
		x := &sUDService{s: s}
		if x.h, err = ss.add(x); err != nil {
			s.Close()
			return nil, nil, err
		}
		return &proto.Message{H: x.h, Addr: s.Addr().String()}, nil, nil
	case proto.OpUDAnswered:
		x, err := lookup[*sUDService](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		raw, err := json.Marshal(proto.UDAnsweredReply{Answered: x.s.Answered()})
		return &proto.Message{Raw: raw}, nil, err
	case proto.OpCloseUDService:
		x, err := lookup[*sUDService](ss, req.H)
		if err != nil {
			return nil, nil, err
		}
		ss.drop(x.h)
		x.s.Close()
		return nil, nil, nil
	case proto.OpResolveUD:
		var b proto.ResolveUD
		if err := udBody(req, &b); err != nil {
			return nil, nil, err
		}
		dst, err := netip.ParseAddrPort(b.Addr)
		if err != nil {
			return nil, nil, statusErr(ndk.StatusInvalidAddress, "UD service address %q: %v", b.Addr, err)
		}
		d, err := a.ResolveUD(ctx, dst)
		if err != nil {
			return nil, nil, err
		}
		return udDestMessage(d)
	case proto.OpNextHop:
		var b proto.NextHop
		if err := udBody(req, &b); err != nil {
			return nil, nil, err
		}
		ip, err := netip.ParseAddr(b.IP)
		if err != nil {
			return nil, nil, statusErr(ndk.StatusInvalidAddress, "next hop of %q: %v", b.IP, err)
		}
		// UDReplyTo is the adapter's next hop of the GRH's sender: give
		// it a GRH that names ip.
		d, err := a.UDReplyTo(grhFrom(ip), 1, 0)
		if err != nil {
			return nil, nil, err
		}
		return udDestMessage(ndk.UDDestination{MAC: d.MAC})
	}
	return nil, nil, statusErr(ndk.StatusInvalidDeviceRequest, "unknown operation %q", req.Op)
}

func udBody(req *proto.Request, v any) error {
	if len(req.UD) == 0 {
		return statusErr(ndk.StatusInvalidParameter, "%s without its body", req.Op)
	}
	if err := json.Unmarshal(req.UD, v); err != nil {
		return statusErr(ndk.StatusInvalidParameter, "%s: %v", req.Op, err)
	}
	return nil
}

func udDestMessage(d ndk.UDDestination) (*proto.Message, []int, error) {
	r := proto.UDDestReply{MAC: d.MAC.String(), QPN: d.QPN, QKey: d.QKey}
	if d.IP.IsValid() {
		r.IP = d.IP.String()
	}
	raw, err := json.Marshal(r)
	return &proto.Message{Raw: raw}, nil, err
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
	d := ndk.UDDestination{IP: s.Dest.IP, MAC: s.Dest.MAC, QPN: s.Dest.QPN, QKey: s.Dest.QKey}
	if s.Op == proto.OpSendImm {
		return q.qp.SendToWithImmediate(slot, sgl, d, s.Imm, flags)
	}
	return q.qp.SendTo(slot, sgl, d, flags)
}
