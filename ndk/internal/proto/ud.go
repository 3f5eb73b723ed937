package proto

import "net/netip"

// The UD extension through the daemon (ndk/ud.go): UD QPs, whose SENDs
// carry their destination in the send record (UDDest), and rdma_cm's UD
// service resolution (SIDR) on the daemon's CM, both ways. A UD QP is
// made by create_qp with CreateQP.UD set (its Q_Key in CreateQP.QKey,
// the datagram size in QPReply.MaxMessage); the other requests are
// typed here.
const (
	OpServeUD        = "serve_ud"         // ServeUD; reply: AddrReply (the service, the address served)
	OpUDAnswered     = "ud_answered"      // UDAnswered; reply: UDAnsweredReply
	OpCloseUDService = "close_ud_service" // CloseUDService
	OpResolveUD      = "resolve_ud"       // ResolveUD (blocking; Timeout); reply: UDDestReply
	OpNextHop        = "next_hop"         // NextHop; reply: UDDestReply (MAC only)
	OpJoinMulticast  = "join_multicast"   // JoinMulticast
	OpLeaveMulticast = "leave_multicast"  // LeaveMulticast
)

// ServeUD is ndk.Adapter.ServeUD: the address served (Addr) with QP.
type ServeUD struct {
	QP   uint32 `json:"qp,omitempty"`
	Addr string `json:",omitempty"`
}

// UDAnswered is ndk.UDService.Answered of service H.
type UDAnswered struct {
	H uint32 `json:"h,omitempty"`
}

// UDAnsweredReply is the count of SIDR_REQs service H answered.
type UDAnsweredReply struct {
	Answered uint64 `json:"answered,omitempty"`
}

// CloseUDService closes service H.
type CloseUDService struct {
	H uint32 `json:"h,omitempty"`
}

// ResolveUD is ndk.Adapter.ResolveUD of Addr (an IP and port).
type ResolveUD struct {
	Addr string `json:",omitempty"`
	Deadline
}

// NextHop asks for the MAC of the next hop to the IP Addr
// (ndk.Adapter.UDReplyTo).
type NextHop struct {
	Addr string `json:",omitempty"`
}

// JoinMulticast is ndk.QP.JoinMulticast of UD QP QP to the group Addr.
type JoinMulticast struct {
	QP   uint32 `json:"qp,omitempty"`
	Addr string `json:",omitempty"`
}

// LeaveMulticast is ndk.QP.LeaveMulticast.
type LeaveMulticast struct {
	QP   uint32 `json:"qp,omitempty"`
	Addr string `json:",omitempty"`
}

// UDDestReply is an ndk.UDDestination on the wire: the IP in Addr.
type UDDestReply struct {
	QPN  uint32 `json:",omitempty"`
	Addr string `json:",omitempty"`
	MAC  string `json:",omitempty"`
	QKey uint32 `json:"qkey,omitempty"`
}

func (*ServeUD) Op() string        { return OpServeUD }
func (*UDAnswered) Op() string     { return OpUDAnswered }
func (*CloseUDService) Op() string { return OpCloseUDService }
func (*ResolveUD) Op() string      { return OpResolveUD }
func (*NextHop) Op() string        { return OpNextHop }
func (*JoinMulticast) Op() string  { return OpJoinMulticast }
func (*LeaveMulticast) Op() string { return OpLeaveMulticast }

func (*ServeUD) answer(*AddrReply)          {}
func (*UDAnswered) answer(*UDAnsweredReply) {}
func (*CloseUDService) answer(*None)        {}
func (*ResolveUD) answer(*UDDestReply)      {}
func (*NextHop) answer(*UDDestReply)        {}
func (*JoinMulticast) answer(*None)         {}
func (*LeaveMulticast) answer(*None)        {}

// UDDest is a UD SEND's destination in its send record (Send.Dest): the
// address handle (IP, MAC, and the IP TOS byte where SetTOS), the remote
// QPN and the Q_Key. A UD QP's SEND has no remote address, token or
// compare and swap operands, so the destination lies over their bytes;
// the record's byte 2 says it is there.
type UDDest struct {
	Set    bool
	IP     netip.Addr
	MAC    [6]byte
	QPN    uint32
	QKey   uint32
	TOS    uint8
	SetTOS bool
}

// Byte layout of a UD destination in a Send record.
const (
	sendUDFlags          = 2 // recordDest, recordDest4, recordDestTOS
	sendUDMAC, sendUDQPN = sendRAddr, sendRToken
	sendUDTOS            = sendUDMAC + 6    // after the MAC, in the remote address's last two bytes
	sendUDQKey, sendUDIP = sendInv, sendCmp // the IP: 16 bytes, over Compare and SwapAdd
	recordDest           = 1
	recordDest4          = 2 // the IP is an IPv4 address (its 4 bytes first)
	recordDestTOS        = 4 // the TOS byte is the datagram's (SetTOS)
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
	clear(b[sendUDMAC+6 : sendUDMAC+8])
	if d.SetTOS {
		f |= recordDestTOS
		b[sendUDTOS] = d.TOS
	}
	b[sendUDFlags] = f
	copy(b[sendUDMAC:sendUDMAC+6], d.MAC[:])
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
	d.TOS, d.SetTOS = 0, f&recordDestTOS != 0
	if d.SetTOS {
		d.TOS = b[sendUDTOS]
	}
}
