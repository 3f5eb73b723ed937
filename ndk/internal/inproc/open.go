package inproc

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// ErrAddress marks an Open that failed because the interface has no
// usable address (or not the one asked for).
var ErrAddress = errors.New("no usable address")

// framesPerQueue is each queue's share of the UMEM: 4096 frames of 4 KiB
// (16 MiB), the afxdp defaults for one socket; the buffer pool gets the
// same again.
const framesPerQueue = 4096

// Open builds the provider of the network interface ifname: it attaches
// the steering program, maps one UMEM shared by cfg.Queues AF_XDP sockets
// (multi-buffer when the MTU needs frames over one 4 KiB chunk), starts
// one engine per queue and connection management on the first. It must
// run in the interface's network namespace, on a thread that stays there
// (as loader.Attach). Errors wrap ErrAddress when the interface has no
// usable address.
func Open(ifname string, cfg Config) (*Provider, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", ifname, err)
	}
	attrs := l.Attrs()
	link := Link{Ifindex: attrs.Index, MTU: attrs.MTU}
	copy(link.MAC[:], attrs.HardwareAddr)
	if link.Addr, err = localAddress(l, cfg.Address); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAddress, err)
	}
	var ok bool
	if link.PathMTU, ok = rocev2.MTUForNetdev(attrs.MTU); !ok {
		return nil, fmt.Errorf("MTU %d below RoCE's minimum", attrs.MTU)
	}
	p, err := newProvider(link, cfg)
	if err != nil {
		return nil, err
	}
	if err := p.open(ifname, cfg); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Provider) open(ifname string, cfg Config) error {
	p.mgmt = newManagement(p)
	if err := p.mgmt.openNamespace(); err != nil {
		return err
	}
	p.openMulticastSockets()
	if err := p.openXDP(ifname, cfg); err != nil {
		return err
	}
	// Groups a pinned attachment's dead owner had joined are nobody's.
	if groups, err := p.xdp.Groups(); err == nil && len(groups) > 0 {
		for _, g := range groups {
			_ = p.xdp.RemoveGroup(g)
		}
		_ = p.xdp.RemoveQP(rocev2.MulticastQPN)
	}
	// Frames for other hosts stop in the program; the engines check again
	// (rc.Config.Addrs). The CM serves every address of the interface
	// (isLocal), so all of them are the adapter's.
	if err := p.setLocal(interfaceAddrs(ifname, p.link.Addr)); err != nil {
		return err
	}
	if err := p.mgmt.watchAddrs(); err != nil {
		return err
	}
	// QP1's datagrams go to the management queue, whose engine hands them
	// to the CM (loader.GSIQPN); the other engines forward those that
	// arrive on their queues to it.
	p.setOwner(loader.GSIQPN, p.engines[0])
	if err := p.xdp.AddQP(loader.GSIQPN, 0); err != nil {
		return fmt.Errorf("steer QP1: %w", err)
	}
	if err := p.mgmt.start(cmParams(cfg)); err != nil {
		return fmt.Errorf("connection management: %w", err)
	}
	return nil
}

// interfaceAddrs lists the addresses of ifname, first the one QPs send
// from; on an error, only that one.
func interfaceAddrs(ifname string, first netip.Addr) []netip.Addr {
	out := []netip.Addr{first}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return out
	}
	list, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return out
	}
	for _, x := range list {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() != first {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// setLocal makes addrs (and the link's MAC) the only destinations the
// steering program and the engines take RoCEv2 frames for: the first
// loader.MaxLocalAddrs of them, the link's own address first.
func (p *Provider) setLocal(addrs []netip.Addr) error {
	addrs = addrs[:min(len(addrs), loader.MaxLocalAddrs)]
	if p.xdp != nil {
		if err := p.xdp.SetLocal(p.link.MAC, addrs...); err != nil {
			return err
		}
	}
	for _, e := range p.engines {
		e.SetAddrs(addrs)
	}
	return nil
}

func localAddress(link netlink.Link, want netip.Addr) (netip.Addr, error) {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("list addresses: %w", err)
	}
	var v6 netip.Addr
	for _, x := range addrs {
		ip, ok := netip.AddrFromSlice(x.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		switch {
		case want.IsValid():
			if ip == want {
				return ip, nil
			}
		case ip.Is4():
			return ip, nil
		case ip.IsGlobalUnicast() && !v6.IsValid():
			v6 = ip
		}
	}
	if want.IsValid() {
		return netip.Addr{}, fmt.Errorf("address %v is not on the interface", want)
	}
	if v6.IsValid() {
		return v6, nil
	}
	return netip.Addr{}, errors.New("interface has no IPv4 or global IPv6 address")
}

// openXDP attaches the program and builds one socket, port and engine per
// queue over one UMEM.
func (p *Provider) openXDP(ifname string, cfg Config) error {
	var err error
	if p.xdp, err = attach(ifname, cfg); err != nil {
		return err
	}
	if p.umem, err = afxdp.NewUMEM(afxdp.UMEMConfig{NumFrames: uint32(framesPerQueue * (cfg.Queues + 1))}); err != nil {
		return err
	}
	parts, err := p.umem.Partition(cfg.Queues + 1)
	if err != nil {
		return err
	}
	// A frame that does not fit one chunk (after the kernel's 256-byte
	// headroom) needs XDP_USE_SG (DESIGN.md, Memory).
	multi := p.link.MTU+rocev2.EthernetLen+rocev2.VLANTagLen > int(p.umem.FrameSize())-256
	// The buffer pool's memory (AllocBuffer) stays put until the ACK that
	// retires a request using it: the ports send it in place.
	lo, hi := parts[cfg.Queues].Range()
	// The pool's allocations carry headroom and tailroom (port.TxSlots):
	// a payload that is one whole allocation leaves as one descriptor,
	// which a zero-copy socket without multi-buffer can send.
	if p.bufferSlots, err = port.NewTxSlots(int(hi - lo)); err != nil {
		return err
	}
	// Asked here, in the interface's namespace: the queues' bind reasons
	// name what the device offers (inspect.go).
	dev, err := afxdp.QueryXDPDevice(p.link.Ifindex)
	p.xdpFeatures, p.xdpZCMaxSegs, p.xdpFeaturesErr = dev.Features, dev.ZCMaxSegs, err
	for q := 0; q < cfg.Queues; q++ {
		sc := afxdp.SocketConfig{Ifindex: p.link.Ifindex, Queue: uint32(q), MultiBuffer: multi, Mode: cfg.BindMode}
		if cfg.BusyPoll > 0 {
			sc.BusyPoll = &afxdp.BusyPollConfig{Timeout: cfg.BusyPoll, Prefer: true}
		}
		sock, err := afxdp.NewSocket(p.umem, sc)
		if err != nil {
			return fmt.Errorf("queue %d: %w", q, err)
		}
		if err := p.xdp.RegisterSocket(uint32(q), sock.FD()); err != nil {
			sock.Close()
			return fmt.Errorf("queue %d: %w", q, err)
		}
		xsk, err := port.NewXSK(sock, parts[q], port.XSKConfig{MTU: p.link.MTU, TxReference: [2]uint64{lo, hi}, TxSlots: p.bufferSlots})
		if err != nil {
			sock.Close()
			return fmt.Errorf("queue %d: %w", q, err)
		}
		if err := p.startEngine(xsk, cfg); err != nil {
			return err
		}
	}
	p.buffers = p.umem.Bytes()[lo:hi]
	return nil
}

// attach attaches the steering program, or with cfg.Pin takes over the
// attachment pinned for ifname, and pins a new one.
func attach(ifname string, cfg Config) (*loader.XDP, error) {
	lo := loader.Options{Mode: cfg.XDPMode, PinRoot: cfg.PinRoot}
	if !cfg.Pin {
		return loader.Attach(ifname, lo)
	}
	if _, err := os.Stat(loader.PinDir(ifname, lo)); err == nil {
		x, err := loader.OpenPinned(ifname, lo)
		if err != nil {
			return nil, fmt.Errorf("take over the attachment pinned at %s: %w", loader.PinDir(ifname, lo), err)
		}
		return x, nil
	}
	x, err := loader.Attach(ifname, lo)
	if err != nil {
		return nil, err
	}
	if err := x.Pin(); err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}
