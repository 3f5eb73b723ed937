package vethpair

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// StarConfig describes a star to build: Hosts hosts, each joined by a veth
// pair to a bridge in a hub namespace of its own, as hosts are joined to
// a switch.
type StarConfig struct {
	Hosts int // 2 to 16
	MTU   int // of every link; 0 means 1500
}

// Star is hosts joined through a bridge in the hub's namespace. Frames
// from one host to another leave the hub on that host's port
// (Star.Ports[i], inside Hub), whose egress qdisc a test may shape: the
// switch's output queue.
type Star struct {
	Hosts []*Host
	// Hub is the switch's namespace (its Link is the bridge); Ports[i]
	// is the name, inside it, of the bridge port that leads to Hosts[i].
	Hub   *Host
	Ports []string

	closeOnce sync.Once
	closeErr  error
}

// NewStar builds a star; the caller must Close it. Host i has the
// addresses 198.18.0.(i+1)/24 and 2001:2::(i+1)/64 and a permanent
// neighbour entry for every other host, so no ARP crosses the hub.
func NewStar(cfg StarConfig) (*Star, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 68 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("MTU %d out of range 68..65535", cfg.MTU)
	}
	if cfg.Hosts < 2 || cfg.Hosts > 16 {
		return nil, fmt.Errorf("host count %d out of range 2..16", cfg.Hosts)
	}
	RemoveStale()
	id := fmt.Sprintf("%s%d-%d", NamePrefix, os.Getpid(), seq.Add(1))
	s := &Star{Hub: &Host{Name: id + "-hub", Link: "br0", MTU: cfg.MTU, Queues: 1, ns: -1}}
	for i := range cfg.Hosts {
		s.Hosts = append(s.Hosts, &Host{
			Name: fmt.Sprintf("%s-h%d", id, i), Link: "ndk0", MTU: cfg.MTU, Queues: 1, ns: -1,
			IPv4: netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}),
			IPv6: netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 15: byte(i + 1)}),
		})
		s.Ports = append(s.Ports, fmt.Sprintf("port%d", i))
	}
	if err := s.build(cfg); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func (s *Star) build(cfg StarConfig) error {
	var err error
	for _, h := range append([]*Host{s.Hub}, s.Hosts...) {
		if h.ns, err = NewNamedNS(h.Name); err != nil {
			return fmt.Errorf("create namespace %s: %w", h.Name, err)
		}
	}
	hub, err := netlink.NewHandleAt(s.Hub.ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", s.Hub.Name, err)
	}
	defer hub.Close()
	lo, err := hub.LinkByName("lo")
	if err == nil {
		err = hub.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("%s: set lo up: %w", s.Hub.Name, err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: s.Hub.Link, MTU: cfg.MTU}}
	if err := hub.LinkAdd(br); err != nil {
		return fmt.Errorf("%s: create bridge: %w", s.Hub.Name, err)
	}
	// The bridge forwards at once (no STP listening and learning delay)
	// and carries no addresses of its own.
	if err := hub.LinkSetUp(br); err != nil {
		return fmt.Errorf("%s: set bridge up: %w", s.Hub.Name, err)
	}
	for i, h := range s.Hosts {
		nl, err := netlink.NewHandleAt(h.ns)
		if err != nil {
			return fmt.Errorf("netlink in %s: %w", h.Name, err)
		}
		err = s.attach(hub, br, nl, h, s.Ports[i], cfg.MTU)
		nl.Close()
		if err != nil {
			return err
		}
	}
	for _, h := range s.Hosts {
		nl, err := netlink.NewHandleAt(h.ns)
		if err != nil {
			return fmt.Errorf("netlink in %s: %w", h.Name, err)
		}
		for _, peer := range s.Hosts {
			if peer != h && err == nil {
				err = h.addNeighbour(nl, peer)
			}
		}
		nl.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// attach joins h to the bridge br through a veth whose hub end is port.
func (s *Star) attach(hub *netlink.Handle, br *netlink.Bridge, nl *netlink.Handle, h *Host, port string, mtu int) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: port, MTU: mtu, NumTxQueues: 1, NumRxQueues: 1},
		PeerName:      h.Link,
		PeerNamespace: netlink.NsFd(h.ns),
		PeerMTU:       uint32(mtu),
	}
	if err := hub.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s/%s: %w", port, h.Link, err)
	}
	p, err := hub.LinkByName(port)
	if err != nil {
		return fmt.Errorf("%s: find %s: %w", s.Hub.Name, port, err)
	}
	if err := hub.LinkSetMaster(p, br); err != nil {
		return fmt.Errorf("%s: add %s to the bridge: %w", s.Hub.Name, port, err)
	}
	if err := hub.LinkSetUp(p); err != nil {
		return fmt.Errorf("%s: set %s up: %w", s.Hub.Name, port, err)
	}
	if err := h.configure(nl); err != nil {
		return err
	}
	return h.waitOperUp(nl, 5*time.Second)
}

// Close deletes the hub's and the hosts' namespaces and with them every
// link. It is safe to call more than once.
func (s *Star) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		for _, h := range append([]*Host{s.Hub}, s.Hosts...) {
			if h.ns >= 0 {
				h.ns.Close()
				h.ns = -1
			}
			if err := deleteNamed(h.Name); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete namespace %s: %w", h.Name, err))
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
