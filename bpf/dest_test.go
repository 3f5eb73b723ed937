package bpf_test

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/ndkxdp/ndkxdp/bpf"
)

// The adapter the destination tests configure: ether()'s destination MAC,
// ipv4()'s and ipv6()'s destination addresses.
var (
	ownMAC  = [6]byte{0x02, 0, 0, 0, 0, 0x02}
	ownIPv4 = bpf.SteerLocalAddr{Addr: [16]byte{10: 0xFF, 11: 0xFF, 12: 198, 13: 18, 14: 0, 15: 2}}
	ownIPv6 = bpf.SteerLocalAddr{Addr: [16]byte{0x20, 0x01, 0x02, 15: 2}}
)

// setLocal fills local_cfg and local_addrs as the loader does (check on)
// or clears local_cfg (check off: nothing configured).
func setLocal(t *testing.T, objs *objects, check bool) {
	t.Helper()
	cfg := bpf.SteerLocalCfg{Mac: ownMAC}
	if check {
		cfg.Check = 1
	}
	if err := objs.LocalCfg.Put(uint32(0), cfg); err != nil {
		t.Fatal(err)
	}
	for _, a := range []bpf.SteerLocalAddr{ownIPv4, ownIPv6} {
		if err := objs.LocalAddrs.Put(a, uint8(1)); err != nil {
			t.Fatal(err)
		}
	}
}

// withMAC and withIP return a copy of f with its destination MAC, or the
// IP destination that starts at ipOff, replaced.
func withMAC(f []byte, mac ...byte) []byte {
	g := cat(f)
	copy(g, mac)
	return g
}

func withIP(f []byte, ipOff int, ip ...byte) []byte {
	g := cat(f)
	copy(g[ipOff:], ip)
	return g
}

// TestSteerDestination: with the adapter's addresses set, a RoCEv2 frame
// to another MAC or IP is dropped and counted before its QP is looked up;
// the same frame to the adapter goes on to the QP lookup (here: a known
// QP without a socket). Other traffic keeps its verdict whatever its
// destination, and a program whose loader set no addresses checks none.
func TestSteerDestination(t *testing.T) {
	objs := load(t)
	setLocal(t, objs, true)
	const (
		v4Dst  = 14 + 16     // IPv4 destination, no VLAN tag
		v6Dst  = 14 + 24     // IPv6 destination
		vlanV4 = 14 + 4 + 16 // behind an 802.1Q tag
		vlanV6 = 14 + 4 + 24 // IPv6 behind an 802.1ad tag
	)
	v4 := cat(ether(etIPv4), ipv4(17, 0, 0x4000, udp(rocePrt, roce(0, qpLocal, 64))))
	v6 := cat(ether(etIPv6), ipv6(17, udp(rocePrt, roce(0, qpGSI, 256))))
	vv4 := cat(ether(etIPv4, tpidQ), ipv4(17, 0, 0x4000, udp(rocePrt, roce(0, qpLocal, 0))))
	vv6 := cat(ether(etIPv6, tpidAD), ipv6(17, udp(rocePrt, roce(0, qpLocal, 0))))
	dns := cat(ether(etIPv4), ipv4(17, 0, 0, udp(53, nil)))
	otherV6 := []byte{0x20, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}
	noSocket, wrongIP, wrongMAC := bpf.SteerReasonREASON_DROP_NO_SOCKET, bpf.SteerReasonREASON_DROP_WRONG_DST_IP, bpf.SteerReasonREASON_DROP_WRONG_DST_MAC
	cases := []verdictCase{
		{"ipv4 to the adapter", v4, xdpDrop, noSocket},
		{"ipv6 to the adapter", v6, xdpDrop, noSocket},
		{"vlan ipv4 to the adapter", vv4, xdpDrop, noSocket},
		{"802.1ad ipv6 to the adapter", vv6, xdpDrop, noSocket},
		{"ipv4 to another host", withIP(v4, v4Dst, 198, 18, 0, 9), xdpDrop, wrongIP},
		{"ipv4 to the sender", withIP(v4, v4Dst, 198, 18, 0, 1), xdpDrop, wrongIP},
		{"ipv4 broadcast", withIP(v4, v4Dst, 255, 255, 255, 255), xdpDrop, wrongIP},
		{"ipv4 multicast", withIP(v4, v4Dst, 239, 1, 1, 1), xdpDrop, wrongIP},
		{"ipv4 unknown qp to another host", withIP(cat(ether(etIPv4), ipv4(17, 0, 0, udp(rocePrt, roce(0, qpUnknown, 0)))), v4Dst, 10, 0, 0, 1), xdpDrop, wrongIP},
		{"vlan ipv4 to another host", withIP(vv4, vlanV4, 198, 18, 0, 9), xdpDrop, wrongIP},
		{"ipv6 to another host", withIP(v6, v6Dst, otherV6...), xdpDrop, wrongIP},
		{"ipv6 all-nodes multicast", withIP(v6, v6Dst, 0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), xdpDrop, wrongIP},
		{"ipv6 to a mapped ipv4 of another host", withIP(v6, v6Dst, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 198, 18, 0, 3), xdpDrop, wrongIP},
		{"ipv6 to the adapter's ipv4, mapped", withIP(v6, v6Dst, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 198, 18, 0, 2), xdpDrop, wrongIP},
		{"802.1ad ipv6 to another host", withIP(vv6, vlanV6, otherV6...), xdpDrop, wrongIP},
		{"ipv4 to another mac", withMAC(v4, 0x02, 0, 0, 0, 0, 0x09), xdpDrop, wrongMAC},
		{"ipv4 to the broadcast mac", withMAC(v4, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF), xdpDrop, wrongMAC},
		{"ipv6 to a multicast mac", withMAC(v6, 0x33, 0x33, 0, 0, 0, 0x02), xdpDrop, wrongMAC},
		{"mac differs in its last byte only", withMAC(v4, 0x02, 0, 0, 0, 0, 0x03), xdpDrop, wrongMAC},
		{"mac differs in its first byte only", withMAC(v4, 0x06, 0, 0, 0, 0, 0x02), xdpDrop, wrongMAC},
		{"udp dns to another host", withIP(dns, v4Dst, 10, 0, 0, 1), xdpPass, bpf.SteerReasonREASON_PASS_NOT_ROCE},
		{"tcp to another mac", withMAC(cat(ether(etIPv4), ipv4(6, 0, 0x4000, make([]byte, 40))), 0x02, 0, 0, 0, 0, 0x09), xdpPass, bpf.SteerReasonREASON_PASS_NOT_UDP},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { run(t, objs, c, nil) })
	}

	// Headers split across fragments (bpf_xdp_load_bytes): the same
	// verdicts at every linear size from the Ethernet header on.
	const size = 9000
	pad := func(f []byte) []byte { return append(cat(f), make([]byte, size-len(f))...) }
	if _, err := objs.Steer.Run(&ebpf.RunOptions{Data: pad(v4), Context: xdpMD{DataEnd: 14}}); err == nil {
		for _, c := range []verdictCase{
			{"ipv4 to the adapter", pad(v4), xdpDrop, noSocket},
			{"ipv4 to another host", pad(withIP(v4, v4Dst, 198, 18, 0, 9)), xdpDrop, wrongIP},
			{"ipv6 to another host", pad(withIP(v6, v6Dst, otherV6...)), xdpDrop, wrongIP},
			{"ipv4 to another mac", pad(withMAC(v4, 0x02, 0, 0, 0, 0, 0x09)), xdpDrop, wrongMAC},
		} {
			for linear := uint32(14); linear <= 14+4+40+8+12+1; linear += 3 {
				opts := &ebpf.RunOptions{Context: xdpMD{DataEnd: linear}}
				t.Run(fmt.Sprintf("linear %d %s", linear, c.name), func(t *testing.T) { run(t, objs, c, opts) })
			}
		}
	}

	// No addresses set (check off): the destination is not looked at.
	setLocal(t, objs, false)
	for _, c := range []verdictCase{
		{"unchecked ipv4 to another host", withIP(v4, v4Dst, 198, 18, 0, 9), xdpDrop, noSocket},
		{"unchecked ipv4 to another mac", withMAC(v4, 0x02, 0, 0, 0, 0, 0x09), xdpDrop, noSocket},
	} {
		t.Run(c.name, func(t *testing.T) { run(t, objs, c, nil) })
	}
}

// TestSteerGroups: a frame for a multicast group the loader added (value
// 2 in local_addrs) and the group's MAC goes on to the QP lookup; the same
// group's frame to the adapter's unicast MAC, a group MAC with the
// adapter's own address, and a group not added are dropped.
func TestSteerGroups(t *testing.T) {
	objs := load(t)
	setLocal(t, objs, true)
	g4 := bpf.SteerLocalAddr{Addr: [16]byte{10: 0xFF, 11: 0xFF, 12: 239, 13: 1, 14: 2, 15: 3}}
	g6 := bpf.SteerLocalAddr{Addr: [16]byte{0: 0xFF, 1: 0x0E, 15: 0x42}}
	for _, g := range []bpf.SteerLocalAddr{g4, g6} {
		if err := objs.LocalAddrs.Put(g, uint8(2)); err != nil {
			t.Fatal(err)
		}
	}
	const (
		v4Dst = 14 + 16
		v6Dst = 14 + 24
	)
	v4 := cat(ether(etIPv4), ipv4(17, 0, 0x4000, udp(rocePrt, roce(0, qpLocal, 64))))
	v6 := cat(ether(etIPv6), ipv6(17, udp(rocePrt, roce(0, qpLocal, 64))))
	group4 := withMAC(withIP(v4, v4Dst, 239, 1, 2, 3), 0x01, 0, 0x5e, 1, 2, 3)
	group6 := withMAC(withIP(v6, v6Dst, 0xFF, 0x0E, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42), 0x33, 0x33, 0, 0, 0, 0x42)
	noSocket, wrongIP, wrongMAC := bpf.SteerReasonREASON_DROP_NO_SOCKET, bpf.SteerReasonREASON_DROP_WRONG_DST_IP, bpf.SteerReasonREASON_DROP_WRONG_DST_MAC
	for _, c := range []verdictCase{
		{"ipv4 group joined", group4, xdpDrop, noSocket},
		{"ipv6 group joined", group6, xdpDrop, noSocket},
		{"ipv4 group joined, unicast mac", withIP(v4, v4Dst, 239, 1, 2, 3), xdpDrop, wrongIP},
		{"ipv4 group not joined", withIP(group4, v4Dst, 239, 1, 2, 4), xdpDrop, wrongMAC},
		{"ipv6 group not joined", withIP(group6, v6Dst+15, 0x43), xdpDrop, wrongMAC},
		{"group mac, the adapter's ipv4", withMAC(v4, 0x01, 0, 0x5e, 1, 2, 3), xdpDrop, wrongMAC},
	} {
		t.Run(c.name, func(t *testing.T) { run(t, objs, c, nil) })
	}
}
