package loader

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/ndkxdp/ndkxdp/bpf"
)

// GSIQPN is the general services QP (IBTA 3.5.1), which carries IB CM MADs.
// Steer it to the management queue with AddQP(GSIQPN, queue).
const GSIQPN = 1

// maxQPN is the largest 24-bit BTH DestQP.
const maxQPN = 1<<24 - 1

const (
	defaultMaxQueues = 64
	defaultMaxQPs    = 65536
)

var (
	// ErrQPNotFound is returned by RemoveQP for a QP not in the steering map.
	ErrQPNotFound = errors.New("qp not in steering map")
	// ErrInterfaceNotFound is returned when the named interface does not
	// exist in the caller's network namespace.
	ErrInterfaceNotFound = errors.New("interface not found")
)

// Options configure Load, Attach and OpenPinned. The zero value is usable.
type Options struct {
	// Mode selects driver or generic XDP; AttachAuto (the zero value)
	// tries driver mode and falls back to generic.
	Mode AttachMode
	// MaxQueues is the number of RX queues the socket map can hold
	// (queue indices 0..MaxQueues-1). Default 64.
	MaxQueues uint32
	// MaxQPs is the capacity of the QP steering map. Default 65536.
	MaxQPs uint32
	// PinRoot is the bpffs directory under which Pin creates
	// <PinRoot>/<ifname>. Default DefaultPinRoot.
	PinRoot string
	// Logger receives the reason for a fallback to generic mode. Default
	// slog.Default().
	Logger *slog.Logger
}

func (o *Options) withDefaults() Options {
	d := *o
	if d.MaxQueues == 0 {
		d.MaxQueues = defaultMaxQueues
	}
	if d.MaxQPs == 0 {
		d.MaxQPs = defaultMaxQPs
	}
	if d.PinRoot == "" {
		d.PinRoot = DefaultPinRoot
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d
}

// Program is the loaded steering program and its maps, not yet attached to
// an interface. Its methods are safe for concurrent use: each is one or a few
// bpf(2) calls on kernel maps.
type Program struct {
	prog       *ebpf.Program
	xsks       *ebpf.Map
	qpOwner    *ebpf.Map
	counters   *ebpf.Map
	localCfg   *ebpf.Map
	localAddrs *ebpf.Map
	opts       Options
}

// Load loads the program and creates its maps, without attaching anything.
func Load(opts Options) (*Program, error) {
	o := opts.withDefaults()
	spec, err := bpf.LoadSteer()
	if err != nil {
		return nil, fmt.Errorf("loader: load: %w", err)
	}
	spec.Maps[bpf.SteerMapXsks].MaxEntries = o.MaxQueues
	spec.Maps[bpf.SteerMapQpOwner].MaxEntries = o.MaxQPs

	// LoadAndAssign creates only what objs names and the program
	// references, which leaves out the .rodata map holding reason_unused
	// (bpf/doc.go).
	var objs struct {
		bpf.SteerPrograms
		bpf.SteerMaps
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("loader: load: verifier rejected the program: %+v", verr)
		}
		return nil, fmt.Errorf("loader: load: %w", err)
	}
	return &Program{
		prog:       objs.Steer,
		xsks:       objs.Xsks,
		qpOwner:    objs.QpOwner,
		counters:   objs.Counters,
		localCfg:   objs.LocalCfg,
		localAddrs: objs.LocalAddrs,
		opts:       o,
	}, nil
}

// RegisterSocket puts the AF_XDP socket fd in the socket map at queue.
// The socket must be bound to the same queue of the interface the program is
// attached to: the kernel delivers a redirected frame only to a socket bound
// to the queue it arrived on, and drops it otherwise. The entry lasts until
// UnregisterSocket or until the socket is closed: the kernel removes a
// released socket from every socket map (net/xdp/xsk.c, xsk_release).
func (p *Program) RegisterSocket(queue uint32, fd int) error {
	if queue >= p.opts.MaxQueues {
		return fmt.Errorf("loader: register socket for queue %d: queue out of range (MaxQueues %d)", queue, p.opts.MaxQueues)
	}
	if fd < 0 {
		return fmt.Errorf("loader: register socket for queue %d: invalid fd %d", queue, fd)
	}
	if err := p.xsks.Put(queue, uint32(fd)); err != nil {
		return fmt.Errorf("loader: register socket fd %d for queue %d: %w", fd, queue, err)
	}
	return nil
}

// UnregisterSocket removes the socket of queue; RoCEv2 frames arriving on
// that queue are then dropped (ReasonDropNoSocket). Removing an empty slot is
// not an error.
func (p *Program) UnregisterSocket(queue uint32) error {
	if queue >= p.opts.MaxQueues {
		return fmt.Errorf("loader: unregister socket for queue %d: queue out of range (MaxQueues %d)", queue, p.opts.MaxQueues)
	}
	if err := p.xsks.Delete(queue); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("loader: unregister socket for queue %d: %w", queue, err)
	}
	return nil
}

// AddQP steers frames for destination QP qpn to queue, replacing an earlier
// owner.
func (p *Program) AddQP(qpn, queue uint32) error {
	if qpn == 0 || qpn > maxQPN {
		return fmt.Errorf("loader: add qp %#x: QPN must be in 1..%#x (QP0 is not used on RoCE)", qpn, maxQPN)
	}
	if queue >= p.opts.MaxQueues {
		return fmt.Errorf("loader: add qp %#x: queue %d out of range (MaxQueues %d)", qpn, queue, p.opts.MaxQueues)
	}
	if err := p.qpOwner.Put(qpn, queue); err != nil {
		return fmt.Errorf("loader: add qp %#x on queue %d: %w", qpn, queue, err)
	}
	return nil
}

// RemoveQP stops steering qpn; its frames are then dropped
// (ReasonDropUnknownQP). It returns an error wrapping ErrQPNotFound if qpn
// was not steered.
func (p *Program) RemoveQP(qpn uint32) error {
	if err := p.qpOwner.Delete(qpn); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("loader: remove qp %#x: %w", qpn, ErrQPNotFound)
		}
		return fmt.Errorf("loader: remove qp %#x: %w", qpn, err)
	}
	return nil
}

// QPs returns the steering map: destination QPN -> owning queue. A daemon
// taking over pinned maps reads its predecessor's QPs with it.
func (p *Program) QPs() (map[uint32]uint32, error) {
	qps := make(map[uint32]uint32)
	var qpn, queue uint32
	it := p.qpOwner.Iterate()
	for it.Next(&qpn, &queue) {
		qps[qpn] = queue
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("loader: list qps: %w", err)
	}
	return qps, nil
}

// MaxLocalAddrs is how many addresses SetLocal takes: the capacity of the
// program's local_addrs map.
const MaxLocalAddrs = 64

// SetLocal tells the program the adapter's own unicast MAC and IP
// addresses: from then on a RoCEv2 frame addressed to another MAC, or to
// an IP not among addrs, is dropped (ReasonDropWrongDstMAC,
// ReasonDropWrongDstIP). It replaces what an earlier call set. Until the
// first call nothing is checked, so a program loaded only to steer (a
// benchmark, a test endpoint) needs none.
func (p *Program) SetLocal(mac [6]byte, addrs ...netip.Addr) error {
	if mac == [6]byte{} || mac[0]&1 != 0 {
		return fmt.Errorf("loader: set local addresses: %x is not a unicast MAC", mac)
	}
	if len(addrs) == 0 || len(addrs) > MaxLocalAddrs {
		return fmt.Errorf("loader: set local addresses: %d addresses, want 1..%d", len(addrs), MaxLocalAddrs)
	}
	want := make(map[bpf.SteerLocalAddr]bool, len(addrs))
	for _, a := range addrs {
		if !a.IsValid() {
			return fmt.Errorf("loader: set local addresses: invalid address")
		}
		want[bpf.SteerLocalAddr{Addr: a.Unmap().As16()}] = true
	}
	// Add the new addresses before dropping the old ones, and switch the
	// check on last: frames for an address being kept are never dropped.
	for k := range want {
		if err := p.localAddrs.Put(k, localUnicast); err != nil {
			return fmt.Errorf("loader: set local address %v: %w", netip.AddrFrom16(k.Addr).Unmap(), err)
		}
	}
	var stale []bpf.SteerLocalAddr
	var k bpf.SteerLocalAddr
	var v uint8
	it := p.localAddrs.Iterate()
	for it.Next(&k, &v) {
		if !want[k] && v != localGroup {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("loader: list local addresses: %w", err)
	}
	for _, k := range stale {
		if err := p.localAddrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("loader: remove local address %v: %w", netip.AddrFrom16(k.Addr).Unmap(), err)
		}
	}
	if err := p.localCfg.Put(uint32(0), bpf.SteerLocalCfg{Mac: mac, Check: 1}); err != nil {
		return fmt.Errorf("loader: set local MAC: %w", err)
	}
	return nil
}

// Local returns what SetLocal set: the MAC and addresses the program
// accepts RoCEv2 frames for; ok is false while nothing is checked.
func (p *Program) Local() (mac [6]byte, addrs []netip.Addr, ok bool, err error) {
	var cfg bpf.SteerLocalCfg
	if err := p.localCfg.Lookup(uint32(0), &cfg); err != nil {
		return mac, nil, false, fmt.Errorf("loader: read local MAC: %w", err)
	}
	var k bpf.SteerLocalAddr
	var v uint8
	it := p.localAddrs.Iterate()
	for it.Next(&k, &v) {
		if v != localGroup {
			addrs = append(addrs, netip.AddrFrom16(k.Addr).Unmap())
		}
	}
	if err := it.Err(); err != nil {
		return mac, nil, false, fmt.Errorf("loader: list local addresses: %w", err)
	}
	return cfg.Mac, addrs, cfg.Check != 0, nil
}

// The kinds of local_addrs entries (steer.c's enum local_kind).
const (
	localUnicast uint8 = 1
	localGroup   uint8 = 2
)

// AddGroup makes the program take RoCEv2 frames for the multicast group
// (an IPv4 or IPv6 multicast address) sent to the group's MAC, and steer
// them by their QPN, rocev2.MulticastQPN (AddQP). Groups share
// local_addrs' MaxLocalAddrs entries with the adapter's addresses, and
// SetLocal keeps them. Until SetLocal nothing is checked, and every frame
// goes on to the QP lookup anyway.
func (p *Program) AddGroup(group netip.Addr) error {
	group = group.Unmap()
	if !group.IsMulticast() {
		return fmt.Errorf("loader: add group: %v is not a multicast address", group)
	}
	k := bpf.SteerLocalAddr{Addr: group.As16()}
	if err := p.localAddrs.Put(k, localGroup); err != nil {
		return fmt.Errorf("loader: add group %v: %w", group, err)
	}
	return nil
}

// RemoveGroup stops taking the group's frames; it returns an error
// wrapping ErrGroupNotFound if the group was not added.
func (p *Program) RemoveGroup(group netip.Addr) error {
	group = group.Unmap()
	k := bpf.SteerLocalAddr{Addr: group.As16()}
	var v uint8
	if err := p.localAddrs.Lookup(k, &v); err != nil || v != localGroup {
		return fmt.Errorf("loader: remove group %v: %w", group, ErrGroupNotFound)
	}
	if err := p.localAddrs.Delete(k); err != nil {
		return fmt.Errorf("loader: remove group %v: %w", group, err)
	}
	return nil
}

// ErrGroupNotFound is RemoveGroup's error for a group never added.
var ErrGroupNotFound = errors.New("multicast group not added")

// Groups lists the groups AddGroup added.
func (p *Program) Groups() ([]netip.Addr, error) {
	var out []netip.Addr
	var k bpf.SteerLocalAddr
	var v uint8
	it := p.localAddrs.Iterate()
	for it.Next(&k, &v) {
		if v == localGroup {
			out = append(out, netip.AddrFrom16(k.Addr).Unmap())
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("loader: list groups: %w", err)
	}
	return out, nil
}

// Counters reads the per-CPU counters and sums them by reason.
func (p *Program) Counters() (Counters, error) {
	var c Counters
	var perCPU []uint64
	for r := range c {
		if err := p.counters.Lookup(uint32(r), &perCPU); err != nil {
			return Counters{}, fmt.Errorf("loader: read counter %s: %w", Reason(r), err)
		}
		for _, n := range perCPU {
			c[r] += n
		}
	}
	return c, nil
}

// Close releases the program and maps. Anything attached or pinned keeps
// its own reference.
func (p *Program) Close() error {
	return errors.Join(p.prog.Close(), p.xsks.Close(), p.qpOwner.Close(), p.counters.Close(), p.localCfg.Close(), p.localAddrs.Close())
}
