package pingpong

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// GID is one entry of the GID table rxe builds for an interface, which
// -g indexes.
type GID struct {
	Index int
	GID   [16]byte
	V2    bool // RoCE v2 (UDP); false: RoCE v1
	Addr  netip.Addr
}

// Type names the entry's type as sysfs's gid_attrs/types does.
func (g GID) Type() string {
	if g.V2 {
		return "RoCE v2"
	}
	return "RoCE v1"
}

// GIDTable is the table the kernel's RoCE GID management
// (drivers/infiniband/core/roce_gid_mgmt.c) gives an rxe device on an
// interface with this MAC and these addresses, in the interface's order:
// first the default GID, the link-local address made from the MAC
// (EUI-64), as RoCE v1 at index 0 and RoCE v2 at 1; then each address,
// IPv4 ones IPv4-mapped, as a RoCE v1 and a RoCE v2 entry, IPv4 before
// IPv6, an address whose GID is there already skipped (an IPv6 link-local
// address made from the MAC is the default GID). So index 3 is the first
// IPv4 address's RoCE v2 GID, as show_gids lists it.
func GIDTable(mac net.HardwareAddr, addrs []netip.Addr) []GID {
	var out []GID
	add := func(g [16]byte, a netip.Addr) {
		for _, e := range out {
			if e.GID == g {
				return
			}
		}
		out = append(out, GID{Index: len(out), GID: g, Addr: a}, GID{Index: len(out) + 1, GID: g, V2: true, Addr: a})
	}
	if len(mac) == 6 {
		g := [16]byte{0: 0xfe, 1: 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]}
		add(g, netip.AddrFrom16(g))
	}
	for _, v4 := range []bool{true, false} {
		for _, a := range addrs {
			a = a.Unmap()
			if a.Is4() == v4 {
				add(netip.AddrFrom16(a.As16()).As16(), a)
			}
		}
	}
	return out
}

// InterfaceGIDs is GIDTable for the interface ifname in this network
// namespace.
func InterfaceGIDs(ifname string) ([]GID, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	return interfaceGIDs(ifi)
}

func interfaceGIDs(ifi *net.Interface) ([]GID, error) {
	as, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", ifi.Name, err)
	}
	var addrs []netip.Addr
	for _, x := range as {
		if n, ok := x.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				addrs = append(addrs, a.Unmap())
			}
		}
	}
	return GIDTable(ifi.HardwareAddr, addrs), nil
}

// GIDsOfMAC is InterfaceGIDs for the interface in this namespace that has
// mac (a daemon's adapter names its MAC and address, not its interface),
// or, where none has it, the table of an interface with the MAC and the
// one address given.
func GIDsOfMAC(mac net.HardwareAddr, addr netip.Addr) []GID {
	ifs, _ := net.Interfaces()
	for i := range ifs {
		if ifs[i].HardwareAddr.String() == mac.String() {
			if t, err := interfaceGIDs(&ifs[i]); err == nil {
				return t
			}
		}
	}
	return GIDTable(mac, []netip.Addr{addr})
}

// PickGID is -g: the entry at idx of table, which must be a RoCE v2 GID
// of local, the address the adapter sends from. idx -1 (no -g) is the
// zero GID, as the C tools send without -g.
func PickGID(table []GID, idx int, local netip.Addr) ([16]byte, error) {
	if idx < 0 {
		return [16]byte{}, nil
	}
	var list strings.Builder
	for _, e := range table {
		fmt.Fprintf(&list, "\n  %d: %s, %s", e.Index, GIDString(e.GID), e.Type())
	}
	if idx >= len(table) {
		return [16]byte{}, fmt.Errorf("can't read sgid of index %d: the table has %d entries:%s", idx, len(table), list.String())
	}
	e := table[idx]
	switch {
	case !e.V2:
		return [16]byte{}, fmt.Errorf("-g %d: %s is a RoCE v1 GID and ndkxdp speaks RoCE v2 only; its RoCE v2 entry is index %d:%s", idx, GIDString(e.GID), idx+1, list.String())
	case e.Addr != local.Unmap():
		return [16]byte{}, fmt.Errorf("-g %d: %s is not the address ndkxdp sends from (%v):%s", idx, GIDString(e.GID), local, list.String())
	}
	return e.GID, nil
}

// gidAddr is the IP address a peer's GID names: IPv4 for an IPv4-mapped
// GID, IPv6 otherwise.
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }
