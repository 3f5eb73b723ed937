package rocev2

import "net/netip"

// MulticastQPN is the destination QPN of a datagram sent to a multicast
// group (IBTA 10.5.2.3, the kernel's IB_MULTICAST_QPN): every UD QP
// attached to the group takes it.
const MulticastQPN = 0xFFFFFF

// MulticastMAC is the Ethernet address frames to group go to: RFC 1112's
// 01:00:5e with the low 23 bits of an IPv4 group, RFC 2464's 33:33 with
// the low 32 bits of an IPv6 one (as the kernel's ip_eth_mc_map and
// ipv6_eth_mc_map, which rdma_cm's address handles use). ok is false for
// an address that is not multicast.
func MulticastMAC(group netip.Addr) (m MAC, ok bool) {
	group = group.Unmap()
	if !group.IsMulticast() {
		return MAC{}, false
	}
	if group.Is4() {
		a := group.As4()
		return MAC{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}, true
	}
	a := group.As16()
	return MAC{0x33, 0x33, a[12], a[13], a[14], a[15]}, true
}
