package rocev2

import "strconv"

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
