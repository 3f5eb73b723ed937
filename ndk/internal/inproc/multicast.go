package inproc

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Multicast groups (rc's multicast.go). A UD QP joins a group as
// rdma_join_multicast and ibv_attach_mcast do together: the engine makes
// it a member; the first member of a group has the interface join it in
// the kernel (IP_ADD_MEMBERSHIP, IPV6_JOIN_GROUP on a socket of the
// adapter's namespace, as rdma_cm's cma_igmp_send), which sends the IGMP
// or MLD report switches forward by and has the NIC accept the group's
// MAC; the steering program takes the group's frames (loader.AddGroup)
// and steers rocev2.MulticastQPN to the management queue's socket, the
// others forwarding what RSS puts on theirs to every engine with members
// (rc.Config.Groups). The last member's leave undoes it all.

// mcastState is the provider's record of its groups, under p.mu.
type mcastState struct {
	members map[netip.Addr]map[*rc.QP]struct{}
	// engines is what rc.Config.Groups reads: each group's engines with
	// members. Replaced, never changed in place, under p.mu.
	engines map[netip.Addr][]*rc.Engine
	// fd4 and fd6 hold the kernel memberships: sockets made in the
	// adapter's namespace at Open (-1: none, over an in-memory port or
	// without that family).
	fd4, fd6 int
}

func (p *Provider) openMulticastSockets() {
	p.mc.fd4, p.mc.fd6 = -1, -1
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		p.mc.fd4 = fd
	}
	if fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		p.mc.fd6 = fd
	}
}

func (p *Provider) closeMulticastSockets() {
	for _, fd := range []int{p.mc.fd4, p.mc.fd6} {
		if fd > 0 {
			unix.Close(fd)
		}
	}
	p.mc.fd4, p.mc.fd6 = -1, -1
}

// groupEngines is rc.Config.Groups.
func (p *Provider) groupEngines(group netip.Addr) []*rc.Engine {
	p.mcMu.RLock()
	e := p.mc.engines[group]
	p.mcMu.RUnlock()
	return e
}

// JoinMulticast makes the UD QP q a member of group.
func (p *Provider) JoinMulticast(q *rc.QP, group netip.Addr) error {
	group = group.Unmap()
	if _, ok := rocev2.MulticastMAC(group); !ok {
		return fmt.Errorf("%w: %v is not a multicast address", rc.ErrBadConfig, group)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if _, ok := p.mc.members[group][q]; ok {
		return nil
	}
	if err := q.AttachMulticast(group); err != nil {
		return err
	}
	m := p.mc.members[group]
	if len(m) == 0 {
		if err := p.joinWire(group); err != nil {
			_ = q.DetachMulticast(group)
			return err
		}
		if m == nil {
			if p.mc.members == nil {
				p.mc.members = make(map[netip.Addr]map[*rc.QP]struct{})
			}
			m = make(map[*rc.QP]struct{})
			p.mc.members[group] = m
		}
	}
	m[q] = struct{}{}
	p.setGroupEngines(group)
	return nil
}

// LeaveMulticast ends q's membership of group.
func (p *Provider) LeaveMulticast(q *rc.QP, group netip.Addr) error {
	group = group.Unmap()
	// Under p.mu, as the join: the engine's record and the provider's
	// change together.
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := q.DetachMulticast(group); err != nil {
		return err
	}
	return p.forgetMember(q, group)
}

// forgetMember drops q from group's record, and the group from the wire
// after its last member; p.mu is held.
func (p *Provider) forgetMember(q *rc.QP, group netip.Addr) error {
	m := p.mc.members[group]
	if _, ok := m[q]; !ok {
		return nil
	}
	delete(m, q)
	p.setGroupEngines(group)
	if len(m) > 0 {
		return nil
	}
	delete(p.mc.members, group)
	return p.leaveWire(group)
}

// setGroupEngines recomputes group's engines; p.mu is held.
func (p *Provider) setGroupEngines(group netip.Addr) {
	var list []*rc.Engine
	for q := range p.mc.members[group] {
		e := q.Engine()
		seen := false
		for _, x := range list {
			seen = seen || x == e
		}
		if !seen {
			list = append(list, e)
		}
	}
	next := make(map[netip.Addr][]*rc.Engine, len(p.mc.engines)+1)
	for g, l := range p.mc.engines {
		next[g] = l
	}
	if len(list) == 0 {
		delete(next, group)
	} else {
		next[group] = list
	}
	p.mcMu.Lock()
	p.mc.engines = next
	p.mcMu.Unlock()
}

// joinWire has the interface and the steering program take group's
// frames; p.mu is held.
func (p *Provider) joinWire(group netip.Addr) error {
	if p.xdp == nil {
		return nil // an in-memory port: every frame reaches the engine
	}
	if err := p.kernelMembership(group, true); err != nil {
		return err
	}
	if err := p.xdp.AddGroup(group); err != nil {
		_ = p.kernelMembership(group, false)
		return err
	}
	if p.noGroupsSteered() {
		if err := p.xdp.AddQP(rocev2.MulticastQPN, 0); err != nil {
			_ = p.xdp.RemoveGroup(group)
			_ = p.kernelMembership(group, false)
			return fmt.Errorf("steer the multicast QPN: %w", err)
		}
	}
	return nil
}

// noGroupsSteered reports whether no group has members; p.mu is held.
func (p *Provider) noGroupsSteered() bool {
	for _, m := range p.mc.members {
		if len(m) > 0 {
			return false
		}
	}
	return true
}

// leaveWire undoes joinWire; p.mu is held, group has no members left.
func (p *Provider) leaveWire(group netip.Addr) error {
	if p.xdp == nil {
		return nil
	}
	err := p.xdp.RemoveGroup(group)
	if len(p.mc.members) == 0 {
		err = errors.Join(err, p.xdp.RemoveQP(rocev2.MulticastQPN))
	}
	return errors.Join(err, p.kernelMembership(group, false))
}

// kernelMembership joins or leaves group on the adapter's interface.
func (p *Provider) kernelMembership(group netip.Addr, join bool) error {
	what := "join"
	if !join {
		what = "leave"
	}
	var err error
	if group.Is4() {
		if p.mc.fd4 < 0 {
			return fmt.Errorf("%s multicast group %v: no IPv4 socket in the adapter's namespace", what, group)
		}
		opt := unix.IP_ADD_MEMBERSHIP
		if !join {
			opt = unix.IP_DROP_MEMBERSHIP
		}
		err = unix.SetsockoptIPMreqn(p.mc.fd4, unix.IPPROTO_IP, opt, &unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(p.link.Ifindex)})
	} else {
		if p.mc.fd6 < 0 {
			return fmt.Errorf("%s multicast group %v: no IPv6 socket in the adapter's namespace", what, group)
		}
		opt := unix.IPV6_JOIN_GROUP
		if !join {
			opt = unix.IPV6_LEAVE_GROUP
		}
		err = unix.SetsockoptIPv6Mreq(p.mc.fd6, unix.IPPROTO_IPV6, opt, &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(p.link.Ifindex)})
	}
	if err != nil {
		return fmt.Errorf("%s multicast group %v on interface %d: %w", what, group, p.link.Ifindex, err)
	}
	return nil
}

// dropGroupsOf forgets a closing QP's memberships (rc's Close ends them
// in the engine); p.mu is held.
func (p *Provider) dropGroupsOf(q *rc.QP, groups []netip.Addr) {
	for _, g := range groups {
		_ = p.forgetMember(q, g)
	}
}

// MulticastGroups returns the groups with members and how many QPs each
// has.
func (p *Provider) MulticastGroups() map[netip.Addr]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[netip.Addr]int, len(p.mc.members))
	for g, m := range p.mc.members {
		out[g] = len(m)
	}
	return out
}

// MaxIPv4Groups is how many IPv4 groups the adapter can join: the
// kernel's memberships per socket (net.ipv4.igmp_max_memberships, of the
// namespace the process's /proc/sys shows; 20, the kernel's default,
// where it cannot be read).
func MaxIPv4Groups() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/igmp_max_memberships")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			return n
		}
	}
	return 20
}
