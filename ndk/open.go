package ndk

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"golang.org/x/sys/unix"
)

// PollingMode is how the engines wait for work.
type PollingMode int

const (
	// PollAuto, the default, is PollProgress where the process runs more
	// goroutines in parallel than the adapter has engines plus one
	// (GOMAXPROCS > Queues+1, when ThreadLocking's LockAuto gives each
	// engine a thread of its own), and PollAdaptive otherwise. With
	// threads to spare, a completion that waits for a woken engine, and a
	// consumer that waits for the engine's thread to be scheduled, cost a
	// hand-off between threads at every hop of a round trip, which at
	// GOMAXPROCS 16 made a ping-pong 15-20x slower than with the
	// consumer running the turn (ndk/internal/rc's doc, "Polling"); with
	// as few Ps as engines and a consumer, goroutines hand off on one
	// thread in the runtime, and an engine batching on its own is faster
	// for streams. Through a daemon the daemon's engines poll adaptively.
	PollAuto PollingMode = iota
	// PollAdaptive spins briefly when idle, then sleeps in poll(2) on the
	// AF_XDP socket and a doorbell until a frame, a post or a timer.
	PollAdaptive
	// PollBusy never sleeps: the lowest latency, a core per engine.
	PollBusy
	// PollProgress is consumer-driven progress, as libfabric's manual
	// progress and UCX's worker progress: a GetResults that finds the CQ
	// empty, and a post, run the engine's turn (receive, completions,
	// transmit) on the caller's own thread when no turn is running,
	// instead of waking the engine's goroutine and waiting for it to be
	// scheduled, so that a round trip needs no other thread and its
	// latency does not depend on GOMAXPROCS. While consumers poll, the
	// engine goroutine sleeps (waking at least every millisecond for
	// timers); when they stop, it is PollAdaptive. It holds in process
	// only: through a daemon the client cannot run the daemon's engine,
	// and the daemon's engines poll adaptively.
	PollProgress
)

// Resolve says what the mode is for an adapter of queues engines opened
// in this process now: PollAuto's choice (by GOMAXPROCS), else m.
func (m PollingMode) Resolve(queues int) PollingMode {
	if m != PollAuto {
		return m
	}
	if runtime.GOMAXPROCS(0) > max(queues, 1)+1 {
		return PollProgress
	}
	return PollAdaptive
}

// String names the mode as the tools' -polling flag does.
func (m PollingMode) String() string {
	switch m {
	case PollAuto:
		return "auto"
	case PollAdaptive:
		return "adaptive"
	case PollBusy:
		return "busy"
	case PollProgress:
		return "progress"
	}
	return fmt.Sprintf("PollingMode(%d)", int(m))
}

// XDPMode selects where the kernel runs the steering program.
type XDPMode int

const (
	XDPAuto    XDPMode = iota // driver mode, falling back to generic
	XDPDriver                 // native driver mode
	XDPGeneric                // generic (skb) mode: any device, slower
)

// Options configure Open. The zero value is one queue, automatic polling
// (PollAuto) and automatic XDP mode.
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
	// EngineCPUs pins the engines' threads: queue i's engine runs only on
	// CPU EngineCPUs[i % len(EngineCPUs)] (sched_setaffinity(2)), locked
	// to its thread whatever ThreadLocking says. Pin each engine next to
	// its queue's interrupt and away from the consumers; by default the
	// engines run wherever the Go scheduler puts them. Each CPU must be
	// one the process may run on.
	EngineCPUs []int
	// Capture, if set, records every frame the engines send and receive
	// as a pcap stream (ndkxdp demo -capture): Open writes the file header
	// (Ethernet, nanosecond timestamps), then each frame is one record in
	// one Write call, from the engines' goroutines, one at a time.
	// Recording costs a copy and a lock per frame: a debugging aid, not
	// for production traffic. A failed write stops the recording, not the
	// adapter.
	Capture io.Writer
	// CM tunes connection management's timers; the zero value is what
	// Linux's rdma_cm uses.
	CM CMOptions
	// AcceptAnySource executes RC frames whatever their IP source. By
	// default a frame for a connected QP that does not come from the
	// QP's peer is dropped and counted (EngineStats.WrongSource) before
	// anything in it runs: packet injection into RoCE connections forges
	// the QPN, PSN and R_Key, which a NIC checks, but not the sender's
	// address. Set it only where a peer's frames legitimately arrive from
	// several addresses.
	AcceptAnySource bool
	// Pin pins the steering program's attachment under
	// PinRoot/netns-<inode>/<interface> (loader.PinDir; PinRoot default
	// /sys/fs/bpf/ndkxdp), where operators'
	// tools find its maps, and takes over one pinned there already: what
	// the daemon does, so that a daemon killed with SIGKILL leaves a
	// working attachment for the next. Close unpins and detaches.
	Pin     bool
	PinRoot string
	// ZeroCopy is how the AF_XDP sockets bind: ZeroCopyPreferred (the
	// zero value) tries the driver's zero-copy mode and falls back to
	// copy mode; ZeroCopyRequired fails where the driver has none
	// (veth); ZeroCopyOff always copies.
	ZeroCopy ZeroCopyMode
	// BusyPoll, if non-zero, turns on the sockets' busy polling for that
	// long per poll (SO_BUSY_POLL) with SO_PREFER_BUSY_POLL: the engine's
	// own polling drives the NIC's NAPI and the driver's interrupt stays
	// off while it does (Documentation/networking/af_xdp.rst). It needs
	// the device's napi_defer_hard_irqs and gro_flush_timeout set to
	// matter; without them it only adds the busy-poll loop.
	BusyPoll time.Duration
	// SpinTime is how long an adaptive engine keeps polling after its
	// last work before it sleeps (default 20µs), at least: the engine
	// doubles its spin, up to 200µs, while work comes within 200µs of
	// each sleep, and halves it back when it does not, so a
	// request/response exchange whose answer comes later than SpinTime
	// does not pay a wake-up per message. A longer SpinTime holds a core
	// for longer after the last message; fixed spins of 50 and 100µs
	// measured no better than 20µs in perf's latency tests, idle or
	// beside a computing process (ndk/internal/rc's doc, "Polling").
	SpinTime time.Duration
	// TrafficClass is the DSCP, ECN and VLAN priority of every
	// connection that names none (ConnectOptions.TrafficClass), those
	// the IB CM makes included: a REQ carries its DSCP and ECN, as
	// rdma_cm's carries its id's TOS. A connection the IB CM accepts
	// takes the DSCP and ECN its REQ asks for, as a Linux passive side
	// does, unless that is 0 (rdma_cm's default): then this one.
	TrafficClass TrafficClass
	// Congestion turns on ECN notification and DCQCN rate control.
	Congestion CongestionOptions
	// MaxQPs bounds the QPs each queue's engine holds (default 65,536,
	// what the steering program can steer). A host whose peers are not
	// trusted sets what they may make it hold: each QP costs its rings
	// and transport state, about 4.7 KiB at depth 4 (ndk
	// TestTenThousandQPs), so 65,536 QPs are about 300 MiB. CreateQP beyond
	// it fails with STATUS_INSUFFICIENT_RESOURCES.
	MaxQPs int
	// InjectLoss makes each engine drop this fraction (0 to 1) of the
	// frames it receives, at random, before it looks at them: a lossy
	// link for soak runs and fault tests (ndkxdp soak -loss). AF_XDP's
	// transmit path bypasses the kernel's queueing disciplines, so netem
	// cannot make a veth pair lossy for ndkxdp. 0, the default, drops
	// nothing and adds nothing to the data path.
	InjectLoss float64
}

// ZeroCopyMode is how an adapter's AF_XDP sockets bind.
type ZeroCopyMode int

const (
	ZeroCopyPreferred ZeroCopyMode = iota
	ZeroCopyRequired
	ZeroCopyOff
)

// ThreadLocking is the engines' thread policy.
type ThreadLocking int

const (
	// LockAuto locks each engine to its OS thread when the process may
	// run more goroutines in parallel than there are engines plus one
	// (GOMAXPROCS > Queues+1), so that the engines own their cores and
	// the consumers still have one. On smaller machines the engines stay
	// unlocked: a polling engine yields its P between idle loops so the
	// consumers and the other engines run, and a yield from a locked
	// thread is a futex hand-off between threads (rc.Config.LockThread;
	// test/rdma's doc has the measurements).
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

// Open opens an NDK adapter on the network interface ifname: it attaches
// the steering program, maps one UMEM shared by opts.Queues AF_XDP sockets
// (multi-buffer when the MTU needs frames over one 4 KiB chunk), and starts
// one engine per queue (ndk/internal/inproc). It must run in the
// interface's network namespace, on a thread that stays there (as
// loader.Attach).
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
	if opts.ZeroCopy < ZeroCopyPreferred || opts.ZeroCopy > ZeroCopyOff {
		return nil, errorf(StatusInvalidParameter, op, "zero-copy mode %d", opts.ZeroCopy)
	}
	if opts.SpinTime < 0 || opts.SpinTime > time.Second {
		return nil, errorf(StatusInvalidParameter, op, "spin time %v (0 to 1s)", opts.SpinTime)
	}
	if opts.BusyPoll < 0 || opts.BusyPoll > time.Second {
		return nil, errorf(StatusInvalidParameter, op, "busy poll %v (0 to 1s)", opts.BusyPoll)
	}
	if opts.MaxQPs < 0 {
		return nil, errorf(StatusInvalidParameter, op, "MaxQPs %d", opts.MaxQPs)
	}
	if opts.Polling < PollAuto || opts.Polling > PollProgress {
		return nil, errorf(StatusInvalidParameter, op, "polling mode %d", opts.Polling)
	}
	if err := checkCPUs(opts.EngineCPUs); err != nil {
		return nil, &Error{Status: StatusInvalidParameter, Op: op, Err: err}
	}
	if !(opts.InjectLoss >= 0 && opts.InjectLoss <= 1) {
		return nil, errorf(StatusInvalidParameter, op, "InjectLoss %v outside [0, 1]", opts.InjectLoss)
	}
	cfg := defaultConfig()
	if opts.Version != (Version{}) {
		cfg.version = opts.Version
	}
	params, err := opts.CM.params()
	if err != nil {
		return nil, &Error{Status: StatusInvalidParameter, Op: op, Err: err}
	}
	a, err := newAdapter(cfg)
	if err != nil {
		return nil, err
	}
	pcfg := providerConfig(opts, a.regions)
	pcfg.CM = params
	p, err := inproc.Open(ifname, pcfg)
	if err != nil {
		a.Close()
		s := StatusNDISAdapterNotReady
		if errors.Is(err, inproc.ErrAddress) {
			s = StatusInvalidAddress
		}
		return nil, &Error{Status: s, Op: op, Detail: ifname, Err: err}
	}
	a.attach(p)
	return a, nil
}

// providerConfig is what the options ask of the in-process provider.
func providerConfig(opts Options, regions *memreg.Table) inproc.Config {
	poll := map[PollingMode]rc.PollMode{PollAdaptive: rc.PollAdaptive, PollBusy: rc.PollBusy, PollProgress: rc.PollProgress}[opts.Polling.Resolve(opts.Queues)]
	mode := map[XDPMode]loader.AttachMode{XDPAuto: loader.AttachAuto, XDPDriver: loader.AttachDriver, XDPGeneric: loader.AttachGeneric}[opts.XDPMode]
	return inproc.Config{
		Regions:    regions,
		Queues:     opts.Queues,
		Poll:       poll,
		LockThread: opts.ThreadLocking.locks(opts.Queues, runtime.GOMAXPROCS(0)),
		AnySource:  opts.AcceptAnySource,
		MaxQPs:     opts.MaxQPs,
		InjectLoss: opts.InjectLoss,
		XDPMode:    mode,
		Address:    opts.Address,
		Capture:    opts.Capture,
		Pin:        opts.Pin,
		PinRoot:    opts.PinRoot,
		BindMode:   map[ZeroCopyMode]afxdp.BindMode{ZeroCopyPreferred: afxdp.ModeAuto, ZeroCopyRequired: afxdp.ModeZeroCopy, ZeroCopyOff: afxdp.ModeCopy}[opts.ZeroCopy],
		BusyPoll:   opts.BusyPoll,
		SpinTime:   opts.SpinTime,
		Traffic:    opts.TrafficClass.rc(),
		CC:         opts.Congestion.rc(),
		EngineCPUs: opts.EngineCPUs,
	}
}

// checkCPUs refuses a CPU the process may not run on (its affinity mask,
// which a cpuset or taskset narrows).
func checkCPUs(cpus []int) error {
	if len(cpus) == 0 {
		return nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return fmt.Errorf("engine CPUs: sched_getaffinity: %w", err)
	}
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 || !set.IsSet(c) {
			return fmt.Errorf("engine CPU %d is not one this process may run on (%d allowed)", c, set.Count())
		}
	}
	return nil
}

// LocalAddress returns the IP address the adapter's QPs send from.
func (a *Adapter) LocalAddress() netip.Addr { return a.backend().localAddress() }

// MAC returns the interface's hardware address.
func (a *Adapter) MAC() net.HardwareAddr { return a.backend().mac() }

// PathMTU returns the largest path MTU the interface carries, in bytes
// (1024 at a 1500-byte MTU, 4096 at 9000: rocev2.MTUForNetdev).
func (a *Adapter) PathMTU() int { return a.backend().pathMTU() }

// Stats returns the counters of each queue's engine. Each engine takes its
// snapshot on its own goroutine, which also orders the caller with it (see
// the ndk doc: memory a peer writes with RDMA WRITE).
func (a *Adapter) Stats() []EngineStats { return a.backend().stats() }
