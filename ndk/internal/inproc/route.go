package inproc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// openNamespace remembers the calling thread's network namespace, which
// Open runs in, so that later route lookups happen there.
func (g *management) openNamespace() error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	// Entering a namespace needs CAP_SYS_ADMIN, even the one a thread is
	// in; in the calling thread's own namespace the handle is made where
	// it stands, so a tool needs no CAP_SYS_ADMIN for its own namespace.
	// Routes, neighbours and addresses are all it asks: without a family
	// the handle also opens NETLINK_XFRM and NETLINK_NETFILTER, which a
	// kernel without the xfrm_user or nfnetlink module refuses with
	// EPROTONOSUPPORT (test/interop's daemon host VM has neither).
	var nl *netlink.Handle
	if here, herr := netns.Get(); herr == nil && here.Equal(ns) {
		here.Close()
		nl, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		if herr == nil {
			here.Close()
		}
		nl, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	}
	if err != nil {
		ns.Close()
		return fmt.Errorf("netlink in the adapter's namespace: %w", err)
	}
	g.ns, g.nsOK, g.nl = ns, true, nl
	return nil
}

// isLocal reports whether a is an address of the adapter's interface.
func (g *management) isLocal(a netip.Addr) bool {
	a = a.Unmap()
	if a == g.p.link.Addr {
		return true
	}
	if g.nl == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.addrs[a] {
		return true
	}
	g.refreshAddrs()
	return g.addrs[a]
}

// refreshAddrs reads the interface's addresses again and makes them the
// ones the steering program and the engines take frames for (locked).
func (g *management) refreshAddrs() {
	link, err := g.nl.LinkByIndex(g.p.link.Ifindex)
	if err != nil {
		return
	}
	list, err := g.nl.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return
	}
	clear(g.addrs)
	all := []netip.Addr{g.p.link.Addr}
	g.addrs[g.p.link.Addr] = true
	for _, x := range list {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && !g.addrs[ip.Unmap()] {
			g.addrs[ip.Unmap()] = true
			all = append(all, ip.Unmap())
		}
	}
	_ = g.p.setLocal(all)
}

// watchAddrs follows the interface's addresses as they are added and
// removed, so that a listener on every address also hears connection
// requests to one added after Open. It subscribes in the calling thread's
// network namespace, which Open runs in. The subscription is a
// non-blocking netlink socket that the Go runtime's poller watches: a
// goroutine blocked in recvfrom(2) would hold a thread in a system call
// for the adapter's whole life.
func (g *management) watchAddrs() error {
	if g.nl == nil || g.p.link.Ifindex == 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("follow the interface's addresses: netlink socket: %w", err)
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return fmt.Errorf("follow the interface's addresses: bind netlink: %w", err)
	}
	f := os.NewFile(uintptr(fd), "netlink-addrs")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("follow the interface's addresses: %w", err)
	}
	g.addrFile = f
	g.addrDone = make(chan struct{})
	go func() {
		defer close(g.addrDone)
		buf := make([]byte, 1<<16)
		for {
			changed := false
			var rerr error
			err := rc.Read(func(fd uintptr) bool {
				for {
					n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
					if err == unix.EAGAIN {
						return changed || rerr != nil
					}
					if err != nil {
						rerr = err
						return true
					}
					changed = changed || g.ifaddrMessage(buf[:n])
				}
			})
			if err != nil { // closed: the adapter is closing
				return
			}
			if changed || rerr == unix.ENOBUFS { // ENOBUFS: events were lost
				g.mu.Lock()
				g.refreshAddrs()
				g.mu.Unlock()
			}
		}
	}()
	return nil
}

// ifaddrMessage reports whether netlink messages b name the adapter's
// interface.
func (g *management) ifaddrMessage(b []byte) bool {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return true // unreadable: read the addresses again
	}
	for _, m := range msgs {
		if (m.Header.Type == unix.RTM_NEWADDR || m.Header.Type == unix.RTM_DELADDR) && len(m.Data) >= unix.SizeofIfAddrmsg {
			if int(native.Uint32(m.Data[4:8])) == g.p.link.Ifindex {
				return true
			}
		}
	}
	return false
}

// ResolvePath finds the route and next-hop MAC from src (zero: the
// kernel's choice) to dst in the adapter's namespace, and checks that it
// leaves through the adapter's interface. Its errors carry the NTSTATUS
// (ndkpi.StatusOf).
func (p *Provider) ResolvePath(src, dst netip.Addr) (cm.PathInfo, error) {
	const op = "resolve"
	g := p.mgmt
	var path cm.PathInfo
	var err error
	switch {
	case g == nil:
		return path, &ndkpi.Error{Status: ndkpi.StatusNotSupported, Op: op, Detail: "adapter has no connection management"}
	case g.resolve != nil:
		path, err = g.resolve(src, dst)
	case g.nsOK:
		path, err = g.inNamespace(func() (cm.PathInfo, error) {
			var r cm.Resolver
			return r.Resolve(src, dst)
		})
	default:
		return path, &ndkpi.Error{Status: ndkpi.StatusNotSupported, Op: op, Detail: fmt.Sprintf("adapter has no network namespace to resolve %v in", dst)}
	}
	if err != nil {
		return path, err
	}
	if p.link.Ifindex != 0 && path.Ifindex != p.link.Ifindex {
		return path, &ndkpi.Error{Status: ndkpi.StatusNetworkUnreachable, Op: op,
			Detail: fmt.Sprintf("the route to %v leaves through %s, not the adapter's interface", dst, path.Ifname)}
	}
	return path, nil
}

// inNamespace runs fn on a thread that entered the adapter's network
// namespace. If the thread cannot go back, it stays locked and dies with
// its goroutine rather than serve others from the wrong namespace.
func (g *management) inNamespace(fn func() (cm.PathInfo, error)) (cm.PathInfo, error) {
	type result struct {
		p   cm.PathInfo
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("network namespace: %w", err)}
			return
		}
		defer orig.Close()
		if orig.Equal(g.ns) { // already there: no setns, no CAP_SYS_ADMIN
			p, err := fn()
			runtime.UnlockOSThread()
			ch <- result{p, err}
			return
		}
		if err := netns.Set(g.ns); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter the adapter's namespace: %w", err)}
			return
		}
		p, err := fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{p, err}
	}()
	r := <-ch
	return r.p, r.err
}

// resolveNeighbour finds ip's MAC in the neighbour table of ifindex, in
// the calling thread's namespace. With no usable entry it asks the kernel
// to resolve (a UDP datagram to the discard port makes it ARP or solicit)
// and waits up to a second: the kernel tells nobody when an entry
// appears, so it looks again every 5 ms.
func resolveNeighbour(ifindex int, ip netip.Addr) (net.HardwareAddr, error) {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	lookup := func() net.HardwareAddr {
		ns, err := netlink.NeighList(ifindex, family)
		if err != nil {
			return nil
		}
		for _, n := range ns {
			a, ok := netip.AddrFromSlice(n.IP)
			if ok && a.Unmap() == ip && len(n.HardwareAddr) == 6 &&
				n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_PERMANENT|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_NOARP) != 0 {
				return n.HardwareAddr
			}
		}
		return nil
	}
	if m := lookup(); m != nil {
		return m, nil
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 9)))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	_, _ = c.Write([]byte{0})
	c.Close()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := lookup(); m != nil {
			return m, nil
		}
	}
	return nil, errors.New("no neighbour entry after probing for 1s")
}

var native = binary.NativeEndian
