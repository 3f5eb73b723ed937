package cm

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Resolver finds the path to a peer the way rdma_cm's address resolution
// does on Linux: the kernel's routing table gives the interface and source
// address, its neighbour table the next hop's MAC (rdma_resolve_addr;
// torvalds/linux drivers/infiniband/core/addr.c). It works in the network
// namespace of the calling thread, so the caller picks the namespace.
type Resolver struct {
	// NeighbourTimeout bounds the wait for the kernel to resolve a missing
	// neighbour; 0 means 3 s, the kernel's default for ARP or neighbour
	// discovery to give up (3 probes, 1 s apart).
	NeighbourTimeout time.Duration
	// Poll is how often the neighbour table is read while waiting; 0 means
	// 10 ms.
	Poll time.Duration
}

// ResolvePath resolves dst with a default Resolver and the source address
// the kernel would choose.
func ResolvePath(dst netip.Addr) (PathInfo, error) {
	var r Resolver
	return r.Resolve(netip.Addr{}, dst)
}

// Resolve returns the path from src (the zero Addr: the kernel's choice)
// to dst: NETWORK_UNREACHABLE when no route leads there, HOST_UNREACHABLE
// when the next hop's MAC cannot be learned in time, INVALID_ADDRESS for
// an address that cannot be a RoCE peer.
func (r *Resolver) Resolve(src, dst netip.Addr) (PathInfo, error) {
	const op = "resolve path"
	dst, src = dst.Unmap(), src.Unmap()
	if !usableAddr(dst) {
		return PathInfo{}, ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "%v is not a unicast address", dst)
	}
	var opts *netlink.RouteGetOptions
	if src.IsValid() && !src.IsUnspecified() {
		opts = &netlink.RouteGetOptions{SrcAddr: net.IP(src.AsSlice())}
	}
	routes, err := netlink.RouteGetWithOptions(net.IP(dst.AsSlice()), opts)
	if err != nil || len(routes) == 0 {
		if err == nil {
			err = unix.ENETUNREACH
		}
		return PathInfo{}, ndkpi.Errorf(ndkpi.StatusNetworkUnreachable, op, err, "no route to %v", dst)
	}
	rt := routes[0]
	if rt.Type == unix.RTN_LOCAL {
		return PathInfo{}, ndkpi.Errorf(ndkpi.StatusHostUnreachable, op, nil, "%v is an address of this host; RoCE needs a peer on a link", dst)
	}
	if rt.Type == unix.RTN_UNREACHABLE || rt.Type == unix.RTN_PROHIBIT || rt.Type == unix.RTN_BLACKHOLE {
		return PathInfo{}, ndkpi.Errorf(ndkpi.StatusNetworkUnreachable, op, nil, "route to %v is of type %d", dst, rt.Type)
	}
	link, err := netlink.LinkByIndex(rt.LinkIndex)
	if err != nil {
		return PathInfo{}, ndkpi.Errorf(ndkpi.StatusNetworkUnreachable, op, err, "interface %d of the route to %v", rt.LinkIndex, dst)
	}
	attrs := link.Attrs()
	var local rocev2.MAC
	if len(attrs.HardwareAddr) != len(local) {
		return PathInfo{}, ndkpi.Errorf(ndkpi.StatusNetworkUnreachable, op, nil, "route to %v leaves through %s, which is not Ethernet", dst, attrs.Name)
	}
	copy(local[:], attrs.HardwareAddr)
	path := PathInfo{RemoteIP: dst, LocalMAC: local, Ifindex: attrs.Index, Ifname: attrs.Name, MTU: attrs.MTU}
	if a, ok := netip.AddrFromSlice(rt.Src); ok {
		path.LocalIP = a.Unmap()
	} else if src.IsValid() {
		path.LocalIP = src
	} else {
		return PathInfo{}, ndkpi.Errorf(ndkpi.StatusNetworkUnreachable, op, nil, "route to %v through %s has no source address", dst, attrs.Name)
	}
	hop := dst
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok {
		hop = gw.Unmap()
	}
	mac, err := r.neighbour(attrs.Index, hop, dst)
	if err != nil {
		return PathInfo{}, ndkpi.Errorf(ndkpi.StatusHostUnreachable, op, err, "no MAC for %v on %s", hop, attrs.Name)
	}
	path.RemoteMAC = mac
	return path, nil
}

// usableNeigh are the neighbour states whose MAC may be used: what the
// kernel itself would transmit to (NUD_VALID).
const usableNeigh = netlink.NUD_PERMANENT | netlink.NUD_NOARP | netlink.NUD_REACHABLE |
	netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE

func lookupNeigh(ifindex int, hop netip.Addr) (rocev2.MAC, bool, error) {
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	neighs, err := netlink.NeighList(ifindex, family)
	if err != nil {
		return rocev2.MAC{}, false, err
	}
	for _, n := range neighs {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || a.Unmap() != hop || n.State&usableNeigh == 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		var m rocev2.MAC
		copy(m[:], n.HardwareAddr)
		return m, true, nil
	}
	return rocev2.MAC{}, false, nil
}

// neighbour returns hop's MAC. When the kernel has none it makes the
// kernel resolve it by sending an empty UDP datagram toward dst's discard
// port (RFC 863), then polls the table until NeighbourTimeout.
func (r *Resolver) neighbour(ifindex int, hop, dst netip.Addr) (rocev2.MAC, error) {
	if m, ok, err := lookupNeigh(ifindex, hop); err != nil || ok {
		return m, err
	}
	if err := probe(dst); err != nil {
		return rocev2.MAC{}, fmt.Errorf("trigger neighbour resolution: %w", err)
	}
	timeout, poll := r.NeighbourTimeout, r.Poll
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	if poll <= 0 {
		poll = 10 * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	for {
		m, ok, err := lookupNeigh(ifindex, hop)
		if err != nil || ok {
			return m, err
		}
		if time.Now().After(deadline) {
			return rocev2.MAC{}, fmt.Errorf("neighbour not resolved within %v: %w", timeout, errNoNeighbour)
		}
		time.Sleep(poll)
	}
}

var errNoNeighbour = errors.New("no usable neighbour entry")

func probe(dst netip.Addr) error {
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return err
	}
	defer conn.Close()
	// The datagram only makes the kernel look for the next hop; ICMP
	// errors that come back are of no interest.
	_, _ = conn.Write(nil)
	return nil
}
