package loader

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// toFrame returns rocev2Frame(4791, qpn) addressed to mac and the IPv4
// address ip (IPv6 when ip is one).
func toFrame(mac [6]byte, ip netip.Addr, qpn uint32) []byte {
	if ip.Is4() {
		f := rocev2Frame(4791, qpn)
		copy(f, mac[:])
		a := ip.As4()
		copy(f[14+16:], a[:])
		return f
	}
	f := make([]byte, 14+40+8+12+4)
	copy(f, mac[:])
	binary.BigEndian.PutUint16(f[12:], 0x86DD)
	ip6 := f[14:]
	ip6[0], ip6[6], ip6[7] = 0x60, 17, 64
	binary.BigEndian.PutUint16(ip6[4:], uint16(len(ip6)-40))
	a := ip.As16()
	copy(ip6[24:], a[:])
	udp := ip6[40:]
	binary.BigEndian.PutUint16(udp[2:], 4791)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	bth := udp[8:]
	bth[0], bth[2], bth[3] = 0x04, 0xFF, 0xFF
	bth[5], bth[6], bth[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
	return f
}

// TestSetLocal: once SetLocal names the adapter's MAC and addresses, a
// RoCEv2 frame to anything else is a counted drop, and the same frame to
// the adapter goes on to the QP lookup; a second SetLocal replaces the
// set; before any, nothing is checked.
func TestSetLocal(t *testing.T) {
	p := loadForTest(t, Options{MaxQueues: 2, MaxQPs: 16})
	mac := [6]byte{0x02, 0, 0, 0, 0, 0x0A}
	v4, v6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:2::2")
	other4, other6 := netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("2001:2::9")
	if err := p.AddQP(0x42, 0); err != nil {
		t.Fatal(err)
	}
	check := func(name string, frame []byte, want Reason) {
		t.Helper()
		before, err := p.Counters()
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.prog.Run(&ebpf.RunOptions{Data: frame})
		if err != nil {
			t.Fatal(err)
		}
		after, _ := p.Counters()
		if Verdict(got) != want.Verdict() || after[want] != before[want]+1 {
			t.Errorf("%s: verdict %v, %s %d -> %d; want %v counted as %s", name, Verdict(got), want, before[want], after[want], want.Verdict(), want)
		}
	}
	check("unchecked: another host", toFrame(mac, other4, 0x42), ReasonDropNoSocket)
	if _, _, ok, err := p.Local(); err != nil || ok {
		t.Errorf("Local() before SetLocal: checking %v, %v; want off", ok, err)
	}

	if err := p.SetLocal(mac, v4, netip.AddrFrom16(v6.As16())); err != nil {
		t.Fatal(err)
	}
	check("ipv4 to the adapter", toFrame(mac, v4, 0x42), ReasonDropNoSocket)
	check("ipv6 to the adapter", toFrame(mac, v6, 0x42), ReasonDropNoSocket)
	check("ipv4 to another host", toFrame(mac, other4, 0x42), ReasonDropWrongDstIP)
	check("ipv6 to another host", toFrame(mac, other6, 0x42), ReasonDropWrongDstIP)
	check("to another mac", toFrame([6]byte{0x02, 0, 0, 0, 0, 0x0B}, v4, 0x42), ReasonDropWrongDstMAC)
	check("unknown qp to another host", toFrame(mac, other4, 0x43), ReasonDropWrongDstIP)
	gotMAC, addrs, ok, err := p.Local()
	slices.SortFunc(addrs, netip.Addr.Compare)
	if err != nil || !ok || gotMAC != mac || !slices.Equal(addrs, []netip.Addr{v4, v6}) {
		t.Errorf("Local() = %x %v %v %v, want %x [%v %v] true", gotMAC, addrs, ok, err, mac, v4, v6)
	}

	// A new address replaces the old ones.
	if err := p.SetLocal(mac, other4); err != nil {
		t.Fatal(err)
	}
	check("new address", toFrame(mac, other4, 0x42), ReasonDropNoSocket)
	check("old ipv4 address", toFrame(mac, v4, 0x42), ReasonDropWrongDstIP)
	check("old ipv6 address", toFrame(mac, v6, 0x42), ReasonDropWrongDstIP)

	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"zero mac", p.SetLocal([6]byte{}, v4), "not a unicast MAC"},
		{"multicast mac", p.SetLocal([6]byte{0x01, 0, 0x5E, 0, 0, 1}, v4), "not a unicast MAC"},
		{"no address", p.SetLocal(mac), "0 addresses"},
		{"invalid address", p.SetLocal(mac, netip.Addr{}), "invalid address"},
	} {
		if c.err == nil || !strings.HasPrefix(c.err.Error(), "loader: ") || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one starting \"loader: \" containing %q", c.name, c.err, c.want)
		}
	}
	// A refused call changes nothing.
	check("after refused calls", toFrame(mac, other4, 0x42), ReasonDropNoSocket)
}

// TestGroups: a group AddGroup added takes frames to its MAC, survives a
// SetLocal, is not one of Local's addresses, and RemoveGroup ends it.
func TestGroups(t *testing.T) {
	p := loadForTest(t, Options{MaxQueues: 2, MaxQPs: 16})
	mac := [6]byte{0x02, 0, 0, 0, 0, 0x0A}
	own := netip.MustParseAddr("198.18.0.2")
	g4, g6 := netip.MustParseAddr("239.1.2.3"), netip.MustParseAddr("ff0e::42")
	gmac4, gmac6 := [6]byte{0x01, 0, 0x5e, 1, 2, 3}, [6]byte{0x33, 0x33, 0, 0, 0, 0x42}
	const mqpn = 0xFFFFFF
	if err := p.AddQP(mqpn, 0); err != nil {
		t.Fatal(err)
	}
	verdict := func(frame []byte) Reason {
		t.Helper()
		before, _ := p.Counters()
		if _, err := p.prog.Run(&ebpf.RunOptions{Data: frame}); err != nil {
			t.Fatal(err)
		}
		after, _ := p.Counters()
		for r := range after {
			if after[r] != before[r] {
				return Reason(r)
			}
		}
		t.Fatal("no counter moved")
		return 0
	}
	if err := p.SetLocal(mac, own); err != nil {
		t.Fatal(err)
	}
	for _, g := range []netip.Addr{g4, g6} {
		if err := p.AddGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddGroup(own); err == nil || !strings.Contains(err.Error(), "not a multicast address") {
		t.Errorf("AddGroup(%v): %v, want a refusal", own, err)
	}
	if err := p.SetLocal(mac, own); err != nil { // keeps the groups
		t.Fatal(err)
	}
	if r := verdict(toFrame(gmac4, g4, mqpn)); r != ReasonDropNoSocket {
		t.Errorf("ipv4 group: %s, want it steered (%s)", r, ReasonDropNoSocket)
	}
	if r := verdict(toFrame(gmac6, g6, mqpn)); r != ReasonDropNoSocket {
		t.Errorf("ipv6 group: %s, want it steered (%s)", r, ReasonDropNoSocket)
	}
	if r := verdict(toFrame(mac, g4, mqpn)); r != ReasonDropWrongDstIP {
		t.Errorf("ipv4 group to the unicast MAC: %s, want %s", r, ReasonDropWrongDstIP)
	}
	_, addrs, _, _ := p.Local()
	groups, err := p.Groups()
	slices.SortFunc(groups, netip.Addr.Compare)
	if !slices.Equal(addrs, []netip.Addr{own}) || err != nil || !slices.Equal(groups, []netip.Addr{g4, g6}) {
		t.Errorf("Local %v, Groups %v %v; want [%v] and [%v %v]", addrs, groups, err, own, g4, g6)
	}
	if err := p.RemoveGroup(g4); err != nil {
		t.Fatal(err)
	}
	if r := verdict(toFrame(gmac4, g4, mqpn)); r != ReasonDropWrongDstMAC {
		t.Errorf("ipv4 group after RemoveGroup: %s, want %s", r, ReasonDropWrongDstMAC)
	}
	if err := p.RemoveGroup(g4); !errors.Is(err, ErrGroupNotFound) {
		t.Errorf("second RemoveGroup: %v, want ErrGroupNotFound", err)
	}
	if err := p.RemoveGroup(own); !errors.Is(err, ErrGroupNotFound) {
		t.Errorf("RemoveGroup of the adapter's address: %v, want ErrGroupNotFound", err)
	}
}
