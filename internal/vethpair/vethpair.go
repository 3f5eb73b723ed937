package vethpair

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NamePrefix starts the name of every namespace this package creates. The
// full name is NamePrefix + "<pid>-<n>-<a|b>", so a later run can tell which
// namespaces belong to a process that no longer exists.
const NamePrefix = "ndkx-"

// netnsDir is where named namespaces are bind-mounted (as by `ip netns add`).
const netnsDir = "/var/run/netns"

// Default addresses. Both ends sit in one /24 of the benchmarking range
// (RFC 2544) and one /64 of the IPv6 benchmarking range (RFC 5180).
var (
	DefaultIPv4A = netip.MustParseAddr("198.18.0.1")
	DefaultIPv4B = netip.MustParseAddr("198.18.0.2")
	DefaultIPv6A = netip.MustParseAddr("2001:2::1")
	DefaultIPv6B = netip.MustParseAddr("2001:2::2")
)

const (
	ipv4PrefixLen = 24
	ipv6PrefixLen = 64
)

// Config describes the pair to build. The zero value is a 1500-byte MTU,
// single-queue pair.
type Config struct {
	// MTU of both veth ends; 0 means 1500.
	MTU int
	// Queues is the number of TX and RX queues of each veth end; 0 means 1.
	Queues int
	// StaticNeighbours installs permanent neighbour entries on both sides,
	// so that no ARP or neighbour discovery happens. Without it the kernel
	// resolves addresses as on a real link.
	StaticNeighbours bool
}

// Host is one end of the pair: a namespace with one veth interface in it.
type Host struct {
	Name    string           // namespace name under /var/run/netns
	Link    string           // interface name inside the namespace
	Ifindex int              // interface index inside the namespace
	MAC     net.HardwareAddr // interface MAC address
	IPv4    netip.Addr
	IPv6    netip.Addr
	MTU     int
	Queues  int

	ns netns.NsHandle
}

// Pair is two hosts joined by a veth pair.
type Pair struct {
	A, B *Host

	closeOnce sync.Once
	closeErr  error
}

var seq atomic.Uint32

// NewPair builds a pair; the caller must Close it.
func NewPair(cfg Config) (*Pair, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.MTU < 68 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("MTU %d out of range 68..65535", cfg.MTU)
	}
	if cfg.Queues < 1 || cfg.Queues > 64 {
		return nil, fmt.Errorf("queue count %d out of range 1..64", cfg.Queues)
	}
	RemoveStale()

	id := fmt.Sprintf("%s%d-%d", NamePrefix, os.Getpid(), seq.Add(1))
	p := &Pair{
		A: &Host{Name: id + "-a", Link: "ndk0", IPv4: DefaultIPv4A, IPv6: DefaultIPv6A, MTU: cfg.MTU, Queues: cfg.Queues, ns: -1},
		B: &Host{Name: id + "-b", Link: "ndk1", IPv4: DefaultIPv4B, IPv6: DefaultIPv6B, MTU: cfg.MTU, Queues: cfg.Queues, ns: -1},
	}
	if err := p.build(cfg); err != nil {
		cerr := p.Close()
		return nil, errors.Join(err, cerr)
	}
	return p, nil
}

func (p *Pair) build(cfg Config) error {
	var err error
	for _, h := range []*Host{p.A, p.B} {
		if h.ns, err = NewNamedNS(h.Name); err != nil {
			return fmt.Errorf("create namespace %s: %w", h.Name, err)
		}
	}
	nlA, err := netlink.NewHandleAt(p.A.ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", p.A.Name, err)
	}
	defer nlA.Close()
	nlB, err := netlink.NewHandleAt(p.B.ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", p.B.Name, err)
	}
	defer nlB.Close()

	// The veth is born inside A with its peer moved straight into B, so it
	// never appears in the caller's namespace.
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name:        p.A.Link,
			MTU:         cfg.MTU,
			NumTxQueues: cfg.Queues,
			NumRxQueues: cfg.Queues,
		},
		PeerName:        p.B.Link,
		PeerNamespace:   netlink.NsFd(p.B.ns),
		PeerMTU:         uint32(cfg.MTU),
		PeerNumTxQueues: uint32(cfg.Queues),
		PeerNumRxQueues: uint32(cfg.Queues),
	}
	if err := nlA.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s/%s (mtu %d, %d queues): %w", p.A.Link, p.B.Link, cfg.MTU, cfg.Queues, err)
	}
	for _, side := range []struct {
		h  *Host
		nl *netlink.Handle
	}{{p.A, nlA}, {p.B, nlB}} {
		if err := side.h.configure(side.nl); err != nil {
			return err
		}
	}
	// Both ends are up; the pair is ready once the kernel reports carrier
	// on each (a frame sent before that is lost).
	for _, side := range []struct {
		h  *Host
		nl *netlink.Handle
	}{{p.A, nlA}, {p.B, nlB}} {
		if err := side.h.waitOperUp(side.nl, 5*time.Second); err != nil {
			return err
		}
	}
	if cfg.StaticNeighbours {
		if err := p.A.addNeighbour(nlA, p.B); err != nil {
			return err
		}
		if err := p.B.addNeighbour(nlB, p.A); err != nil {
			return err
		}
	}
	return nil
}

func (h *Host) configure(nl *netlink.Handle) error {
	lo, err := nl.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("%s: find lo: %w", h.Name, err)
	}
	if err := nl.LinkSetUp(lo); err != nil {
		return fmt.Errorf("%s: set lo up: %w", h.Name, err)
	}
	link, err := nl.LinkByName(h.Link)
	if err != nil {
		return fmt.Errorf("%s: find %s: %w", h.Name, h.Link, err)
	}
	h.Ifindex = link.Attrs().Index
	h.MAC = link.Attrs().HardwareAddr
	v4 := &netlink.Addr{IPNet: &net.IPNet{IP: h.IPv4.AsSlice(), Mask: net.CIDRMask(ipv4PrefixLen, 32)}}
	if err := nl.AddrAdd(link, v4); err != nil {
		return fmt.Errorf("%s: add %s to %s: %w", h.Name, h.IPv4, h.Link, err)
	}
	// No duplicate address detection: the address is usable at once and
	// the link carries no DAD probes.
	v6 := &netlink.Addr{IPNet: &net.IPNet{IP: h.IPv6.AsSlice(), Mask: net.CIDRMask(ipv6PrefixLen, 128)}, Flags: unix.IFA_F_NODAD}
	if err := nl.AddrAdd(link, v6); err != nil {
		return fmt.Errorf("%s: add %s to %s: %w", h.Name, h.IPv6, h.Link, err)
	}
	// The link-local address the kernel gives the link as it comes up
	// would wait for duplicate address detection too, and change state a
	// second later: an address event that an adapter on the link acts on
	// in the middle of a test.
	if err := h.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+h.Link+"/accept_dad", []byte("0"), 0)
	}); err != nil {
		return fmt.Errorf("%s: no DAD on %s: %w", h.Name, h.Link, err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s: set %s up: %w", h.Name, h.Link, err)
	}
	return nil
}

func (h *Host) waitOperUp(nl *netlink.Handle, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		link, err := nl.LinkByIndex(h.Ifindex)
		if err != nil {
			return fmt.Errorf("%s: find %s: %w", h.Name, h.Link, err)
		}
		if link.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not operationally up after %v (state %v)", h.Name, h.Link, limit, link.Attrs().OperState)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *Host) addNeighbour(nl *netlink.Handle, peer *Host) error {
	for _, ip := range []netip.Addr{peer.IPv4, peer.IPv6} {
		n := &netlink.Neigh{
			LinkIndex:    h.Ifindex,
			State:        netlink.NUD_PERMANENT,
			IP:           ip.AsSlice(),
			HardwareAddr: peer.MAC,
		}
		if err := nl.NeighSet(n); err != nil {
			return fmt.Errorf("%s: neighbour %s -> %s: %w", h.Name, ip, peer.MAC, err)
		}
	}
	return nil
}

// Close deletes both namespaces and with them the veth pair. It is safe to
// call more than once.
func (p *Pair) Close() error {
	p.closeOnce.Do(func() {
		var errs []error
		for _, h := range []*Host{p.A, p.B} {
			if h == nil {
				continue
			}
			if h.ns >= 0 {
				h.ns.Close()
				h.ns = -1
			}
			if err := deleteNamed(h.Name); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete namespace %s: %w", h.Name, err))
			}
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

// Do runs fn inside the host's namespace on a goroutine locked to its OS
// thread, and returns fn's error. Sockets created by fn belong to the
// namespace and keep working from any goroutine after Do returns.
//
// If the thread cannot be moved back to its original namespace it is never
// unlocked, so the Go runtime retires it instead of reusing a thread that sits
// in the wrong namespace.
func (h *Host) Do(fn func() error) error {
	if h.ns < 0 {
		return fmt.Errorf("namespace %s is closed", h.Name)
	}
	return DoIn(h.ns, h.Name, fn)
}

// DoIn runs fn inside namespace ns (called name in errors) on a goroutine
// locked to its OS thread, and returns fn's error. It is Host.Do for
// namespaces this package did not build (test/interop's VM host).
func DoIn(ns netns.NsHandle, name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", name, err)
			return
		}
		ferr := errors.New("function exited without returning (runtime.Goexit, e.g. t.Fatal inside Do)")
		defer func() {
			if err := netns.Set(orig); err != nil {
				errc <- errors.Join(ferr, fmt.Errorf("leave namespace %s: %w", name, err))
				return // stay locked: the thread dies with the goroutine
			}
			runtime.UnlockOSThread()
			errc <- ferr
		}()
		ferr = fn()
	}()
	return <-errc
}

// Join returns a Host for the namespace that h names, opened by its
// name under /var/run/netns: for a process other than the one that built
// the pair (a benchmark's child process, measured on its own), which
// copies h's exported fields to it. The Host's Do then works in that
// process; Leave closes its handle.
func Join(h Host) (*Host, error) {
	ns, err := netns.GetFromPath(filepath.Join(netnsDir, h.Name))
	if err != nil {
		return nil, fmt.Errorf("join namespace %s: %w", h.Name, err)
	}
	h.ns = ns
	return &h, nil
}

// Leave closes the namespace handle of a Host from Join; the namespace
// itself stays, for the process that built it to delete.
func (h *Host) Leave() error {
	if h.ns < 0 {
		return nil
	}
	err := h.ns.Close()
	h.ns = -1
	return err
}

// Command returns a command that runs name inside the host's namespace
// (through `ip netns exec`).
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Netlink returns a netlink handle operating inside the host's namespace.
// The caller closes it.
func (h *Host) Netlink() (*netlink.Handle, error) {
	return netlink.NewHandleAt(h.ns)
}

// NewNamedNS creates a namespace bind-mounted under /var/run/netns and
// returns a handle to it, leaving the calling thread where it was.
func NewNamedNS(name string) (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	rc := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			rc <- result{-1, err}
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if rerr := netns.Set(orig); rerr != nil {
			// Leave the thread locked so that it exits with the goroutine.
			if err == nil {
				ns.Close()
			}
			rc <- result{-1, errors.Join(err, fmt.Errorf("return to original namespace: %w", rerr))}
			return
		}
		runtime.UnlockOSThread()
		rc <- result{ns, err}
	}()
	r := <-rc
	return r.ns, r.err
}

// RemoveStale deletes namespaces created by this package in processes that
// no longer exist. NewPair calls it; a daemon or tool may call it at start.
func RemoveStale() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := ownerPID(e.Name())
		if !ok || pid == os.Getpid() || ProcessAlive(pid) {
			continue
		}
		_ = deleteNamed(e.Name())
	}
}

// deleteNamed removes a namespace's bind mount and its file, as `ip netns
// delete` does, but unmounts until nothing is mounted there: /var/run/netns
// is a shared mount, and an `ip netns exec` running meanwhile (a test's
// daemon started the way operators do) can leave a second mount of the
// file propagated into this namespace, which the first unmount uncovers
// and the removal then fails on with EBUSY.
func deleteNamed(name string) error {
	path := filepath.Join(netnsDir, name)
	for range 16 {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			break // EINVAL: nothing mounted there any more
		}
	}
	return os.Remove(path)
}

// ownerPID extracts the PID from a name made by NewPair.
func ownerPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, NamePrefix)
	if !ok {
		return 0, false
	}
	pidStr, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	return pid, err == nil && pid > 0
}

// ProcessAlive reports whether process pid exists (used to tell stale
// namespaces and build directories from live ones).
func ProcessAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
