package rocev2

import (
	"net/netip"
	"strconv"
)

// Encapsulation constants (ROCEV2.md 1.1; RFC 791, RFC 8200, IEEE 802.1Q).
const (
	UDPPort       = 4791 // IANA port for RoCEv2
	EthernetLen   = 14
	VLANTagLen    = 4
	IPv4Len       = 20 // RoCEv2 IPv4 headers carry no options
	IPv6Len       = 40
	UDPLen        = 8
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100
	IPProtoUDP    = 17
	// IPv4FlagDF is the Don't Fragment bit in IPFields.Flags. RoCEv2 senders
	// always set it: the path MTU already bounds every packet.
	IPv4FlagDF = 0x2
	// IPv4FlagMF is the More Fragments bit in IPFields.Flags.
	IPv4FlagMF = 0x1
	// DefaultTTL is what Linux and the observed hardware use for RoCEv2.
	DefaultTTL = 64
)

// MAC is an Ethernet address. It is a value so that Packet holds no pointers
// into, or copies of, anything but the frame.
type MAC [6]byte

func (m MAC) String() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 17)
	for i, v := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[v>>4], hex[v&0xF])
	}
	return string(b)
}

// EthernetFields holds the link header. With HasVLAN the frame carries one
// 802.1Q tag (TPID 0x8100) whose TCI is VLANTCI: PCP(15:13) DEI(12) VID(11:0).
type EthernetFields struct {
	Dst, Src MAC
	HasVLAN  bool
	VLANTCI  uint16
}

// VLANID returns the VLAN identifier of the tag.
func (e *EthernetFields) VLANID() uint16 { return e.VLANTCI & 0x0FFF }

// VLANPriority returns the PCP of the tag, which PFC uses for lossless RoCE.
func (e *EthernetFields) VLANPriority() uint8 { return uint8(e.VLANTCI >> 13) }

// Len returns the link header length, tag included.
func (e *EthernetFields) Len() int {
	if e.HasVLAN {
		return EthernetLen + VLANTagLen
	}
	return EthernetLen
}

// IPFields holds the network header. Src and Dst decide the version: both
// must be IPv4 (not IPv4-mapped IPv6) or both IPv6. Lengths and the IPv4
// checksum are derived when encoding.
type IPFields struct {
	Src, Dst netip.Addr
	// TOS is the IPv4 TOS or the IPv6 traffic class: DSCP(7:2) ECN(1:0).
	TOS uint8
	// TTL is the IPv4 TTL or the IPv6 hop limit.
	TTL uint8
	// ID is the IPv4 identification (rxe counts up, Huawei sends 0).
	ID uint16
	// Flags holds the three IPv4 flag bits (reserved, DF, MF). Set
	// IPv4FlagDF; NewIPFields does.
	Flags uint8
	// FlowLabel is the 20-bit IPv6 flow label.
	FlowLabel uint32
}

// NewIPFields returns the network header RoCEv2 senders use between src and
// dst: DF set on IPv4, TTL/hop limit 64, everything else zero.
func NewIPFields(src, dst netip.Addr) IPFields {
	return IPFields{Src: src, Dst: dst, TTL: DefaultTTL, Flags: IPv4FlagDF}
}

// sameFamily reports whether a and b are both IPv4 or both IPv6 (IPv4-mapped
// IPv6 counts as IPv6), and whether that is IPv4.
func sameFamily(a, b netip.Addr) (v4, ok bool) {
	if a.Is4() && b.Is4() {
		return true, true
	}
	return false, a.Is6() && b.Is6()
}

// Is4 reports whether f describes IPv4.
func (f *IPFields) Is4() bool { return f.Src.Is4() }

// Len returns the IP header length.
func (f *IPFields) Len() int {
	if f.Is4() {
		return IPv4Len
	}
	return IPv6Len
}

// UDPFields holds the UDP header. The destination port is always UDPPort
// and the length is derived when encoding.
type UDPFields struct {
	// SrcPort is a per-QP flow identifier (see UDPSourcePort); receivers
	// must not validate it.
	SrcPort uint16
	// Checksum is sent as given. Every observed RoCEv2 sender sends 0, and
	// the field is masked out of the ICRC.
	Checksum uint16
}

// FlowLabel returns rdma_calc_flow_label(lqpn, rqpn): a 20-bit hash of the QP
// pair (torvalds/linux include/rdma/ib_verbs.h).
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// UDPSourcePort returns rdma_get_udp_sport(fl, lqpn, rqpn), the UDP source
// port Linux RoCE drivers (mlx5, irdma, hns, rxe) use for a QP: the flow
// label, derived from the QP numbers when fl is 0, folded to 14 bits and
// placed in 0xC000-0xFFFF (torvalds/linux include/rdma/ib_verbs.h; ROCEV2.md 1.7).
func UDPSourcePort(fl, lqpn, rqpn uint32) uint16 {
	if fl == 0 {
		fl = FlowLabel(lqpn, rqpn)
	}
	low := fl & 0x3FFF
	low ^= (fl & 0xFC000) >> 14
	return uint16(low | 0xC000)
}

// MTU is the InfiniBand path MTU enumeration (IBTA 7.7.8; enum ib_mtu).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload size of m, or 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five path MTUs.
func (m MTU) Valid() bool { return m.Bytes() != 0 }

func (m MTU) String() string {
	if !m.Valid() {
		return "MTU(" + strconv.Itoa(int(m)) + ")"
	}
	return strconv.Itoa(m.Bytes())
}

// MTUFromBytes returns the enum for exactly 256, 512, 1024, 2048 or 4096.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// roceOverhead is what iboe_get_mtu subtracts from the netdev MTU: GRH (40),
// UDP (8), BTH (12), XRC ETH (4), AtomicETH (28) and ICRC (4).
const roceOverhead = 40 + 8 + 12 + 4 + 28 + 4

// MTUForNetdev returns the largest path MTU that fits in a netdev MTU, as
// Linux chooses it (torvalds/linux include/rdma/ib_addr.h iboe_get_mtu):
// 1500 gives 1024, 9000 gives 4096. ok is false below 352 bytes.
func MTUForNetdev(netdevMTU int) (m MTU, ok bool) {
	avail := netdevMTU - roceOverhead
	for m := MTU4096; m >= MTU256; m-- {
		if avail >= m.Bytes() {
			return m, true
		}
	}
	return 0, false
}

// PadCount returns the number of zero bytes that bring a payload of n bytes
// to a multiple of 4 (ROCEV2.md 1.6).
func PadCount(n int) int { return -n & 3 }
