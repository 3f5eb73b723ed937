package rc

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/spin"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/queue"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"golang.org/x/sys/unix"
)

// Errors of the control path.
var (
	ErrClosed    = errors.New("rc: engine closed")
	ErrQPNInUse  = errors.New("rc: QP number already in use on this engine")
	ErrBadState  = errors.New("rc: QP is not in a state that allows this")
	ErrBadConfig = errors.New("rc: invalid configuration")
)

// Config configures an engine.
type Config struct {
	Port    port.Port
	Regions *memreg.Table
	Poll    PollMode
	// SpinTime is how long an adaptive engine keeps polling after its
	// last work before it sleeps in Port.Wait (default 20µs), at least:
	// the spin grows up to 200µs while work keeps coming soon after each
	// sleep (adaptSpin), and comes back to SpinTime when it does not. It bounds
	// how long the engine holds a core that another thread, of this
	// process or another, is waiting for: a thread that only yields its
	// P (runtime.Gosched) keeps the OS thread, so engines and consumers
	// of several processes sharing cores wait for the kernel's time slice,
	// milliseconds (doc.go, "Polling").
	SpinTime time.Duration
	// MaxQPs bounds the QPs on this engine (default 65,536: what the
	// steering program's QP map holds, loader.Options.MaxQPs, so one
	// engine takes every QP an adapter can steer). Its cost is the ready
	// ring, 16 bytes a QP (1 MiB at the default), allocated at start;
	// the engine's other per-QP lists grow with use.
	MaxQPs int
	// Window is the most PSNs one QP keeps unacknowledged (default 512).
	Window int
	// LockThread runs the engine on a goroutine locked to its OS thread
	// (runtime.LockOSThread), as DESIGN.md describes. It is off by
	// default: while polling, the engine yields its P on every idle loop
	// so consumers and the other engines run, and a yield from a locked
	// thread is a futex hand-off between threads, which slows a round
	// trip several-fold when engines and consumers share cores (test/rdma's
	// doc has the numbers). Lock when each engine has a core of its own,
	// which is what ndk.Open's default, ndk.LockAuto, decides per adapter.
	LockThread bool
	// CPUs, if set, pins the engine's thread to these CPUs
	// (sched_setaffinity(2)) and locks the engine to it, as LockThread.
	// NewEngine fails if the kernel refuses the set (a CPU offline or
	// outside the process's cpuset). When the engine ends, the thread
	// gets its mask back before the runtime may reuse it.
	CPUs []int
	// GSI and FirstPacket connect the engine to connection management
	// (see gsi.go); both run on the engine goroutine and must not block.
	GSI         func(p *rocev2.Packet)
	FirstPacket func(qpn uint32)
	// QPFailed hears of a connected QP that failed on its own (abort.go):
	// a fatal NAK sent or received, retries exhausted, a response that
	// did not fit. It runs on the engine goroutine and must not block.
	QPFailed func(qpn, wcStatus uint32)
	// AnySource accepts RC frames from any source address. By default a
	// frame whose IP source is not the connected peer's is dropped and
	// counted (Stats.WrongSource) before anything in it is executed: the
	// packet-injection attacks on RoCE (ReDMArk, USENIX Security 2021)
	// forge the peer's QPN and PSN, which hardware NICs check, but not its
	// address, which they do not. Set it only where a peer's frames
	// legitimately arrive from several addresses.
	AnySource bool
	// Addrs and MAC are the adapter's own addresses (SetAddrs replaces
	// Addrs). A QP1 datagram whose destination IP is none of Addrs, or
	// whose destination MAC is not MAC, is dropped and counted
	// (Stats.WrongDestination): the kernel would not have taken it, and
	// the CM must not answer it. An RC frame must be addressed to its
	// QP's own Local endpoint, which the connection set from these.
	// Unset (no Addrs, a zero MAC): not checked, for ports that carry no
	// real addresses.
	Addrs []netip.Addr
	MAC   rocev2.MAC
	// Owner, when set, names the engine that owns a QPN (nil if none) for
	// the engines of one adapter: frames for QPs of another engine, and
	// QP1's datagrams on an engine without the GSI hook, are forwarded to
	// it (forward.go). It runs on the engine goroutine, must not block or
	// allocate, and must be safe while QPs are created and destroyed.
	Owner func(qpn uint32) *Engine
	// Groups, when set, names the engines of the adapter that have QPs
	// attached to a multicast group (multicast.go): a datagram for the
	// group that arrives here is forwarded to each of them but this one.
	// It runs on the engine goroutine, must not block or allocate, and
	// must not change the slice it returned; it needs Owner set.
	Groups func(group netip.Addr) []*Engine
	// Traffic is the traffic class of QPs whose ConnParams name none.
	Traffic TrafficClass
	// CC is congestion control: ECN notification and DCQCN (congestion.go).
	CC CCConfig
}

// Tuning defaults.
const (
	defaultSpinTime = 20 * time.Microsecond
	defaultMaxQPs   = 1 << 16
	defaultWindow   = 512
	// rxBatch bounds the frames one loop receives before it transmits,
	// fires timers and serves the relay again. A flood fills the receive
	// ring; with 64 a loop, each of a well-behaved QP's answers waited
	// behind the flood's share of 64 frames, and its rate under a READ or
	// REQ flood was 0.37-0.49x of its rate without; with 16, 0.75-0.82x
	// (ndk BenchmarkFloodRatio). The loop's own work per frame stays small
	// beside a frame's: test/rdma's 64 B SEND rate and 64 KiB WRITE
	// bandwidth did not move beyond their run-to-run noise.
	rxBatch = 16
	// qpBudget bounds the frames one QP sends per loop, so that one bulk
	// transfer cannot starve the others or the receive side.
	qpBudget = 64
	// replayBudget bounds the answers to duplicate requests (READ
	// responses of a run a duplicate READ restarted, ATOMIC_ACKNOWLEDGEs
	// sent again) that one loop sends, all QPs together. The peer decides
	// how much a responder replays: a flood of duplicates restarts runs
	// at no cost to itself, and each replayed frame delays every other
	// QP's answer in the same loop. 16 per QP a loop kept a neighbouring
	// QP's READ round trip at 4.6x its unloaded median (2 µs) under a
	// flood of duplicate READs, 4 for the engine at 2.2-3.1x, where a
	// flood V drops unanswered costs 2.4x (on a less busy machine, an
	// unloaded median of 6-7 µs: 2.3-2.5x, 1.6-1.75x and 1.4x; ndk
	// BenchmarkFloodRTT).
	// A QP over it waits for the next loop (Stats.ReplaysDeferred); the
	// loop is short when the engine has nothing else to do, so a genuine
	// retransmission still runs at several frames a microsecond. First
	// runs keep qpBudget: a quarter of it cut a bulk READ's rate by a
	// third.
	replayBudget = 4
	// ackEvery sets AckReq on every ackEvery-th packet of a long message
	// besides its last (rxe asks after 64 unacknowledged packets; a
	// shorter stride retires WQEs sooner with a 512-PSN window).
	ackEvery = 32
	// blockedWait is how long an adaptive engine sleeps while frames wait
	// for transmit room: TX completions do not wake Port.Wait.
	blockedWait = 50 * time.Microsecond
	// spinMax bounds the adaptive spin (adaptSpin): haltpoll's default
	// window, guest_halt_poll_ns.
	spinMax    = int64(200 * time.Microsecond)
	noDeadline = math.MaxInt64
	// ackHoldTime is how long an ACK for a completed receive waits for
	// the consumer's answer to travel with (ackHold). It is far below
	// any ACK timeout, and only SEND completions wait.
	ackHoldTime = int64(20 * time.Microsecond)
)

// Engine runs the RC transport of one queue: it owns one port, the QPs
// assigned to it and their timers, on one goroutine (locked to its OS
// thread only with Config.LockThread).
type Engine struct {
	port    port.Port
	regions *memreg.Table
	poll    PollMode
	spin    int64 // how long the idle loop spins now, in ns: spinMin to spinMax
	spinMin int64 // SpinTime in ns
	window  uint32
	maxQPs  int

	lockThread bool
	cpus       *unix.CPUSet // Config.CPUs; nil: not pinned
	anySource  bool
	traffic    TrafficClass                 // Config.Traffic
	cc         CCConfig                     // Config.CC with its defaults
	addrs      atomic.Pointer[[]netip.Addr] // Config.Addrs, unmapped; nil: unchecked
	mac        rocev2.MAC

	gsi         func(p *rocev2.Packet)
	firstPacket func(qpn uint32)
	qpFailed    func(qpn, wcStatus uint32)
	owner       func(qpn uint32) *Engine
	groups      func(group netip.Addr) []*Engine
	mcast       map[netip.Addr][]*QP   // multicast members (multicast.go); engine goroutine only
	inbox       *queue.MPSC[forwarded] // frames other engines forwarded here
	fwdFree     *queue.MPSC[[]byte]    // this engine's free forwarding buffers
	gsiTx       *queue.MPSC[[]byte]    // MADs to transmit (TransmitGSI)
	gsiHeld     []byte                 // a MAD the port had no room for
	gsiTries    int
	awaitFirst  map[uint32]struct{} // connected QPs that have not received yet

	ready *queue.MPSC[*QP] // QPs with new posts or a flush request

	ctlMu      sync.Mutex
	ctlQ       []func()
	ctlClosed  bool
	ctlPending atomic.Bool
	stop       atomic.Bool
	done       chan struct{}

	// The turn token (progress.go): 1 while the engine goroutine or a
	// consumer (Progress) runs a turn. Everything below marked "engine
	// goroutine only" is the token holder's.
	turn atomic.Uint32
	// sleepUntil is, while the engine goroutine sleeps, the clock reading
	// its sleep ends at (noDeadline: none); 0 while it is awake. A
	// consumer's turn that leaves work due earlier wakes it (Progress).
	sleepUntil atomic.Int64
	drivenAt   int64 // e.now of the last consumer turn; token holder only
	// blocking: a consumer is about to block on a notification
	// (ConsumerBlocks), so the engine must watch its socket again even
	// while other consumers drive it; the next consumer turn clears it.
	blocking atomic.Bool
	napper   port.DoorbellWaiter // the port's, or nil

	// emptyPolls counts consumers' polls that found a CQ empty
	// (consumerIdle), on a cache line of its own: consumers spin on it.
	_          [64]byte
	emptyPolls atomic.Uint32
	idleLook   atomic.Bool       // a consumer reads idleSample
	idleSample [1]metrics.Sample // runnableMetric
	_          [64]byte

	c          liveCounters
	replayLeft int            // replayBudget left this loop; engine goroutine only
	violations violationTable // engine goroutine only
	yield      spin.Yielder   // engine goroutine only

	// Engine goroutine only.
	pollers []Poller
	qps     map[uint32]*QP
	lastQP  *QP
	// timed holds the QPs that armed a timer since the last timers()
	// pass: idle QPs cost the timer pass nothing, so 10,000 of them beside
	// a busy one do not slow it (TestTimersSkipIdleQPs).
	timed     []*QP
	active    []*QP // QPs with frames to send
	rx        [rxBatch][]byte
	pkt       rocev2.Packet
	entry     cq.Entry
	hbuf      [192]byte
	tbuf      [8]byte
	segs      [3][]byte
	gather    []byte
	loop      []byte // a multicast datagram looped back to the adapter's members (multicast.go)
	epoch     time.Time
	now       int64
	nextTimer int64
}

// NewEngine starts an engine on cfg.Port. Close stops it.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Port == nil || cfg.Regions == nil {
		return nil, fmt.Errorf("%w: engine needs a port and a token table", ErrBadConfig)
	}
	if cfg.SpinTime <= 0 {
		cfg.SpinTime = defaultSpinTime
	}
	if cfg.MaxQPs <= 0 {
		cfg.MaxQPs = defaultMaxQPs
	}
	if cfg.Window <= 0 {
		cfg.Window = defaultWindow
	}
	if cfg.Window > 1<<22 {
		return nil, fmt.Errorf("%w: window %d exceeds 2^22 PSNs", ErrBadConfig, cfg.Window)
	}
	if err := cfg.Traffic.Validate(); err != nil {
		return nil, err
	}
	cc, err := cfg.CC.withDefaults()
	if err != nil {
		return nil, err
	}
	ready, err := queue.NewMPSC[*QP](cfg.MaxQPs)
	if err != nil {
		return nil, fmt.Errorf("rc: ready ring: %w", err)
	}
	gsiTx, err := queue.NewMPSC[[]byte](gsiQueueDepth)
	if err != nil {
		return nil, fmt.Errorf("rc: GSI ring: %w", err)
	}
	e := &Engine{
		gsi:         cfg.GSI,
		firstPacket: cfg.FirstPacket,
		qpFailed:    cfg.QPFailed,
		owner:       cfg.Owner,
		groups:      cfg.Groups,
		mcast:       make(map[netip.Addr][]*QP),
		gsiTx:       gsiTx,
		awaitFirst:  make(map[uint32]struct{}),
		port:        cfg.Port,
		regions:     cfg.Regions,
		poll:        cfg.Poll,
		spin:        int64(cfg.SpinTime),
		spinMin:     int64(cfg.SpinTime),
		window:      uint32(cfg.Window),
		maxQPs:      cfg.MaxQPs,
		lockThread:  cfg.LockThread,
		anySource:   cfg.AnySource,
		mac:         cfg.MAC,
		ready:       ready,
		done:        make(chan struct{}),
		qps:         make(map[uint32]*QP),
		timed:       make([]*QP, 0, 64),
		active:      make([]*QP, 0, 64),
		gather:      make([]byte, rocev2.MTU4096.Bytes()),
		loop:        make([]byte, forwardFrameLen),
		epoch:       time.Now(),
		nextTimer:   noDeadline,
		drivenAt:    -int64(drivenNap), // no consumer turn yet
		idleSample:  [1]metrics.Sample{{Name: runnableMetric}},
		traffic:     cfg.Traffic,
		cc:          cc,
	}
	if len(cfg.Addrs) > 0 {
		e.SetAddrs(cfg.Addrs)
	}
	e.napper, _ = port.Inner(cfg.Port).(port.DoorbellWaiter)
	if cfg.Owner != nil {
		if err := e.initForwarding(); err != nil {
			return nil, err
		}
	}
	if len(cfg.CPUs) > 0 {
		set, err := cpuSet(cfg.CPUs)
		if err != nil {
			return nil, err
		}
		e.cpus = set
	}
	started := make(chan error, 1)
	go e.run(started)
	if err := <-started; err != nil {
		<-e.done
		return nil, err
	}
	return e, nil
}

// cpuSet makes the affinity mask of cpus.
func cpuSet(cpus []int) (*unix.CPUSet, error) {
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return nil, fmt.Errorf("%w: CPU %d out of range 0-%d", ErrBadConfig, c, len(set)*64-1)
		}
		set.Set(c)
	}
	return &set, nil
}

// CPUs returns the CPUs the engine's thread is pinned to (Config.CPUs),
// nil when it is not pinned.
func (e *Engine) CPUs() []int {
	if e.cpus == nil {
		return nil
	}
	var cs []int
	for c := 0; c < len(e.cpus)*64; c++ {
		if e.cpus.IsSet(c) {
			cs = append(cs, c)
		}
	}
	return cs
}

// Close stops the engine. QPs still open complete every pending request
// with STATUS_CANCELLED first. Close waits for the engine goroutine and is
// safe to call more than once; it does not close the port.
func (e *Engine) Close() {
	e.stop.Store(true)
	e.port.Doorbell()
	<-e.done
}

// do runs fn on the engine goroutine and waits for it: the control path
// (create, connect, close) changes engine-owned state only there.
func (e *Engine) do(fn func()) error {
	done := make(chan struct{})
	e.ctlMu.Lock()
	if e.ctlClosed {
		e.ctlMu.Unlock()
		return ErrClosed
	}
	e.ctlQ = append(e.ctlQ, func() { fn(); close(done) })
	e.ctlPending.Store(true)
	e.ctlMu.Unlock()
	e.port.Doorbell()
	<-done
	return nil
}

func (e *Engine) runControl() {
	e.ctlMu.Lock()
	q := e.ctlQ
	e.ctlQ = nil
	e.ctlPending.Store(false)
	e.ctlMu.Unlock()
	for _, fn := range q {
		fn()
	}
}

func (e *Engine) clock() int64 { return int64(time.Since(e.epoch)) }

// run is the engine goroutine. It reports on started whether it could
// take its CPUs; if not, it stops at once.
func (e *Engine) run(started chan<- error) {
	if e.lockThread || e.cpus != nil {
		runtime.LockOSThread()
	}
	var err error
	if e.cpus != nil {
		var was unix.CPUSet
		err = unix.SchedGetaffinity(0, &was)
		if err == nil {
			err = unix.SchedSetaffinity(0, e.cpus)
		}
		if err != nil {
			err = fmt.Errorf("%w: pin the engine's thread to CPUs %v: %w", ErrBadConfig, e.CPUs(), err)
			e.stop.Store(true)
		} else {
			// The thread goes back to the runtime with its mask as it
			// was; if that fails it stays locked and the runtime ends
			// it with the goroutine.
			defer func() {
				if unix.SchedSetaffinity(0, &was) == nil {
					runtime.UnlockOSThread()
				}
			}()
		}
	}
	if e.lockThread && e.cpus == nil {
		defer runtime.UnlockOSThread()
	}
	defer close(e.done)
	started <- err

	var idleSince int64 // e.now when the engine last had work
	for !e.stop.Load() {
		if !e.turn.CompareAndSwap(0, 1) {
			// A consumer runs the turn (PollProgress): let it finish on
			// the core.
			e.yield.Yield()
			continue
		}
		e.now = e.clock()
		e.replayLeft = replayBudget
		// Pollers first: receives a daemon client posted reach their QPs
		// before the frames this turn brings, which would otherwise find
		// them missing and draw an RNR NAK.
		work := e.runPollers()
		work += e.receive()
		work += e.receiveForwarded()
		work += e.drainReady()
		if e.ctlPending.Load() {
			e.runControl()
			work++
		}
		work += e.transmitGSI()
		work += e.transmit()
		if e.now >= e.nextTimer {
			e.timers()
		}
		if err := e.port.Flush(); err != nil {
			atomic.AddUint64(&e.c.TxErrors, 1)
		}
		if work > 0 {
			idleSince = e.now
			e.turn.Store(0)
			// Yield after every busy turn, as after every idle one. A
			// goroutine the engine wakes (a peer engine's doorbell, a
			// CQ's notifier, a consumer blocked in a wait) waits on this
			// P's run queue until the engine yields, and one that polls
			// (a consumer, an engine of the peer) waits in the global
			// queue for a P. A flooded engine is busy every turn, and
			// each turn it keeps its P delays every step of the
			// well-behaved QPs beside it: yielding every 50µs (ten turns
			// of a READ flood) measured 0.03-0.1 of their unloaded rate,
			// a yield a turn 0.2-0.25 (ndk BenchmarkFloodRatio).
			e.yield.YieldP()
			continue
		}
		driven := e.poll == PollProgress && e.now-e.drivenAt < int64(drivenNap) && !e.blocking.Load()
		if !driven && (e.poll == PollBusy || (e.now-idleSince < e.spin && !e.yield.Quiet())) {
			e.turn.Store(0)
			// Hand the P over on every idle loop: with as many polling
			// goroutines as GOMAXPROCS (engines and consumers), a
			// goroutine with work would otherwise wait for our next
			// yield or the runtime's 10 ms preemption; yielding only
			// every 64 idle loops made the ping-pong slower (test/rdma's
			// doc). Gosched with nothing else to run returns at once.
			if e.poll == PollBusy {
				runtime.Gosched()
			} else if e.yield.Yield() {
				atomic.AddUint64(&e.c.SlowYields, 1)
			}
			continue
		}
		for _, p := range e.pollers {
			p.Idle()
		}
		slept := e.sleep(driven) // ends the turn
		idleSince = e.clock()
		if !driven {
			e.adaptSpin(slept)
		}
	}
	// The last turn is the engine's, and it keeps the token: Progress
	// finds it taken from now on.
	for !e.turn.CompareAndSwap(0, 1) {
		e.yield.Yield()
	}
	e.shutdown()
}

// adaptSpin sets the next spin from how long the last sleep lasted, as
// cpuidle's haltpoll governor sets its poll window: a sleep that work
// ended within spinMax means the spin stopped just short of it, so the
// spin doubles (up to spinMax); a longer sleep halves it (down to
// SpinTime). A ping-pong whose answer takes longer than SpinTime, such as
// a READ responder waiting a whole round trip, then spins through it
// instead of paying a wake-up each time, and an engine with nothing to
// do spins SpinTime. slept < 0: it did not sleep.
func (e *Engine) adaptSpin(slept int64) {
	switch {
	case slept < 0:
	case slept < spinMax:
		e.spin = min(max(2*e.spin, e.spinMin), max(spinMax, e.spinMin))
	default:
		e.spin = max(e.spin/2, e.spinMin)
	}
}

// sleep ends the turn and waits for a frame, a doorbell or the next
// deadline; it returns how long it slept in ns (-1: the deadline had
// passed). While consumers drive the engine (driven), it sleeps at most
// drivenNap (progress.go).
func (e *Engine) sleep(driven bool) int64 {
	timeout := time.Duration(-1)
	if len(e.active) > 0 {
		timeout = blockedWait
	} else if e.nextTimer != noDeadline {
		timeout = max(time.Duration(e.nextTimer-e.clock()), 0)
	}
	if driven && (timeout < 0 || timeout > drivenNap) {
		timeout = drivenNap
	}
	if timeout == 0 {
		e.turn.Store(0)
		return -1
	}
	atomic.AddUint64(&e.c.Sleeps, 1)
	start := e.clock()
	until := int64(noDeadline)
	if timeout > 0 {
		until = start + int64(timeout)
	}
	e.sleepUntil.Store(until)
	e.turn.Store(0)
	var err error
	if driven && e.napper != nil {
		err = e.napper.WaitDoorbell(timeout)
	} else {
		err = e.port.Wait(timeout)
	}
	if err != nil {
		atomic.AddUint64(&e.c.RxErrors, 1)
	}
	e.sleepUntil.Store(0)
	return e.clock() - start
}

// shutdown cancels what is left and refuses further control calls.
func (e *Engine) shutdown() {
	e.ctlMu.Lock()
	e.ctlClosed = true
	q := e.ctlQ
	e.ctlQ = nil
	e.ctlMu.Unlock()
	for _, fn := range q {
		fn()
	}
	for _, qp := range e.qps {
		e.enterError(qp)
	}
	// MADs queued before Close (the DREQs and REJs of connections closed
	// with the adapter) still leave.
	if e.transmitGSI() > 0 {
		_ = e.port.Flush()
	}
}

// lookup finds the QP a frame is for; the last hit is cached because
// traffic comes in bursts per QP.
func (e *Engine) lookup(qpn uint32) *QP {
	if q := e.lastQP; q != nil && q.cfg.QPN == qpn {
		return q
	}
	q := e.qps[qpn]
	if q != nil {
		e.lastQP = q
	}
	return q
}

func (e *Engine) receive() int {
	n := e.port.Receive(e.rx[:])
	if n == 0 {
		return 0
	}
	atomic.AddUint64(&e.c.FramesIn, uint64(n))
	for i := 0; i < n; i++ {
		if err := rocev2.Parse(e.rx[i], &e.pkt); err != nil {
			e.countParseError(err)
			continue
		}
		e.dispatch(e.rx[i], true)
	}
	e.port.Release()
	return n
}

func (e *Engine) countParseError(err error) {
	if rocev2.ReasonOf(err) == rocev2.ReasonICRC {
		atomic.AddUint64(&e.c.BadICRC, 1)
	} else {
		atomic.AddUint64(&e.c.Malformed, 1)
	}
}

// dispatch handles the packet in e.pkt, parsed from frame. Frames for QPs
// of another engine of the adapter go to it when mayForward (forward.go).
func (e *Engine) dispatch(frame []byte, mayForward bool) {
	op := e.pkt.BTH.Opcode
	if tr := op.Transport(); tr != rocev2.TransportRC && tr != rocev2.TransportUC {
		// CNPs (ECN) are allowed to be ignored, never errors (ROCEV2.md
		// 1.7); UD goes to UD QPs (ud.go) and to QP1 (IB CM, gsi.go).
		if op.Transport() == rocev2.TransportUD && e.pkt.BTH.DestQP != rocev2.GSIQP {
			e.udReceive(frame, mayForward)
			return
		}
		if op == rocev2.UDSendOnly && e.pkt.BTH.DestQP == rocev2.GSIQP {
			if !e.toAdapter() {
				atomic.AddUint64(&e.c.WrongDestination, 1)
				return
			}
			if e.gsi != nil {
				e.gsi(&e.pkt)
				return
			}
			if mayForward && e.forward(rocev2.GSIQP, frame) {
				return
			}
		}
		if op.Transport() == rocev2.TransportCNP && e.cc.Mode == CCOn {
			q := e.lookup(e.pkt.BTH.DestQP)
			if q == nil && mayForward && e.forward(e.pkt.BTH.DestQP, frame) {
				return // counted where it lands
			}
			if q != nil && e.fromPeer(q) {
				e.receivedCNP(q)
			}
		}
		if op.Transport() == rocev2.TransportCNP {
			atomic.AddUint64(&e.c.CNPs, 1)
		}
		atomic.AddUint64(&e.c.NotRC, 1)
		return
	}
	if e.pkt.BTH.PKey&0x7FFF != rocev2.DefaultPKey&0x7FFF {
		// Not the default partition, the only one our QPs belong to
		// (IBTA C9-42; rxe check_keys drops and counts it too).
		atomic.AddUint64(&e.c.BadPKey, 1)
		return
	}
	q := e.lookup(e.pkt.BTH.DestQP)
	if q == nil {
		if mayForward && e.forward(e.pkt.BTH.DestQP, frame) {
			return
		}
		atomic.AddUint64(&e.c.UnknownQP, 1)
		return
	}
	if !q.t.connected || q.t.failed {
		atomic.AddUint64(&e.c.NotConnected, 1)
		return
	}
	if !q.t.toLocal(&e.pkt) {
		atomic.AddUint64(&e.c.WrongDestination, 1)
		return
	}
	if !e.anySource && e.pkt.IP.Src.Unmap() != q.t.peerIP {
		atomic.AddUint64(&e.c.WrongSource, 1)
		return
	}
	if (op.Transport() == rocev2.TransportUC) != q.cfg.UC {
		// A UC packet for an RC QP or the other way round: another
		// transport than the QP's, dropped (rxe check_type_state).
		atomic.AddUint64(&e.c.NotRC, 1)
		return
	}
	if len(e.awaitFirst) != 0 {
		e.noteFirst(q.cfg.QPN)
	}
	q.t.n.FramesIn++
	if e.pkt.IP.TOS&3 == uint8(rocev2.CE) && e.cc.Mode != CCOff {
		e.congestionExperienced(q)
	}
	info := op.Info()
	if info.Response {
		e.completer(q)
		return
	}
	if e.violations.over > 0 && info.Headers&keyed != 0 &&
		e.violations.limited(e.pkt.IP.Src.Unmap(), e.now) {
		// A request that needs a memory token, from a source over its
		// access-violation limit (violations.go).
		atomic.AddUint64(&e.c.AccessLimited, 1)
		return
	}
	if q.cfg.UC {
		e.ucResponder(q)
		return
	}
	e.responder(q)
}

// SetAddrs replaces the adapter addresses QP1 datagrams must be addressed
// to (Config.Addrs), as the interface gains or loses addresses. It is safe
// from any goroutine.
func (e *Engine) SetAddrs(addrs []netip.Addr) {
	own := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		own[i] = a.Unmap()
	}
	e.addrs.Store(&own)
}

// fromPeer reports whether e.pkt, a CNP, passes the checks an RC frame
// for q passes: q connected, addressed to q's endpoint, from q's peer.
func (e *Engine) fromPeer(q *QP) bool {
	return q.t.connected && !q.t.failed && q.t.toLocal(&e.pkt) &&
		(e.anySource || e.pkt.IP.Src.Unmap() == q.t.peerIP)
}

// toAdapter reports whether e.pkt is addressed to the adapter
// (Config.Addrs and MAC).
func (e *Engine) toAdapter() bool {
	if e.mac != (rocev2.MAC{}) && e.pkt.Eth.Dst != e.mac {
		return false
	}
	addrs := e.addrs.Load()
	if addrs == nil {
		return true
	}
	if e.pkt.IP.Dst.Is4In6() { // as qpTransport.toLocal
		return false
	}
	dst := e.pkt.IP.Dst
	for _, a := range *addrs {
		if a == dst {
			return true
		}
	}
	return false
}

// drainReady takes the QPs that posted since the last loop.
func (e *Engine) drainReady() int {
	n := 0
	var q *QP
	for e.ready.TryPop(&q) {
		// Clear before looking at the rings: a post after this point
		// queues the QP again, so none is missed.
		q.ready.Store(false)
		e.schedule(q)
		n++
	}
	return n
}

// schedule puts q on the list of QPs to service this loop.
func (e *Engine) schedule(q *QP) {
	if !q.t.active {
		q.t.active = true
		e.active = append(e.active, q)
	}
}

func (e *Engine) transmit() int {
	sent, n := 0, 0
	for i := 0; i < len(e.active); i++ {
		q := e.active[i]
		s, more := e.service(q)
		sent += s
		if more {
			e.active[n] = q
			n++
		} else {
			q.t.active = false
		}
	}
	clear(e.active[n:])
	e.active = e.active[:n]
	return sent
}

// service sends what q has to send: responses first (they unblock the
// peer's requester), then requests. It reports whether work is left.
func (e *Engine) service(q *QP) (int, bool) {
	t := &q.t
	if q.flushReq.Swap(false) {
		e.enterError(q)
	}
	sent, more := e.respond(q)
	if more {
		return sent, true
	}
	if t.failed {
		e.cancelAll(q)
		e.signalDrained(q)
		return sent, false
	}
	if t.ud {
		s, more := e.udRequest(q)
		return sent + s, more
	}
	if !t.connected {
		return sent, false
	}
	s, more := e.request(q)
	if s > 0 && t.ctl == ctlAck {
		// A held ACK rides in the same kick as the requests.
		t.ackHold = 0
		if e.sendCtl(q) != nil {
			more = true
		} else {
			s++
		}
	}
	return sent + s, more
}
