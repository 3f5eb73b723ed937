package proto

import "net/netip"

// The UD extension through the daemon (ndk/ud.go): UD QPs, whose SENDs
// carry their destination in the send record (UDDest), and rdma_cm's UD
// service resolution (SIDR) on the daemon's CM, both ways. Each control
// request's body is a typed struct in Request.UD, each reply's in
// Message.Raw.
const (
	OpCreateUDQP     = "create_ud_qp"     // CreateUDQP; reply as create_qp's, Raw: CreateUDQPReply
	OpServeUD        = "serve_ud"         // ServeUD; reply: H (the service), Addr (served)
	OpUDAnswered     = "ud_answered"      // H (service); reply: Raw: UDAnsweredReply
	OpCloseUDService = "close_ud_service" // H (service)
	OpResolveUD      = "resolve_ud"       // ResolveUD (blocking; Timeout); reply: Raw: UDDestReply
	OpNextHop        = "next_hop"         // NextHop; reply: Raw: UDDestReply (MAC only)
)

// CreateUDQP is ndk.PD.CreateUDQP: the create_qp fields of an RC QP on
// no SRQ, and the Q_Key.
type CreateUDQP struct {
	PD        uint32 `json:"pd"`
	RecvCQ    uint32 `json:"rcq"`
	SendCQ    uint32 `json:"scq"`
	Depth     int    `json:"depth"`
	SendDepth int    `json:"send_depth"`
	RecvSGE   int    `json:"recv_sge,omitempty"`
	SendSGE   int    `json:"send_sge,omitempty"`
	Inline    int    `json:"inline,omitempty"`
	QKey      uint32 `json:"qkey"`
}

// CreateUDQPReply is what a UD QP adds to create_qp's reply: the most
// bytes one datagram carries (ndk.QP.UDMaxMessage).
type CreateUDQPReply struct {
	MaxMessage uint32 `json:"max_message"`
}

// ServeUD is ndk.Adapter.ServeUD: the address served with QP (a handle).
type ServeUD struct {
	Addr string `json:"addr"`
	QP   uint32 `json:"qp"`
}

// UDAnsweredReply is ndk.UDService.Answered.
type UDAnsweredReply struct {
	Answered uint64 `json:"answered"`
}

// ResolveUD is ndk.Adapter.ResolveUD of Addr.
type ResolveUD struct {
	Addr string `json:"addr"`
}

// NextHop asks for the MAC of the next hop to IP (ndk.Adapter.UDReplyTo).
type NextHop struct {
	IP string `json:"ip"`
}

// UDDestReply is an ndk.UDDestination on the wire.
type UDDestReply struct {
	IP   string `json:"ip,omitempty"`
	MAC  string `json:"mac"`
	QPN  uint32 `json:"qpn,omitempty"`
	QKey uint32 `json:"qkey,omitempty"`
}

// UDDest is a UD SEND's destination in its send record (Send.Dest): the
// address handle (IP, MAC), the remote QPN and the Q_Key. A UD QP's SEND
// has no remote address, token or compare and swap operands, so the
// destination lies over their bytes; the record's byte 2 says it is there.
type UDDest struct {
	Set  bool
	IP   netip.Addr
	MAC  [6]byte
	QPN  uint32
	QKey uint32
}

// Byte layout of a UD destination in a Send record.
const (
	sendUDFlags          = 2 // recordDest, recordDest4
	sendUDMAC, sendUDQPN = sendRAddr, sendRToken
	sendUDQKey, sendUDIP = sendInv, sendCmp // the IP: 16 bytes, over Compare and SwapAdd
	recordDest           = 1
	recordDest4          = 2 // the IP is an IPv4 address (its 4 bytes first)
)

func (d *UDDest) encode(b []byte) {
	if !d.Set {
		b[sendUDFlags] = 0
		return
	}
	f := byte(recordDest)
	ip := b[sendUDIP : sendUDIP+16]
	clear(ip)
	switch {
	case d.IP.Is4():
		f |= recordDest4
		a := d.IP.As4()
		copy(ip, a[:])
	case d.IP.IsValid():
		a := d.IP.As16()
		copy(ip, a[:])
	}
	b[sendUDFlags] = f
	copy(b[sendUDMAC:sendUDMAC+6], d.MAC[:])
	clear(b[sendUDMAC+6 : sendUDMAC+8])
	le.PutUint32(b[sendUDQPN:], d.QPN)
	le.PutUint32(b[sendUDQKey:], d.QKey)
}

// decode reads the destination; an all-zero address is none (the zero
// Addr), which the daemon's SendTo refuses as the client's would.
func (d *UDDest) decode(b []byte) {
	f := b[sendUDFlags]
	if f&recordDest == 0 {
		*d = UDDest{}
		return
	}
	d.Set = true
	ip := [16]byte(b[sendUDIP : sendUDIP+16])
	switch {
	case ip == [16]byte{}:
		d.IP = netip.Addr{}
	case f&recordDest4 != 0:
		d.IP = netip.AddrFrom4([4]byte(ip[:4]))
	default:
		d.IP = netip.AddrFrom16(ip)
	}
	d.MAC = [6]byte(b[sendUDMAC : sendUDMAC+6])
	d.QPN = le.Uint32(b[sendUDQPN:])
	d.QKey = le.Uint32(b[sendUDQKey:])
}
