package ndk

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// PollingMode is how the engines wait for work.
type PollingMode int

const (
	// PollAdaptive spins briefly when idle, then sleeps in poll(2) on the
	// AF_XDP socket and a doorbell until a frame, a post or a timer.
	PollAdaptive PollingMode = iota
	// PollBusy never sleeps: the lowest latency, a core per engine.
	PollBusy
)

// XDPMode selects where the kernel runs the steering program.
type XDPMode int

const (
	XDPAuto    XDPMode = iota // driver mode, falling back to generic
	XDPDriver                 // native driver mode
	XDPGeneric                // generic (skb) mode: any device, slower
)

// Options configure Open. The zero value is one queue, adaptive polling
// and automatic XDP mode.
type Options struct {
	// Queues is the number of device queues, each with its own AF_XDP
	// socket and engine (default 1). QPs are spread over the engines
	// round-robin. Frames reach only the socket of the queue they arrive
	// on, wherever the NIC's RSS puts them: an engine hands a frame for
	// another engine's QP (or a CM datagram, which queue 0's engine
	// serves) to that engine, with one copy (EngineStats.ForwardedOut).
	Queues int
	// Polling is the engines' waiting strategy.
	Polling PollingMode
	// XDPMode is where the steering program runs.
	XDPMode XDPMode
	// Version is the NDK version asked for (zero: the highest, 2.1).
	Version Version
	// Address is the local IP address QPs use; by default the
	// interface's first IPv4 address, else its first global IPv6 one.
	Address netip.Addr
	// ThreadLocking says whether each engine runs on a goroutine locked
	// to its OS thread (DESIGN.md, Engine and threads). The default,
	// LockAuto, locks when every engine can have a core to itself.
	ThreadLocking ThreadLocking
	// Capture, if set, records every frame the engines send and receive
	// (ndkxdp demo --capture). Recording costs a copy and a lock per
	// frame: a debugging aid, not for production traffic.
	Capture *pcapfile.Writer
	// MADFaults, if set, decides the fate of every connection-management
	// datagram (a 256-byte IB CM MAD) the adapter sends: how many copies
	// leave (0 drops it, 2 duplicates it) and after what delay. It exists
	// to test connection setup on a lossy network (test/cm) and is nil in
	// normal use. It may be called from several goroutines.
	MADFaults func(mad []byte) (copies int, delay time.Duration)
	// CM tunes connection management's timers; the zero value is what
	// Linux's rdma_cm uses.
	CM CMOptions
}

// ThreadLocking is the engines' thread policy.
type ThreadLocking int

const (
	// LockAuto locks each engine to its OS thread when the process may
	// run more goroutines in parallel than there are engines plus one
	// (GOMAXPROCS > Queues+1), so that the engines own their cores and
	// the consumers still have one. On smaller machines the engines stay
	// unlocked: a polling engine yields its P between idle loops so the
	// consumers and the other engines run, and a yield from a locked
	// thread is a futex hand-off between threads (rc.Config.LockThread:
	// a 64-byte SEND round trip measured 110-130 us locked against 20-45
	// us unlocked on 2 cores).
	LockAuto ThreadLocking = iota
	// LockAlways locks every engine to its thread.
	LockAlways
	// LockNever leaves the engines to the Go scheduler.
	LockNever
)

// locks applies the policy to an adapter of queues engines in a process
// with gomaxprocs Ps.
func (l ThreadLocking) locks(queues, gomaxprocs int) bool {
	switch l {
	case LockAlways:
		return true
	case LockNever:
		return false
	}
	return gomaxprocs > max(queues, 1)+1
}

// transport is an adapter's engines and their wire.
type transport struct {
	ifindex int
	mac     rocev2.MAC
	addr    netip.Addr
	mtu     int
	pmtu    rocev2.MTU

	xdp     *loader.XDP // nil over an in-memory pipe
	umem    *afxdp.UMEM
	ports   []port.Port
	engines []*rc.Engine
	buffers *bufferPool
	mgmt    *management // IB CM on QP1 (gsi.go)

	mu         sync.Mutex
	nextQPN    uint32
	nextEngine int
	qps        map[uint32]*QP

	// owners maps each QPN to its engine when there is more than one, for
	// forwarding frames that arrive on another queue (rc.Config.Owner).
	// Engines read it under ownersMu's read lock; nothing that holds the
	// write lock waits for an engine.
	ownersMu sync.RWMutex
	owners   map[uint32]*rc.Engine
}

// ownerOf names the engine owning qpn (rc.Config.Owner).
func (t *transport) ownerOf(qpn uint32) *rc.Engine {
	t.ownersMu.RLock()
	e := t.owners[qpn]
	t.ownersMu.RUnlock()
	return e
}

// setOwner records (e != nil) or forgets (e == nil) qpn's engine.
func (t *transport) setOwner(qpn uint32, e *rc.Engine) {
	if len(t.engines) < 2 {
		return
	}
	t.ownersMu.Lock()
	defer t.ownersMu.Unlock()
	if e == nil {
		delete(t.owners, qpn)
		return
	}
	if t.owners == nil {
		t.owners = make(map[uint32]*rc.Engine)
	}
	t.owners[qpn] = e
}

// firstQPN leaves room below for QP0/QP1 and well-known numbers, as rxe
// starts at 0x11.
const firstQPN = 0x100

// framesPerQueue is each queue's share of the UMEM: 4096 frames of 4 KiB
// (16 MiB), the afxdp defaults for one socket; the buffer pool gets the
// same again.
const framesPerQueue = 4096

// Open opens an NDK adapter on the network interface ifname: it attaches
// the steering program, maps one UMEM shared by opts.Queues AF_XDP sockets
// (multi-buffer when the MTU needs frames over one 4 KiB chunk), and starts
// one engine per queue. It must run in the interface's network namespace,
// on a thread that stays there (as loader.Attach).
//
// It fails with STATUS_NDIS_BAD_VERSION for an unsupported version,
// STATUS_INVALID_PARAMETER for bad options, STATUS_INVALID_ADDRESS when
// the interface has no usable address, and STATUS_NDIS_ADAPTER_NOT_READY
// when the interface, the program or a socket cannot be set up; the error
// wraps the cause.
func Open(ifname string, opts Options) (*Adapter, error) {
	const op = "open adapter"
	if opts.Queues == 0 {
		opts.Queues = 1
	}
	if opts.Queues < 0 || opts.Queues > 64 {
		return nil, errorf(StatusInvalidParameter, op, "%d queues (1-64)", opts.Queues)
	}
	cfg := defaultConfig()
	if opts.Version != (Version{}) {
		cfg.version = opts.Version
	}
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: fmt.Sprintf("interface %q", ifname), Err: err}
	}
	attrs := link.Attrs()
	t := &transport{ifindex: attrs.Index, mtu: attrs.MTU, qps: make(map[uint32]*QP), nextQPN: firstQPN}
	copy(t.mac[:], attrs.HardwareAddr)
	if t.addr, err = localAddress(link, opts.Address); err != nil {
		return nil, &Error{Status: StatusInvalidAddress, Op: op, Detail: ifname, Err: err}
	}
	var ok bool
	if t.pmtu, ok = rocev2.MTUForNetdev(attrs.MTU); !ok {
		return nil, errorf(StatusNDISAdapterNotReady, op, "%s: MTU %d below RoCE's minimum", ifname, attrs.MTU)
	}
	params, err := opts.CM.params()
	if err != nil {
		return nil, &Error{Status: StatusInvalidParameter, Op: op, Err: err}
	}
	a, err := newAdapter(cfg)
	if err != nil {
		return nil, err
	}
	a.transport = t
	t.mgmt = newManagement(t, opts.MADFaults)
	if err := t.mgmt.openNamespace(); err != nil {
		a.Close()
		return nil, &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: ifname, Err: err}
	}
	if err := t.openXDP(ifname, opts, a.regions); err != nil {
		a.Close()
		return nil, &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: ifname, Err: err}
	}
	// QP1's datagrams go to the management queue, whose engine hands them
	// to the CM (loader.GSIQPN); the other engines forward those that
	// arrive on their queues to it.
	t.setOwner(loader.GSIQPN, t.engines[0])
	if err := t.xdp.AddQP(loader.GSIQPN, 0); err != nil {
		a.Close()
		return nil, &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: "steer QP1", Err: err}
	}
	if err := t.mgmt.start(params); err != nil {
		a.Close()
		return nil, &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: "connection management", Err: err}
	}
	return a, nil
}

// LocalAddress returns the IP address the adapter's QPs send from.
func (a *Adapter) LocalAddress() netip.Addr { return a.transportOrZero().addr }

// MAC returns the interface's hardware address.
func (a *Adapter) MAC() net.HardwareAddr {
	m := a.transportOrZero().mac
	return net.HardwareAddr(m[:])
}

// PathMTU returns the largest path MTU the interface carries, in bytes
// (1024 at a 1500-byte MTU, 4096 at 9000: rocev2.MTUForNetdev).
func (a *Adapter) PathMTU() int { return a.transportOrZero().pmtu.Bytes() }

// transportOrZero lets the accessors answer zero values on an adapter
// built without a transport.
func (a *Adapter) transportOrZero() *transport {
	if a.transport == nil {
		return &transport{}
	}
	return a.transport
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
func (t *transport) openXDP(ifname string, opts Options, regions *memreg.Table) error {
	mode := map[XDPMode]loader.AttachMode{XDPAuto: loader.AttachAuto, XDPDriver: loader.AttachDriver, XDPGeneric: loader.AttachGeneric}[opts.XDPMode]
	var err error
	if t.xdp, err = loader.Attach(ifname, loader.Options{Mode: mode}); err != nil {
		return err
	}
	if t.umem, err = afxdp.NewUMEM(afxdp.UMEMConfig{NumFrames: uint32(framesPerQueue * (opts.Queues + 1))}); err != nil {
		return err
	}
	parts, err := t.umem.Partition(opts.Queues + 1)
	if err != nil {
		return err
	}
	// A frame that does not fit one chunk (after the kernel's 256-byte
	// headroom) needs XDP_USE_SG (DESIGN.md, Memory).
	multi := t.mtu+rocev2.EthernetLen+rocev2.VLANTagLen > int(t.umem.FrameSize())-256
	// The buffer pool's memory (AllocBuffer) stays put until the ACK that
	// retires a request using it: the ports send it in place.
	lo, hi := parts[opts.Queues].Range()
	for q := 0; q < opts.Queues; q++ {
		sock, err := afxdp.NewSocket(t.umem, afxdp.SocketConfig{Ifindex: t.ifindex, Queue: uint32(q), MultiBuffer: multi})
		if err != nil {
			return fmt.Errorf("queue %d: %w", q, err)
		}
		if err := t.xdp.RegisterSocket(uint32(q), sock.FD()); err != nil {
			sock.Close()
			return fmt.Errorf("queue %d: %w", q, err)
		}
		xsk, err := port.NewXSK(sock, parts[q], port.XSKConfig{MTU: t.mtu, TxReference: [2]uint64{lo, hi}})
		if err != nil {
			sock.Close()
			return fmt.Errorf("queue %d: %w", q, err)
		}
		var p port.Port = xsk
		if opts.Capture != nil {
			p = port.Capture(xsk, opts.Capture)
		}
		if err := t.startEngine(p, opts, regions); err != nil {
			return err
		}
	}
	t.buffers = newBufferPool(t.umem.Bytes()[lo:hi])
	return nil
}

// startEngine runs an engine on p, which the transport then owns.
func (t *transport) startEngine(p port.Port, opts Options, regions *memreg.Table) error {
	t.ports = append(t.ports, p)
	poll := rc.PollAdaptive
	if opts.Polling == PollBusy {
		poll = rc.PollBusy
	}
	cfg := rc.Config{Port: p, Regions: regions, Poll: poll,
		LockThread: opts.ThreadLocking.locks(opts.Queues, runtime.GOMAXPROCS(0))}
	if opts.Queues > 1 {
		cfg.Owner = t.ownerOf
	}
	if g := t.mgmt; g != nil {
		cfg.FirstPacket = g.onFirstPacket
		if len(t.engines) == 0 {
			cfg.GSI = g.onGSI // the management queue
		}
	}
	e, err := rc.NewEngine(cfg)
	if err != nil {
		return err
	}
	t.engines = append(t.engines, e)
	return nil
}

// Stats returns the counters of each queue's engine. Each engine takes its
// snapshot on its own goroutine, which also orders the caller with it (see
// the ndk doc: memory a peer writes with RDMA WRITE).
func (a *Adapter) Stats() []EngineStats {
	t := a.transportOrZero()
	out := make([]EngineStats, len(t.engines))
	for i, e := range t.engines {
		out[i] = e.Stats()
	}
	return out
}

// close stops the engines (cancelling what QPs still hold), then tears
// down the wire.
func (t *transport) close() {
	if t.mgmt != nil {
		t.mgmt.close()
	}
	for _, e := range t.engines {
		e.Close()
	}
	t.engines = nil
	for _, p := range t.ports {
		p.Close()
	}
	t.ports = nil
	if t.xdp != nil {
		t.xdp.Close()
		t.xdp = nil
	}
	if t.umem != nil {
		t.umem.Close()
		t.umem = nil
	}
}

// EngineStats are one engine's counters: frames in and out, drops by
// reason, retransmissions, NAKs and RNR NAKs sent and received.
type EngineStats = rc.Stats
