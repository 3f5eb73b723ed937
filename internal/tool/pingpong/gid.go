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
	Addr  netip.Addr
}

// Type names the entry's type as sysfs's gid_attrs/types does: rxe's
// port is RoCE v2 (UDP encapsulation) only, so are all its GIDs.
func (g GID) Type() string { return "RoCE v2" }

// GIDTable is the table the kernel's RoCE GID management
// (drivers/infiniband/core/roce_gid_mgmt.c) gives an rxe device on an
// interface with this MAC and these addresses, in the interface's order:
// first the default GID, the link-local address made from the MAC
// (EUI-64), at index 0; then each address, IPv4 ones IPv4-mapped, IPv4
// before IPv6, an address whose GID is there already skipped (an IPv6
// link-local address made from the MAC is the default GID). rxe's port
// does RoCE v2 only, so each GID has one entry (a NIC that also does
// RoCE v1 lists each twice, v1 first). So index 1 is the first IPv4
// address's GID, as show_gids lists it for rxe; test/interop compares
// this table with rxe0's.
func GIDTable(mac net.HardwareAddr, addrs []netip.Addr) []GID {
	var out []GID
	add := func(g [16]byte, a netip.Addr) {
		for _, e := range out {
			if e.GID == g {
				return
			}
		}
		out = append(out, GID{Index: len(out), GID: g, Addr: a})
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

// PickGID is -g: the entry at idx of table, which must be the GID of
// local, the address the adapter sends from. idx -1 (no -g) is the
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
	if e := table[idx]; e.Addr != local.Unmap() {
		return [16]byte{}, fmt.Errorf("-g %d: %s is not the GID of the address ndkxdp sends from (%v):%s", idx, GIDString(e.GID), local, list.String())
	}
	return table[idx].GID, nil
}

// gidAddr is the IP address a peer's GID names: IPv4 for an IPv4-mapped
// GID, IPv6 otherwise.
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }
