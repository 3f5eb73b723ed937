package inproc

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// ErrClosed is returned by CreateQP after Close.
var ErrClosed = errors.New("adapter closed")

// Link is the wire an adapter's QPs use.
type Link struct {
	Ifindex int        // 0 over an in-memory port
	MAC     rocev2.MAC // the interface's
	Addr    netip.Addr // the local IP address QPs send from
	MTU     int        // the interface's MTU
	PathMTU rocev2.MTU // the largest path MTU the interface carries
}

// Config is how to build a Provider.
type Config struct {
	// Regions is the adapter's memory-token table, which the engines
	// consult.
	Regions *memreg.Table
	// Queues is the number of device queues, each with its own AF_XDP
	// socket and engine (Open; at least 1).
	Queues     int
	Poll       rc.PollMode
	LockThread bool
	// EngineCPUs pins engine i to CPU EngineCPUs[i % len] (rc.Config.CPUs).
	EngineCPUs []int
	// AnySource and MaxQPs are rc.Config's.
	AnySource bool
	MaxQPs    int
	// InjectLoss is the fraction of received frames each engine's port
	// drops at random (lossyPort); 0 leaves the ports as they are.
	InjectLoss float64
	XDPMode    loader.AttachMode
	// Address is the local address to use (zero: the interface's first
	// IPv4 address, else its first global IPv6 one).
	Address netip.Addr
	// Capture, if set, receives every frame the engines send and receive
	// as a pcap stream (port.Capture).
	Capture io.Writer
	// CM is the IB CM's timers.
	CM cm.Params
	// Resolve replaces the kernel's routes and neighbours; over an
	// in-memory port, connection management runs only with it (OverPort).
	Resolve func(src, dst netip.Addr) (cm.PathInfo, error)
	// Pin pins the attachment under PinRoot/<ifname> (the daemon's): an
	// attachment pinned there already, left by a process that died, is
	// taken over instead of attached anew. Close unpins and detaches.
	Pin     bool
	PinRoot string // loader.DefaultPinRoot when empty
	// SpinTime is rc.Config.SpinTime (zero: its default).
	SpinTime time.Duration
	// BindMode is the AF_XDP sockets' bind mode (zero-copy or copy).
	BindMode afxdp.BindMode
	// BusyPoll, if non-zero, sets SO_BUSY_POLL to it and
	// SO_PREFER_BUSY_POLL on every socket.
	BusyPoll time.Duration
	// Traffic and CC are rc.Config's.
	Traffic rc.TrafficClass
	CC      rc.CCConfig
}

// Provider is an adapter's datapath in this process: the engines, the
// ports they run over, the steering program and UMEM when the ports are
// AF_XDP sockets, and connection management on QP1.
type Provider struct {
	link Link
	xdp  *loader.XDP // nil over an in-memory port
	// xdpFeatures is what the device offers AF_XDP and XDP, as the
	// kernel said when the sockets were bound (xdpFeaturesErr if it
	// could not say).
	xdpFeatures    afxdp.XDPFeatures
	xdpFeaturesErr error
	// xdpZCMaxSegs is the device's xdp_zc_max_segs (0 where the kernel
	// did not report it: a device without xsk-zerocopy).
	xdpZCMaxSegs uint32
	umem         *afxdp.UMEM
	ports        []port.Port
	engines      []*rc.Engine
	buffers      []byte
	bufferSlots  *port.TxSlots
	mgmt         *management                  // nil without connection management
	capture      *pcapfile.Writer             // shared by the ports; nil without Config.Capture
	tap          atomic.Pointer[port.TapRing] // a live capture's ring, or nil (inspect.go)
	once         sync.Once

	mu         sync.Mutex
	closed     bool
	nextQPN    uint32
	nextEngine int
	qps        map[uint32]*rc.QP

	// owners maps each QPN to its engine when there is more than one, for
	// forwarding frames that arrive on another queue (rc.Config.Owner).
	// Engines read it under ownersMu's read lock; nothing that holds the
	// write lock waits for an engine.
	ownersMu sync.RWMutex
	owners   map[uint32]*rc.Engine

	// mc is the multicast groups' record (multicast.go), under mu; its
	// engines map is also read under mcMu by the engines.
	mc   mcastState
	mcMu sync.RWMutex

	// traffic is the engines' traffic class (Config.Traffic), the one
	// connections take unless a peer's REQ asks for another (cmQP).
	traffic rc.TrafficClass
}

// firstQPN leaves room below for QP0/QP1 and well-known numbers, as rxe
// starts at 0x11.
const firstQPN = 0x100

func newProvider(link Link, cfg Config) (*Provider, error) {
	// QP numbers start at a random point: a restarted process (a daemon
	// after SIGKILL) must not hand out the numbers its predecessor's
	// peers still hold connections for, which their CMs reject as stale.
	var r [4]byte
	_, _ = rand.Read(r[:])
	start := firstQPN + binary.LittleEndian.Uint32(r[:])%(1<<24-firstQPN)
	p := &Provider{link: link, qps: make(map[uint32]*rc.QP), nextQPN: start, traffic: cfg.Traffic}
	p.mc.fd4, p.mc.fd6 = -1, -1
	if cfg.Capture != nil {
		// One stream for all queues: the file header once, then every
		// port's frames.
		w, err := pcapfile.NewWriter(cfg.Capture, 0, pcapfile.LinkTypeEthernet)
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		p.capture = w
	}
	return p, nil
}

// OverPort builds a provider whose one engine runs over pt instead of
// AF_XDP: the API without privileges, for tests. Connection management
// runs when cfg.Resolve is set.
func OverPort(pt port.Port, link Link, cfg Config) (*Provider, error) {
	p, err := newProvider(link, cfg)
	if err != nil {
		pt.Close()
		return nil, err
	}
	if cfg.Resolve != nil {
		p.mgmt = newManagement(p)
		p.mgmt.resolve = cfg.Resolve
	}
	if err := p.startEngine(pt, cfg); err != nil {
		p.Close()
		return nil, err
	}
	if p.mgmt != nil {
		if err := p.mgmt.start(cmParams(cfg)); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// startEngine runs an engine on pt, which the provider then owns.
func (p *Provider) startEngine(pt port.Port, cfg Config) error {
	if p.capture != nil {
		pt = port.Capture(pt, p.capture)
	}
	pt = port.Tap(pt, len(p.ports), &p.tap)
	if cfg.InjectLoss > 0 {
		pt = newLossyPort(pt, cfg.InjectLoss, uint64(len(p.engines))+1)
	}
	p.ports = append(p.ports, pt)
	rcfg := rc.Config{Port: pt, Regions: cfg.Regions, Poll: cfg.Poll, LockThread: cfg.LockThread, AnySource: cfg.AnySource,
		SpinTime: cfg.SpinTime, MaxQPs: cfg.MaxQPs, MAC: p.link.MAC, Traffic: cfg.Traffic, CC: cfg.CC}
	if n := len(cfg.EngineCPUs); n > 0 {
		rcfg.CPUs = []int{cfg.EngineCPUs[len(p.engines)%n]}
	}
	if p.link.Addr.IsValid() {
		rcfg.Addrs = []netip.Addr{p.link.Addr}
	}
	if cfg.Queues > 1 {
		rcfg.Owner = p.ownerOf
		rcfg.Groups = p.groupEngines
	}
	if g := p.mgmt; g != nil {
		rcfg.FirstPacket = g.onFirstPacket
		rcfg.QPFailed = g.onQPFailed
		if len(p.engines) == 0 {
			rcfg.GSI = g.onGSI // the management queue
		}
	}
	e, err := rc.NewEngine(rcfg)
	if err != nil {
		return err
	}
	p.engines = append(p.engines, e)
	return nil
}

// ownerOf names the engine owning qpn (rc.Config.Owner).
func (p *Provider) ownerOf(qpn uint32) *rc.Engine {
	p.ownersMu.RLock()
	e := p.owners[qpn]
	p.ownersMu.RUnlock()
	return e
}

// setOwner records (e != nil) or forgets (e == nil) qpn's engine.
func (p *Provider) setOwner(qpn uint32, e *rc.Engine) {
	if len(p.engines) < 2 {
		return
	}
	p.ownersMu.Lock()
	defer p.ownersMu.Unlock()
	if e == nil {
		delete(p.owners, qpn)
		return
	}
	if p.owners == nil {
		p.owners = make(map[uint32]*rc.Engine)
	}
	p.owners[qpn] = e
}

// Address returns the local IP address QPs send from.
func (p *Provider) Address() netip.Addr { return p.link.Addr }

// MAC returns the interface's hardware address.
func (p *Provider) MAC() rocev2.MAC { return p.link.MAC }

// PathMTU returns the largest path MTU the interface carries.
func (p *Provider) PathMTU() rocev2.MTU { return p.link.PathMTU }

// Buffers returns the UMEM's buffer partition, which the ports send from
// in place, or nil over an in-memory port.
func (p *Provider) Buffers() []byte { return p.buffers }

// BufferSlots returns the layout of Buffers' allocations the ports send
// whole allocations from in one descriptor, or nil.
func (p *Provider) BufferSlots() *port.TxSlots {
	if p.buffers == nil {
		return nil
	}
	return p.bufferSlots
}

// Ports returns the engines' ports, by queue, without the wrappers
// (capture, tap) the engines see them through.
func (p *Provider) Ports() []port.Port {
	out := make([]port.Port, len(p.ports))
	for i, pt := range p.ports {
		out[i] = port.Inner(pt)
	}
	return out
}

// CreateQP creates a QP with the next free number on the next engine,
// round-robin, and steers its frames to that engine's queue. cfg.QPN is
// ignored. It returns the QP and its queue; ErrClosed after Close.
func (p *Provider) CreateQP(cfg rc.QPConfig) (*rc.QP, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.engines) == 0 {
		return nil, 0, ErrClosed
	}
	qpn := p.nextQPN
	for p.qps[qpn] != nil || qpn < firstQPN {
		qpn = (qpn + 1) & 0xFFFFFF
	}
	queue := p.nextEngine
	cfg.QPN = qpn
	q, err := p.engines[queue].CreateQP(cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("engine refused the QP: %w", err)
	}
	if p.xdp != nil {
		if err := p.xdp.AddQP(qpn, uint32(queue)); err != nil {
			q.Close()
			return nil, 0, fmt.Errorf("steering map: %w", err)
		}
	}
	p.nextQPN = (qpn + 1) & 0xFFFFFF
	p.nextEngine = (queue + 1) % len(p.engines)
	p.qps[qpn] = q
	p.setOwner(qpn, p.engines[queue])
	return q, queue, nil
}

// CloseQP closes q (rc.QP.Close) and takes its number out of the steering
// map.
func (p *Provider) CloseQP(q *rc.QP) error {
	groups := q.MulticastGroups()
	err := q.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropGroupsOf(q, groups)
	delete(p.qps, q.QPN())
	p.setOwner(q.QPN(), nil)
	// Under p.mu: the adapter's close takes the steering maps away under
	// it, and a QP's close may finish on its own goroutine meanwhile.
	if p.xdp != nil {
		if rerr := p.xdp.RemoveQP(q.QPN()); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// Stats returns each engine's counters, by queue.
func (p *Provider) Stats() []rc.Stats {
	out := make([]rc.Stats, len(p.engines))
	for i, e := range p.engines {
		out[i] = e.Stats()
	}
	return out
}

// ResolveNeighbour finds ip's MAC for a QP connected out of band.
func (p *Provider) ResolveNeighbour(ip netip.Addr) (net.HardwareAddr, error) {
	return resolveNeighbour(p.link.Ifindex, ip)
}

// Manager returns the IB CM, or nil without connection management.
func (p *Provider) Manager() *cm.Manager {
	if p.mgmt == nil {
		return nil
	}
	return p.mgmt.m
}

// MADDrops returns the MADs lost locally: received ones dropped because
// the CM's queue was full or their source was over its share (madrate.go),
// and sent ones because the engine's queue was full.
func (p *Provider) MADDrops() (queue, send uint64) {
	if p.mgmt == nil {
		return 0, 0
	}
	return p.mgmt.queueDrops.Load(), p.mgmt.sendDrops.Load()
}

// Close stops connection management, then the engines (cancelling what
// QPs still hold), then tears down the wire. A second Close does nothing.
func (p *Provider) Close() {
	p.once.Do(p.close)
}

func (p *Provider) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if p.mgmt != nil {
		p.mgmt.close()
	}
	for _, e := range p.engines {
		e.Close()
	}
	// CloseQP reads both under p.mu: a QP's close may finish on its own
	// goroutine (lifetime.go) while the adapter closes.
	p.mu.Lock()
	p.engines = nil
	p.mu.Unlock()
	for _, pt := range p.ports {
		pt.Close()
	}
	p.ports = nil
	p.mu.Lock()
	x := p.xdp
	p.xdp = nil
	p.mu.Unlock()
	if x != nil {
		// A clean close detaches: only a process that dies leaves its
		// pinned attachment for the next to take over.
		_ = x.Unpin()
		x.Close()
	}
	if p.umem != nil {
		p.umem.Close()
		p.umem = nil
	}
	// Closing the sockets ends their memberships in the kernel.
	p.closeMulticastSockets()
}

// Progress runs a turn of each engine on the caller's goroutine where
// the engine polls rc.PollProgress and no turn is running
// (rc.Engine.Progress), and returns the work done. The engines are fixed
// once Open returns, so it reads them without the lock and allocates
// nothing.
func (p *Provider) Progress() int {
	n := 0
	for _, e := range p.engines {
		n += e.Progress()
	}
	return n
}

// ConsumerBlocks tells each engine that a consumer is about to block on
// a notification (rc.Engine.ConsumerBlocks).
func (p *Provider) ConsumerBlocks() {
	for _, e := range p.engines {
		e.ConsumerBlocks()
	}
}

// Engines returns the engines, by queue; the slice is the caller's.
func (p *Provider) Engines() []*rc.Engine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*rc.Engine(nil), p.engines...)
}
