package rdma

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/internal/rawxdp"
	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// The CPU and bulk benchmarks (cpu_bench_test.go) run each side of a
// transfer as a process of its own, the test binary started again with
// procEnv set to a procJob, so that getrusage(RUSAGE_SELF) of each side
// counts that side's threads and nothing else (Go's threads are not the
// goroutines, so RUSAGE_THREAD cannot). The parent drives each child
// over its standard input, one command a line, and reads its answers from
// its standard output:
//
//	child:  ready INFO          (set up; INFO is what the peer needs)
//	parent: peer INFO           (the other side's INFO: connect)
//	child:  connected
//	parent: run                 (start moving data)
//	parent: start               (the measured window begins)
//	parent: stop                (it ends)
//	child:  result JSON         (a procResult), then the child exits
const procEnv = "NDKXDP_BENCH_PROC"

// procLimit bounds a child's life, whatever its parent does.
const procLimit = 90 * time.Second

// procQPN is the QP number the raw AF_XDP sides steer and address.
const procQPN = 0x0000b6

// procPort is the UDP and TCP port of the socket sides.
const procPort = 47100

// procJob says what one child does.
type procJob struct {
	// Kind is the contender: "rdma", "xdp", "udp" or "tcp".
	Kind string
	// Role is "tx" (sends), "rx" (receives) or, for rdma, "idle"
	// (connects its QPs and then does nothing).
	Role string
	// Host is the child's end of the pair, Peer the other's.
	Host, Peer vethpair.Host
	// Frame is the Ethernet frame size of every message of xdp, udp and
	// tcp, headers included (what an rdma message of Size bytes takes on
	// the wire); Payload is what each frame counts as delivered.
	Frame, Payload int
	// Size is an rdma message's size, and the size of each tcp write in
	// bulk mode.
	Size int
	// Op is rdma's operation: "send", "write" or "read". A READ's
	// requester is the "rx" side (the data flows to it), its responder
	// the "tx" side, as for the other contenders.
	Op string
	// Queues is rdma's ndk.Options.Queues; QPs the QPs each side
	// connects, spread over the queues.
	Queues, QPs int
	// Polling is rdma's engines' polling mode (NDKXDP_BENCH_POLL).
	Polling ndk.PollingMode
	// Notify makes rdma's receiver block for a CQ notification (Arm,
	// CQNotifyAny) once its CQ has been empty for a spin, as the tools'
	// consumers do (verbs.Backoff) and a receiver blocking in a read
	// does, instead of polling on.
	Notify bool
	// Pause makes rdma's SEND sender sleep this long after every 64
	// posts, so that its receiver goes idle between bursts (tests).
	Pause time.Duration
}

// procResult is what a child measured over the window.
type procResult struct {
	UserS, SysS float64 // getrusage(RUSAGE_SELF) over the window
	ElapsedS    float64
	Messages    uint64 // messages (frames, writes) completed or received
	Bytes       uint64 // their payload bytes
	// Waits counts a Notify receiver's waits for a CQ notification.
	Waits uint64 `json:",omitempty"`
	// Engine is rdma's engine counters over the window, summed over its
	// queues: the evidence of loss and recovery behind a rate.
	Engine *procEngine `json:",omitempty"`
}

// procEngine is the part of ndk.EngineStats a transfer's rate depends
// on: loss and recovery, and the engines' wake-ups (Sleeps, SlowYields).
type procEngine struct {
	FramesIn, FramesOut, Retransmits, Timeouts, NAKsSent, NAKsReceived uint64
	OutOfSeq, Duplicates, RNRSent, RNRReceived, TxFull                 uint64
	Sleeps, SlowYields                                                 uint64
}

func engineCounters(st []ndk.EngineStats) procEngine {
	var e procEngine
	for _, s := range st {
		e = e.plus(procEngine{s.FramesIn, s.FramesOut, s.Retransmits, s.Timeouts, s.NAKsSent, s.NAKsReceived,
			s.OutOfSeq, s.Duplicates, s.RNRSent, s.RNRReceived, s.TxFull, s.Sleeps, s.SlowYields})
	}
	return e
}

func (e procEngine) minus(o procEngine) procEngine {
	return procEngine{e.FramesIn - o.FramesIn, e.FramesOut - o.FramesOut, e.Retransmits - o.Retransmits,
		e.Timeouts - o.Timeouts, e.NAKsSent - o.NAKsSent, e.NAKsReceived - o.NAKsReceived,
		e.OutOfSeq - o.OutOfSeq, e.Duplicates - o.Duplicates, e.RNRSent - o.RNRSent,
		e.RNRReceived - o.RNRReceived, e.TxFull - o.TxFull, e.Sleeps - o.Sleeps, e.SlowYields - o.SlowYields}
}

func (e procEngine) plus(o procEngine) procEngine {
	return procEngine{e.FramesIn + o.FramesIn, e.FramesOut + o.FramesOut, e.Retransmits + o.Retransmits,
		e.Timeouts + o.Timeouts, e.NAKsSent + o.NAKsSent, e.NAKsReceived + o.NAKsReceived,
		e.OutOfSeq + o.OutOfSeq, e.Duplicates + o.Duplicates, e.RNRSent + o.RNRSent,
		e.RNRReceived + o.RNRReceived, e.TxFull + o.TxFull, e.Sleeps + o.Sleeps, e.SlowYields + o.SlowYields}
}

func (e procEngine) String() string {
	return fmt.Sprintf("frames in %d, out %d, sleeps %d, slow yields %d, RNR NAKs sent %d, received %d, retransmission rounds %d, ACK timeouts %d, out of sequence %d, TX ring full %d",
		e.FramesIn, e.FramesOut, e.Sleeps, e.SlowYields, e.RNRSent, e.RNRReceived, e.Retransmits, e.Timeouts, e.OutOfSeq, e.TxFull)
}

func (r procResult) CPU() float64 { return r.UserS + r.SysS }

// procSide is one child's contender-specific part.
type procSide interface {
	// info is what the peer needs to connect (may be empty).
	info() string
	// connect joins the peer, given its info.
	connect(peer string) error
	// run moves data until stop closes, counting into c.
	run(stop <-chan struct{}, c *procCount) error
	close()
}

type procCount struct{ messages, bytes, waits atomic.Uint64 }

func (c *procCount) add(m, b uint64) {
	c.messages.Add(m)
	c.bytes.Add(b)
}

// profileEnv names a directory where each child writes a CPU profile of
// its window, KIND-ROLE[-OP][-notify].pprof (go tool pprof reads it;
// SIGPROF counts kernel time too, under the syscall's frame).
const profileEnv = "NDKXDP_BENCH_CPUPROFILE"

// startProfile starts j's CPU profile if asked for; the returned func
// stops it.
func startProfile(j procJob) (stop func(), err error) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() {}, nil
	}
	name := j.Kind + "-" + j.Role
	if j.Op != "" {
		name += "-" + j.Op
	}
	if j.Notify {
		name += "-notify"
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// procMain is a child's main: it returns the exit status.
func procMain(spec string) int {
	time.AfterFunc(procLimit, func() {
		fmt.Fprintln(os.Stderr, "bench child: time limit reached")
		os.Exit(3)
	})
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 2
	}
	var j procJob
	if err := json.Unmarshal([]byte(spec), &j); err != nil {
		return fail(fmt.Errorf("job %q: %w", spec, err))
	}
	h, err := vethpair.Join(j.Host)
	if err != nil {
		return fail(err)
	}
	defer h.Leave()
	side, err := newProcSide(j, h)
	if err != nil {
		return fail(err)
	}
	defer side.close()
	fmt.Printf("ready %s\n", side.info())
	var c procCount
	stop := make(chan struct{})
	ran := make(chan error, 1)
	var r0 unix.Rusage
	var m0, b0, w0 uint64
	var e0 procEngine
	rs, _ := side.(*rdmaSide)
	var t0 time.Time
	stopProfile := func() {}
	running := false
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "peer":
			if err := side.connect(arg); err != nil {
				return fail(err)
			}
			fmt.Println("connected")
		case "run":
			running = true
			go func() { ran <- side.run(stop, &c) }()
		case "start":
			if stopProfile, err = startProfile(j); err != nil {
				return fail(err)
			}
			_ = unix.Getrusage(unix.RUSAGE_SELF, &r0)
			m0, b0, w0, t0 = c.messages.Load(), c.bytes.Load(), c.waits.Load(), time.Now()
			if rs != nil {
				e0 = engineCounters(rs.x.Adapter.Stats())
			}
		case "stop":
			var r1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &r1)
			stopProfile()
			res := procResult{
				UserS:    tvSeconds(r1.Utime) - tvSeconds(r0.Utime),
				SysS:     tvSeconds(r1.Stime) - tvSeconds(r0.Stime),
				ElapsedS: time.Since(t0).Seconds(),
				Messages: c.messages.Load() - m0,
				Bytes:    c.bytes.Load() - b0,
				Waits:    c.waits.Load() - w0,
			}
			if rs != nil {
				e := engineCounters(rs.x.Adapter.Stats()).minus(e0)
				res.Engine = &e
			}
			close(stop)
			if running {
				select {
				case err := <-ran:
					if err != nil {
						return fail(err)
					}
				case <-time.After(5 * time.Second):
					// A sender still blocked in the kernel: the window
					// is over anyway, and exit ends it.
				}
			}
			out, _ := json.Marshal(res)
			fmt.Printf("result %s\n", out)
			// Close nothing before the parent has both sides' results
			// (it then closes standard input): a TCP receiver that
			// closed first would reset its sender's last write.
			_, _ = io.Copy(io.Discard, os.Stdin)
			return 0
		default:
			return fail(fmt.Errorf("unknown command %q", in.Text()))
		}
		select {
		case err := <-ran:
			if err != nil {
				return fail(err)
			}
			return fail(errors.New("the transfer ended before stop"))
		default:
		}
	}
	return fail(errors.New("standard input closed before stop"))
}

func tvSeconds(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func newProcSide(j procJob, h *vethpair.Host) (procSide, error) {
	switch j.Kind {
	case "rdma":
		return newRDMASide(j, h)
	case "xdp":
		return newXDPSide(j, h)
	case "udp":
		return newUDPSide(j, h)
	case "tcp":
		return newTCPSide(j, h)
	}
	return nil, fmt.Errorf("unknown contender %q", j.Kind)
}

// rdmaSide is ndkxdp: an adapter opened in this process, QPs connected out
// of band to the peer's.
type rdmaSide struct {
	j   procJob
	x   *ndkhost.Host
	qps []*ndk.QP
	buf *ndk.MR // rx: the receive or WRITE target; tx: the source

	remoteAddr  uint64 // tx of WRITEs, rx of READs: the peer's buffer
	remoteToken uint32

	// wake has the receive CQ's notifications (Notify).
	wake chan struct{}
}

// initiator says whether the side posts the operation that moves the
// data: a WRITE's sender or a READ's requester.
func (s *rdmaSide) initiator() bool {
	return (s.j.Op == "write" && s.j.Role == "tx") || (s.j.Op == "read" && s.j.Role == "rx")
}

// procReadDepth is how many READs the requester keeps posted on each QP,
// as ib_read_bw keeps its send queue (tx depth 128) full; the engine has
// at most procReadLimit of them on the wire at once, perftest's
// outstanding-reads limit (16, what rxe and most adapters advertise).
const (
	procReadDepth = 128
	procReadLimit = 16
)

// procRecvDepth is each receiving QP's receive queue: deep, so that the
// receiving consumer's scheduling hiccups cost no RNR NAK round trips.
const procRecvDepth = 4096

func newRDMASide(j procJob, h *vethpair.Host) (*rdmaSide, error) {
	o := ndk.Options{Queues: j.Queues, Polling: j.Polling}
	s := &rdmaSide{j: j}
	cfg := ndkhost.Config{Options: o}
	if j.Notify {
		s.wake = make(chan struct{}, 1)
		cfg.ReceiveNotify = func(ndk.Status) {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	x, err := ndkhost.Open(h, cfg)
	if err != nil {
		return nil, err
	}
	s.x = x
	c := defaultQP
	c.ReceiveQueueDepth = procRecvDepth
	c.ReceiveCQ, c.InitiatorCQ = x.RCQ, x.ICQ
	for i := range max(j.QPs, 1) {
		c.Context = i
		q, err := x.PD.CreateQP(c)
		if err != nil {
			s.close()
			return nil, err
		}
		s.qps = append(s.qps, q)
	}
	n := j.Size
	if j.Op == "send" && j.Role == "rx" {
		n = j.Size * c.ReceiveQueueDepth * len(s.qps)
	}
	mem, err := x.Adapter.Memory(max(n, 1))
	if err != nil {
		s.close()
		return nil, err
	}
	flags := ndk.MRFlagAllowLocalWrite | ndk.MRFlagAllowRemoteWrite
	if j.Op == "read" && j.Role == "tx" { // the responder's memory, read remotely
		flags = ndk.MRFlagAllowLocalWrite | ndk.MRFlagAllowRemoteRead
	}
	if s.buf, err = x.PD.RegisterMR(mem, flags); err != nil {
		s.close()
		return nil, err
	}
	if j.Op == "send" && j.Role == "rx" {
		for qi, q := range s.qps {
			for i := range c.ReceiveQueueDepth {
				k := qi*c.ReceiveQueueDepth + i
				if err := q.Receive(k, s.sgl(k)); err != nil {
					s.close()
					return nil, err
				}
			}
		}
	}
	return s, nil
}

// sgl is the k-th message-sized piece of the side's buffer.
func (s *rdmaSide) sgl(k int) []ndk.SGE {
	return []ndk.SGE{{Addr: s.buf.Addr() + uint64(k*s.j.Size), Length: uint32(s.j.Size), Token: s.buf.LocalToken()}}
}

func (s *rdmaSide) info() string {
	eps := make([]string, len(s.qps))
	for i, q := range s.qps {
		eps[i] = q.LocalEndpoint().String()
	}
	return fmt.Sprintf("%s %d %d", strings.Join(eps, ","), s.buf.Addr(), s.buf.RemoteToken())
}

func (s *rdmaSide) connect(peer string) error {
	f := strings.Fields(peer)
	if len(f) != 3 {
		return fmt.Errorf("peer info %q", peer)
	}
	eps := strings.Split(f[0], ",")
	if len(eps) != len(s.qps) {
		return fmt.Errorf("peer has %d QPs, this side %d", len(eps), len(s.qps))
	}
	for i, q := range s.qps {
		ep, err := ndk.ParseEndpoint(eps[i])
		if err != nil {
			return err
		}
		o := ndk.ConnectOptions{InboundReadLimit: procReadLimit, OutboundReadLimit: procReadLimit}
		if err := s.x.Net.Do(func() error { return q.ConnectOOB(ep, o) }); err != nil {
			return err
		}
	}
	if s.initiator() {
		addr, err1 := strconv.ParseUint(f[1], 10, 64)
		token, err2 := strconv.ParseUint(f[2], 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("peer info %q: %w", peer, err)
		}
		s.remoteAddr, s.remoteToken = addr, uint32(token)
	}
	return nil
}

func (s *rdmaSide) run(stop <-chan struct{}, c *procCount) error {
	switch {
	case s.j.Role == "idle" || (s.j.Op != "send" && !s.initiator()):
		// The engine places WRITEs and answers READs without the
		// consumer.
		<-stop
		return nil
	case s.j.Op == "read":
		return s.read(stop, c)
	case s.j.Role == "rx":
		return s.receive(stop, c)
	case s.j.Op == "send":
		return s.send(stop)
	default:
		return s.write(stop, c)
	}
}

func (s *rdmaSide) receive(stop <-chan struct{}, c *procCount) error {
	rs := make([]ndk.Result, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var idle verbs.Backoff
	for {
		if stopped(stop) {
			return nil
		}
		n := s.x.RCQ.GetResults(rs)
		for _, r := range rs[:n] {
			if r.Status != ndk.StatusSuccess {
				return fmt.Errorf("receive: %v", r.Status)
			}
			k := r.RequestContext.(int)
			if err := s.qps[k/procRecvDepth].Receive(k, s.sgl(k)); err != nil {
				return err
			}
		}
		c.add(uint64(n), uint64(n*s.j.Size))
		switch {
		case n > 0:
			idle.Reset()
		case !s.j.Notify:
			runtime.Gosched()
		default:
			if err := idle.Idle(ctx, cqWaiter{s, c}); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}

// cqWaiter blocks a Notify receiver until its receive CQ has news.
type cqWaiter struct {
	s *rdmaSide
	c *procCount // counts the waits
}

func (w cqWaiter) Wait(ctx context.Context) error {
	// The arm fires at once for completions that came since the last
	// poll, so none is waited past.
	if err := w.s.x.RCQ.Arm(ndk.CQNotifyAny); err != nil {
		return err
	}
	w.c.waits.Add(1)
	select {
	case <-w.s.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *rdmaSide) send(stop <-chan struct{}) error {
	sgl := s.sgl(0)
	for i := 0; ; i++ {
		if i&63 == 0 {
			if stopped(stop) {
				return nil
			}
			if s.j.Pause > 0 && i > 0 {
				time.Sleep(s.j.Pause)
			}
		}
		err := s.qps[i%len(s.qps)].Send(nil, sgl, ndk.OpFlagSilentSuccess)
		if errors.Is(err, ndk.ErrInsufficientResources) {
			runtime.Gosched()
			continue
		}
		if err != nil {
			return err
		}
	}
}

func (s *rdmaSide) write(stop <-chan struct{}, c *procCount) error {
	sgl := s.sgl(0)
	rs := make([]ndk.Result, 64)
	for i := 0; ; i++ {
		if i&15 == 0 && stopped(stop) {
			return nil
		}
		err := s.qps[i%len(s.qps)].Write(nil, sgl, s.remoteAddr, s.remoteToken, 0)
		if err != nil && !errors.Is(err, ndk.ErrInsufficientResources) {
			return err
		}
		n := s.x.ICQ.GetResults(rs)
		for _, r := range rs[:n] {
			if r.Status != ndk.StatusSuccess {
				return fmt.Errorf("write: %v", r.Status)
			}
		}
		c.add(uint64(n), uint64(n*s.j.Size))
		if err != nil && n == 0 {
			runtime.Gosched()
		}
	}
}

// read keeps procReadDepth READs of the peer's buffer posted on each QP,
// posting again as they complete.
func (s *rdmaSide) read(stop <-chan struct{}, c *procCount) error {
	sgl := s.sgl(0)
	rs := make([]ndk.Result, 64)
	posted := make([]int, len(s.qps))
	for i := 0; ; i++ {
		if i&15 == 0 && stopped(stop) {
			return nil
		}
		full := 0
		for qi, q := range s.qps {
			for posted[qi] < procReadDepth {
				err := q.Read(nil, sgl, s.remoteAddr, s.remoteToken, 0)
				if errors.Is(err, ndk.ErrInsufficientResources) {
					break
				}
				if err != nil {
					return err
				}
				posted[qi]++
			}
			if posted[qi] >= procReadDepth {
				full++
			}
		}
		n := s.x.ICQ.GetResults(rs)
		for _, r := range rs[:n] {
			if r.Status != ndk.StatusSuccess {
				return fmt.Errorf("read: %v", r.Status)
			}
			posted[r.QPContext.(int)]--
		}
		c.add(uint64(n), uint64(n*s.j.Size))
		if n == 0 && full == len(s.qps) {
			runtime.Gosched()
		}
	}
}

func (s *rdmaSide) close() {
	for _, q := range s.qps {
		q.Close()
	}
	s.x.Close()
}

// xdpSide is the raw AF_XDP reference: RoCEv2 frames of j.Frame bytes
// steered by ndkxdp's program to one socket per queue (j.Queues), as
// ndkxdp's frames are, with nothing done to them. The sender keeps its
// TX ring full, reserving up to xdpTxBatch frames a kick; the receiver
// takes up to xdpRxBatch frames a look and refills the fill ring as it
// goes. Frames larger than a UMEM frame go
// as multi-buffer chains (XDP_USE_SG), as ndkxdp's do. Both sides
// busy-poll, yielding now and then.
type xdpSide struct {
	j    procJob
	e    *rawxdp.Endpoint
	xsks []xsk // one per queue; the first is e's
}

// xsk is one queue's socket, its UMEM and the QP number its frames carry
// (one per queue, each steered to its queue).
type xsk struct {
	sock   *afxdp.Socket
	umem   *afxdp.UMEM
	frames *afxdp.FrameAllocator
	qpn    uint32
}

// The raw sides batch as ndkxdp's engine does (ndk/internal/rc): up to
// 16 received frames a look at the RX ring (rxBatch) and up to 64 frames
// a kick (qpBudget, one QP's frames per loop).
const (
	xdpRxBatch = 16
	xdpTxBatch = 64
)

func newXDPSide(j procJob, h *vethpair.Host) (*xdpSide, error) {
	mb := j.Frame > 4096
	e, err := rawxdp.Open(h, rawxdp.Config{Attach: loader.AttachAuto, MultiBuffer: mb, BusyPoll: true})
	if err != nil {
		return nil, err
	}
	s := &xdpSide{j: j, e: e, xsks: []xsk{{sock: e.Sock, umem: e.UMEM, frames: e.Frames(), qpn: procQPN}}}
	for q := 1; q < max(j.Queues, 1); q++ {
		x := xsk{qpn: procQPN + uint32(q)}
		err := h.Do(func() error {
			var err error
			if x.umem, err = afxdp.NewUMEM(afxdp.UMEMConfig{}); err != nil {
				return err
			}
			sc := afxdp.SocketConfig{Ifindex: h.Ifindex, Queue: uint32(q), MultiBuffer: mb,
				BusyPoll: &afxdp.BusyPollConfig{Timeout: 20 * time.Microsecond, Budget: 64, Prefer: true}}
			if x.sock, err = afxdp.NewSocket(x.umem, sc); err != nil {
				x.umem.Close()
				return err
			}
			return e.XDP.RegisterSocket(uint32(q), x.sock.FD())
		})
		if err != nil {
			s.close()
			return nil, err
		}
		x.frames = x.umem.Allocator()
		x.sock.Fill().FillFrom(x.frames, min(x.sock.Fill().Size(), x.frames.Available()/2))
		s.xsks = append(s.xsks, x)
	}
	for q, x := range s.xsks {
		if err := e.XDP.AddQP(x.qpn, uint32(q)); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

func (s *xdpSide) info() string         { return "" }
func (s *xdpSide) connect(string) error { return nil }

func (s *xdpSide) close() {
	for _, x := range s.xsks[1:] {
		x.sock.Close()
		x.umem.Close()
	}
	s.e.Close()
}

// run serves each queue's socket on a thread of its own.
func (s *xdpSide) run(stop <-chan struct{}, c *procCount) error {
	errs := make(chan error, len(s.xsks))
	for _, x := range s.xsks {
		go func() {
			runtime.LockOSThread()
			if s.j.Role == "rx" {
				errs <- s.receive(x, stop, c)
			} else {
				errs <- s.send(x, stop, c)
			}
		}()
	}
	var err error
	for range s.xsks {
		err = errors.Join(err, <-errs)
	}
	return err
}

func (s *xdpSide) receive(x xsk, stop <-chan struct{}, c *procCount) error {
	rx, fill, frames := x.sock.RX(), x.sock.Fill(), x.frames
	k := (s.j.Frame + int(x.umem.FrameSize()) - 1) / int(x.umem.FrameSize()) // descriptors a frame
	for spins := 0; ; spins++ {
		if spins&1023 == 0 && stopped(stop) {
			return nil
		}
		start, got := rx.Peek(uint32(xdpRxBatch * k))
		if got == 0 {
			procSpin(spins)
			if fill.NeedWakeup() {
				if err := x.sock.WakeupRX(); err != nil {
					return err
				}
			}
			continue
		}
		var packets uint64
		for i := range got {
			d := rx.Get(start + i)
			if d.Options&afxdp.PktContd == 0 {
				packets++
			}
			_ = frames.Free(d.Addr)
		}
		rx.Release(got)
		fill.FillFrom(frames, got)
		c.add(packets, packets*uint64(s.j.Payload))
	}
}

func (s *xdpSide) send(x xsk, stop <-chan struct{}, c *procCount) error {
	frame, err := baseline.RoCEFrame(&s.j.Host, &s.j.Peer, x.qpn, s.j.Frame)
	if err != nil {
		return err
	}
	// A ring of packets, each a chain of k UMEM frames written once:
	// completions come back in order, so the oldest packet is free again
	// once its k descriptors completed.
	chunk := int(x.umem.FrameSize())
	k := (len(frame) + chunk - 1) / chunk
	tx, comp := x.sock.TX(), x.sock.Completion()
	npkt := min(int(tx.Size())/k, int(x.frames.Available())/k, 512)
	pkts := make([][]afxdp.Desc, npkt)
	for i := range pkts {
		for f := range k {
			addr, ok := x.frames.Alloc()
			if !ok {
				return errors.New("out of UMEM frames")
			}
			part := frame[f*chunk : min(len(frame), (f+1)*chunk)]
			copy(x.umem.Frame(addr), part)
			pkts[i] = append(pkts[i], afxdp.Desc{Addr: addr, Len: uint32(len(part))})
		}
	}
	var submitted, completed uint64 // packets
	var doneDescs uint64
	for spins := 0; ; spins++ {
		if spins&255 == 0 && stopped(stop) {
			return nil
		}
		if _, got := comp.Peek(comp.Size()); got > 0 {
			comp.Release(got)
			doneDescs += uint64(got)
			n := doneDescs/uint64(k) - completed
			completed += n
			c.add(n, n*uint64(s.j.Payload))
		}
		if free := npkt - int(submitted-completed); free > 0 {
			if want := min(free, xdpTxBatch, int(tx.Free())/k); want > 0 {
				start, got := tx.Reserve(uint32(want * k))
				if got < uint32(want*k) {
					tx.Cancel(got)
				} else {
					for i := range want {
						tx.SetPacket(start+uint32(i*k), pkts[(submitted+uint64(i))%uint64(npkt)])
					}
					tx.Submit()
					submitted += uint64(want)
				}
			}
		}
		if err := x.sock.Kick(); err != nil && !errors.Is(err, afxdp.ErrTxBusy) {
			return err
		}
	}
}

// procSpin yields the CPU now and then while a busy-poll loop finds
// nothing, so that softirq work on a small machine is not starved (as
// the baseline package's reference does).
func procSpin(spins int) {
	if spins&255 == 0 {
		runtime.Gosched()
		_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// udpSide is Go UDP: datagrams of j.Frame bytes on the wire.
type udpSide struct {
	j procJob
	c *net.UDPConn
}

func newUDPSide(j procJob, h *vethpair.Host) (*udpSide, error) {
	s := &udpSide{j: j}
	err := h.Do(func() error {
		var err error
		s.c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.IPv4, procPort)))
		return err
	})
	if err != nil {
		return nil, err
	}
	_ = s.c.SetReadBuffer(8 << 20)
	return s, nil
}

func (s *udpSide) info() string         { return "" }
func (s *udpSide) connect(string) error { return nil }
func (s *udpSide) close()               { s.c.Close() }

func (s *udpSide) run(stop <-chan struct{}, c *procCount) error {
	go func() { <-stop; _ = s.c.SetDeadline(time.Now()) }()
	if s.j.Role == "rx" {
		buf := make([]byte, 65536)
		for {
			if _, err := s.c.Read(buf); err != nil {
				return nil
			}
			c.add(1, uint64(s.j.Payload))
		}
	}
	msg := make([]byte, s.j.Frame-procUDPHeaders)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.j.Peer.IPv4, procPort))
	for {
		if stopped(stop) {
			return nil
		}
		if _, err := s.c.WriteToUDP(msg, dst); err != nil {
			if errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN) {
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return err
		}
	}
}

// Header bytes in front of a UDP or TCP payload (IPv4, no options).
const (
	procUDPHeaders = 14 + 20 + 8
	procTCPHeaders = 14 + 20 + 20
)

// tcpSide is Go TCP with TCP_NODELAY, one connection: messages of
// j.Frame bytes on the wire (j.Frame less the headers on the stream), or
// in bulk mode writes of j.Size bytes.
type tcpSide struct {
	j  procJob
	h  *vethpair.Host
	ln *net.TCPListener
	c  *net.TCPConn
}

func newTCPSide(j procJob, h *vethpair.Host) (*tcpSide, error) {
	s := &tcpSide{j: j, h: h}
	if j.Role == "rx" {
		err := h.Do(func() error {
			var err error
			s.ln, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.IPv4, procPort)))
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *tcpSide) info() string { return "" }

func (s *tcpSide) connect(string) error {
	if s.ln != nil {
		_ = s.ln.SetDeadline(time.Now().Add(5 * time.Second))
		c, err := s.ln.AcceptTCP()
		if err != nil {
			return err
		}
		s.c = c
	} else {
		err := s.h.Do(func() error {
			d := net.Dialer{Timeout: 5 * time.Second}
			c, err := d.Dial("tcp4", netip.AddrPortFrom(s.j.Peer.IPv4, procPort).String())
			if err == nil {
				s.c = c.(*net.TCPConn)
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return s.c.SetNoDelay(true)
}

func (s *tcpSide) close() {
	if s.c != nil {
		s.c.Close()
	}
	if s.ln != nil {
		s.ln.Close()
	}
}

func (s *tcpSide) run(stop <-chan struct{}, c *procCount) error {
	go func() { <-stop; _ = s.c.SetDeadline(time.Now()) }()
	if s.j.Role == "rx" {
		// Messages are counted as the stream's bytes divided by their
		// size; bulk counts bytes.
		buf := make([]byte, 256<<10)
		per := uint64(s.j.Frame - procTCPHeaders)
		if s.j.Size > 0 {
			per = uint64(s.j.Size)
		}
		var left uint64
		for {
			n, err := s.c.Read(buf)
			left += uint64(n)
			if m := left / per; m > 0 {
				left -= m * per
				c.add(m, m*per)
			}
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	n := s.j.Frame - procTCPHeaders
	if s.j.Size > 0 {
		n = s.j.Size
	}
	msg := make([]byte, n)
	for {
		if _, err := s.c.Write(msg); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if stopped(stop) {
				return nil
			}
			return err
		}
	}
}

// procStarted is a running child and the lines it printed.
type procStarted struct {
	job   procJob
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	err   lockedBuffer
	done  chan error
}

// startProc starts the test binary again as the child of j.
func startProc(j procJob) (*procStarted, error) {
	spec, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	p := &procStarted{job: j, lines: make(chan string, 16), done: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), procEnv+"="+string(spec))
	p.cmd.Stderr = &p.err
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- p.cmd.Wait()
	}()
	return p, nil
}

func (p *procStarted) name() string { return p.job.Kind + "-" + p.job.Role }

// expect waits for the child's next line, which must start with word,
// and returns the rest of it.
func (p *procStarted) expect(word string, d time.Duration) (string, error) {
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("%s exited before %q:\n%s", p.name(), word, p.err.Bytes())
		}
		rest, found := strings.CutPrefix(l, word)
		if !found {
			return "", fmt.Errorf("%s said %q, want %q:\n%s", p.name(), l, word, p.err.Bytes())
		}
		return strings.TrimSpace(rest), nil
	case <-time.After(d):
		return "", fmt.Errorf("%s: no %q within %v:\n%s", p.name(), word, d, p.err.Bytes())
	}
}

func (p *procStarted) send(line string) error {
	_, err := io.WriteString(p.in, line+"\n")
	return err
}

// end kills the child (by its PID) if it still runs, and reaps it.
func (p *procStarted) end() {
	_ = p.in.Close()
	select {
	case <-p.done:
		return
	case <-time.After(10 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// runProcs runs the two sides of one transfer as two children: connects
// them, lets them move data for warm, then measures window, and returns
// what each side measured.
func runProcs(rx, tx procJob, warm, window time.Duration) (rxr, txr procResult, err error) {
	var ps []*procStarted
	defer func() {
		for _, p := range ps {
			p.end()
		}
	}()
	infos := make([]string, 2)
	for i, j := range []procJob{rx, tx} {
		p, err := startProc(j)
		if err != nil {
			return rxr, txr, err
		}
		ps = append(ps, p)
		if infos[i], err = p.expect("ready", 30*time.Second); err != nil {
			return rxr, txr, err
		}
	}
	// The sender (who dials, for TCP) is told first.
	for _, i := range []int{1, 0} {
		if err := ps[i].send("peer " + infos[1-i]); err != nil {
			return rxr, txr, err
		}
	}
	for _, cmd := range []string{"", "run", "start", "stop"} {
		for _, p := range ps {
			if cmd == "" {
				if _, err := p.expect("connected", 15*time.Second); err != nil {
					return rxr, txr, err
				}
				continue
			}
			if err := p.send(cmd); err != nil {
				return rxr, txr, fmt.Errorf("%s: %w:\n%s", p.name(), err, p.err.Bytes())
			}
		}
		switch cmd {
		case "run":
			time.Sleep(warm)
		case "start":
			time.Sleep(window)
		}
	}
	var res [2]procResult
	for i, p := range ps {
		l, err := p.expect("result", 15*time.Second)
		if err != nil {
			return rxr, txr, err
		}
		if err := json.Unmarshal([]byte(l), &res[i]); err != nil {
			return rxr, txr, fmt.Errorf("%s: result %q: %w", p.name(), l, err)
		}
	}
	return res[0], res[1], nil
}

// stopped reports whether stop is closed, without blocking: the load
// loops check it every so many iterations.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
