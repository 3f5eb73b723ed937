package interop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/vethpair"
)

// Host is the host side of the peer VM's link: a network namespace holding
// the tap device qemu attaches the VM's NIC to. ndkxdp code attaches to Tap
// from inside the namespace (Do).
type Host struct {
	NS      string           // namespace name under /var/run/netns
	Tap     string           // tap device name inside NS
	Ifindex int              // tap ifindex inside NS
	MAC     net.HardwareAddr // tap MAC address
	IPv4    netip.Addr
	IPv6    netip.Addr // zero unless Config.IPv6
	MTU     int
	Queues  int // the tap's queues, one per queue pair of the VM's NIC

	ns netns.NsHandle
}

var nsSeq atomic.Uint32

// newHost creates the namespace and the tap inside it. The namespace name
// follows internal/vethpair's scheme (vethpair.NamePrefix + "<pid>-..."), so
// vethpair.RemoveStale also clears namespaces a killed run left behind.
func newHost(cfg *Config) (*Host, error) {
	vethpair.RemoveStale()
	h := &Host{
		NS:     fmt.Sprintf("%s%d-vm%d", vethpair.NamePrefix, os.Getpid(), nsSeq.Add(1)),
		Tap:    "ndkvm0",
		IPv4:   HostIPv4,
		MTU:    cfg.MTU,
		Queues: cfg.Queues,
		ns:     -1,
	}
	if cfg.IPv6 {
		h.IPv6 = HostIPv6
	}
	ns, err := vethpair.NewNamedNS(h.NS)
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", h.NS, err)
	}
	h.ns = ns
	if err := h.Do(h.configure); err != nil {
		return nil, errors.Join(err, h.close())
	}
	return h, nil
}

func (h *Host) configure() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("%s: find lo: %w", h.NS, err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("%s: set lo up: %w", h.NS, err)
	}
	// A persistent tap, created in this namespace (tun devices belong to
	// the namespace of the opener of /dev/net/tun); qemu attaches to it
	// by name.
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: h.Tap, MTU: h.MTU},
		Mode:      netlink.TUNTAP_MODE_TAP,
		Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
	}
	if h.Queues > 1 {
		// qemu attaches one file per queue pair (-netdev tap,queues=N).
		tap.Flags |= netlink.TUNTAP_MULTI_QUEUE
		tap.Queues = h.Queues
	}
	err = netlink.LinkAdd(tap)
	for _, f := range tap.Fds {
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("%s: create tap %s: %w", h.NS, h.Tap, err)
	}
	link, err := netlink.LinkByName(h.Tap)
	if err != nil {
		return fmt.Errorf("%s: find %s: %w", h.NS, h.Tap, err)
	}
	h.Ifindex, h.MAC = link.Attrs().Index, link.Attrs().HardwareAddr
	if err := netlink.LinkSetMTU(link, h.MTU); err != nil {
		return fmt.Errorf("%s: set %s mtu %d: %w", h.NS, h.Tap, h.MTU, err)
	}
	// IPv6 stays off unless asked for, so that the link carries no
	// router solicitations or MLD reports: captures hold test traffic only.
	if !h.IPv6.IsValid() {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+h.Tap+"/disable_ipv6", []byte("1"), 0); err != nil {
			return fmt.Errorf("%s: disable IPv6 on %s: %w", h.NS, h.Tap, err)
		}
	}
	addrs := []*netlink.Addr{{IPNet: &net.IPNet{IP: h.IPv4.AsSlice(), Mask: net.CIDRMask(PrefixLen4, 32)}}}
	if h.IPv6.IsValid() {
		addrs = append(addrs, &netlink.Addr{IPNet: &net.IPNet{IP: h.IPv6.AsSlice(), Mask: net.CIDRMask(PrefixLen6, 128)}, Flags: unix.IFA_F_NODAD})
	}
	for _, a := range addrs {
		if err := netlink.AddrAdd(link, a); err != nil {
			return fmt.Errorf("%s: add %s to %s: %w", h.NS, a.IPNet, h.Tap, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s: set %s up: %w", h.NS, h.Tap, err)
	}
	return nil
}

// close deletes the tap and the namespace.
func (h *Host) close() error {
	if h.ns < 0 {
		return nil
	}
	var errs []error
	derr := h.Do(func() error {
		link, err := netlink.LinkByName(h.Tap)
		if err != nil {
			return nil // never created, or already gone
		}
		return netlink.LinkDel(link)
	})
	if derr != nil {
		errs = append(errs, fmt.Errorf("delete tap %s: %w", h.Tap, derr))
	}
	h.ns.Close()
	h.ns = -1
	if err := netns.DeleteNamed(h.NS); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("delete namespace %s: %w", h.NS, err))
	}
	return errors.Join(errs...)
}

// Do runs fn inside the host namespace on a goroutine locked to its OS
// thread and returns fn's error. Sockets fn creates belong to the namespace
// and keep working from any goroutine afterwards. If the thread cannot
// return to its original namespace it stays locked, so the runtime retires
// it instead of reusing it (as in cilium/ebpf internal/testutils).
func (h *Host) Do(fn func() error) error {
	if h.ns < 0 {
		return fmt.Errorf("namespace %s is closed", h.NS)
	}
	return vethpair.DoIn(h.ns, h.NS, fn)
}

// Command returns a command that runs name inside the host namespace.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// JoinGuests puts the guests of vms on one Ethernet segment, as hosts on
// one switch: in the first VM's namespace a bridge holds its tap and, for
// each other VM, one end of a veth pair whose other end is bridged with
// that VM's tap in its own namespace. The taps lose their host addresses
// (every namespace has the same one), so the segment carries only the
// guests' traffic. The links go with the namespaces when the VMs close.
// Each guest needs an address and MAC of its own (Config.GuestIPv4,
// GuestMAC).
func JoinGuests(vms ...*VM) error {
	if len(vms) < 2 {
		return errors.New("interop: JoinGuests needs two VMs or more")
	}
	hub := vms[0].Host
	for _, vm := range vms {
		h := vm.Host
		if err := h.Do(func() error { return h.bridgeTap() }); err != nil {
			return err
		}
	}
	for i, vm := range vms[1:] {
		spoke := vm.Host
		nsFd, err := netns.GetFromName(spoke.NS)
		if err != nil {
			return fmt.Errorf("interop: open namespace %s: %w", spoke.NS, err)
		}
		hubEnd, spokeEnd := fmt.Sprintf("ndkj%d", i), "ndkjoin"
		err = hub.Do(func() error {
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hubEnd, MTU: hub.MTU}, PeerName: spokeEnd, PeerNamespace: netlink.NsFd(nsFd)}
			if err := netlink.LinkAdd(v); err != nil {
				return fmt.Errorf("%s: add veth %s to %s: %w", hub.NS, hubEnd, spoke.NS, err)
			}
			return enslave(hubEnd)
		})
		nsFd.Close()
		if err != nil {
			return err
		}
		if err := spoke.Do(func() error { return enslave(spokeEnd) }); err != nil {
			return err
		}
	}
	return nil
}

// joinBridge is the bridge JoinGuests makes in each VM's namespace.
const joinBridge = "ndkbr0"

// bridgeTap makes joinBridge in h's namespace, moves the tap's addresses
// off it and bridges it; it runs inside the namespace.
func (h *Host) bridgeTap() error {
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: joinBridge, MTU: h.MTU}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("%s: add bridge: %w", h.NS, err)
	}
	tap, err := netlink.LinkByName(h.Tap)
	if err != nil {
		return fmt.Errorf("%s: find %s: %w", h.NS, h.Tap, err)
	}
	addrs, err := netlink.AddrList(tap, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("%s: addresses of %s: %w", h.NS, h.Tap, err)
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(tap, &a); err != nil {
			return fmt.Errorf("%s: remove %s from %s: %w", h.NS, a.IPNet, h.Tap, err)
		}
	}
	if err := enslave(h.Tap); err != nil {
		return err
	}
	if err := quietIPv6(joinBridge); err != nil {
		return err
	}
	return netlink.LinkSetUp(br)
}

// quietIPv6 turns IPv6 off on link name (in the current namespace), so
// that it sends no router solicitations or MLD reports onto the segment.
func quietIPv6(name string) error {
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0); err != nil {
		return fmt.Errorf("disable IPv6 on %s: %w", name, err)
	}
	return nil
}

// enslave puts link name under joinBridge and sets it up.
func enslave(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	br, err := netlink.LinkByName(joinBridge)
	if err != nil {
		return fmt.Errorf("find %s: %w", joinBridge, err)
	}
	if err := netlink.LinkSetMaster(link, br); err != nil {
		return fmt.Errorf("bridge %s: %w", name, err)
	}
	if link.Type() == "veth" {
		if err := quietIPv6(name); err != nil {
			return err
		}
	}
	return netlink.LinkSetUp(link)
}
