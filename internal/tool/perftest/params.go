package perftest

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Verb is the operation a test measures (perftest's VerbType).
type Verb int

const (
	Send Verb = iota
	Write
	Read
	Atomic
)

func (v Verb) String() string {
	return [...]string{"send", "write", "read", "atomic"}[v]
}

// Kind is bandwidth or latency (perftest's TestType BW / LAT).
type Kind int

const (
	BW Kind = iota
	Lat
)

// AtomicType is -A.
type AtomicType int

const (
	FetchAndAdd AtomicType = iota // perftest's default
	CompareAndSwap
)

// Defaults and limits of perftest (src/perftest_parameters.h).
const (
	DefaultPort      = 18515
	DefaultSizeBW    = 65536
	DefaultSizeLat   = 2
	DefaultIters     = 1000
	DefaultItersWBW  = 5000 // DEF_ITERS_WB: ib_write_bw
	DefaultTxBW      = 128
	DefaultTxLat     = 1
	DefaultRxSend    = 512
	DefaultCQMod     = 100
	SizeAtomic       = 8
	MinIters         = 5
	MaxIters         = 100000000
	MinTx            = 1
	MaxTx            = 15000
	MaxSize          = 8388608 // 8 MiB
	DefaultCycleBuf  = 4096    // sysconf(_SC_PAGESIZE), exchanged by check_sys_data
	DefaultCacheLine = 64
	// DefaultVersion is what we announce in exchange_versions: Debian 12's
	// perftest 4.5+0.17 says "6.06". Peers older than 5.70 refuse to run
	// (check_version_compatibility), and so do we.
	DefaultVersion = "6.06"
	minPeerVersion = 5.70
	// NoPeakIters: perftest computes the peak only up to 20000 iterations.
	NoPeakIters = 20000
	// DefaultQPTimeout is DEF_QP_TIME: 4.096 µs x 2^14, about 67 ms.
	DefaultQPTimeout = 14
)

// Retry bounds how often a client repeats a connection attempt the peer
// rejected with REJ reason 8 (nobody listening yet).
type Retry struct {
	Attempts int
	Interval time.Duration
}

// Params are the perftest options ndkxdp supports, with perftest's names.
type Params struct {
	Verb Verb
	Kind Kind
	// Size is -s (bytes); 0 means the test's default. Atomics are 8 bytes.
	Size int
	// Iterations is -n; 0 means the default (5000 for write bw, else 1000).
	Iterations int
	// TxDepth is -t; 0 means 128 for bandwidth, 1 for latency.
	TxDepth int
	// RxDepth is -r for send tests; 0 means 512 (never more than Iterations).
	RxDepth int
	// CQMod is -Q: one signaled completion every CQMod requests (bw); 0
	// means 100, clamped to TxDepth.
	CQMod int
	// OutReads is -o: outstanding READs/atomics; 0 means 16.
	OutReads int
	// Port is -p; 0 means 18515.
	Port uint16
	// ReportGbits is --report_gbits: Gb/s instead of MB/s (2^20 bytes).
	ReportGbits bool
	// NoPeak is -N. Forced on above 20000 iterations, as perftest does.
	NoPeak bool
	// AtomicType is -A.
	AtomicType AtomicType
	// GIDIndex is -x, echoed in pingpong_dest.
	GIDIndex int32
	// MTU is the path MTU in bytes (check_mtu exchanges it); 0 means 1024.
	MTU int
	// Duration is -D: run for this long instead of Iterations (which it
	// ignores, as perftest does), counting only what completes in the
	// sample window between the margins (duration.go). 0 means
	// iterations mode.
	Duration time.Duration
	// AllSizes is -a: one run of Iterations per size, 2 to 2^23 bytes
	// (allsizes.go); Size is then MaxSize, the buffer's.
	AllSizes bool
	// Version is what we announce; "" means DefaultVersion.
	Version string
	// ConnectRetry makes the client retry the data connection on REJ
	// reason 8 (perftest -R opens it right after a handshake, and a slow
	// server may not listen yet). Zero means no retry.
	ConnectRetry Retry
	// WriteImm is --write_with_imm (write tests only; perftest 24.01 and
	// later have it, Debian 12's 4.5+0.17 does not): the WRITEs are RDMA
	// WRITE with immediate (immediate 0, as perftest's), each consuming
	// one of the peer's receives (doc.go). The endpoint must implement
	// verbs.Immediate.
	WriteImm bool
	// UseSRQ is --use-srq (send tests only): the side's data QP takes its
	// receives from a shared receive queue of RxDepth receives, where
	// perftest has one (srq_exists: the server, and both sides of a
	// latency test; a bandwidth client receives nothing). The Listener or
	// Connector must implement verbs.SRQMaker.
	UseSRQ bool
	// BusyPoll makes the data path's completion polling spin without
	// ever blocking (verbs.Backoff.Busy); by default it spins for
	// verbs.DefaultSpin, then blocks until the endpoint has news.
	BusyPoll bool
	// Spin is how long the adaptive polling spins before it blocks
	// (verbs.Backoff.Spin); zero means verbs.DefaultSpin.
	Spin time.Duration
	// UD is -c UD (ib_send_bw only; ud.go): the data QP is an unreliable
	// datagram QP, found through rdma_cm's UDP port space. The Connector
	// or Listener must implement verbs.UDConnector or verbs.UDListener.
	UD bool
	// UC is -c UC (uc.go): the data QPs are unreliable-connection QPs,
	// for the send and write tests; connected as RC ones are.
	UC bool
	// QPs is -q: the data QPs of a bandwidth test (multiqp.go), each
	// with its own rdma_cm connection, buffer and pingpong_dest, each
	// running the full Iterations; 0 means 1. Latency tests take one.
	// More than one needs endpoints that implement verbs.AnyWaiter.
	QPs int
	// Output is --output: only the figure of each row (report.go).
	Output Output
	// LimitBW and LimitMsgRate are -w (--limit_bw) and -y
	// (--limit_msgrate), in the report's units; zero means none. A run
	// none of whose rows reaches them fails with ErrBelowLimit.
	LimitBW, LimitMsgRate float64
	// ReportBoth is --report-both: under -b each side's own row follows
	// the sum.
	ReportBoth bool
	// QPTimeout is -u, the IB local ACK timeout code (4.096 µs x
	// 2^QPTimeout) of data QPs connected out of band (without -R; an
	// rdma_cm connection takes the CM's); 0 means 14 (DEF_QP_TIME).
	QPTimeout int
	// ReportHistogram and ReportUnsorted are -H and -U (latency tests,
	// iterations mode): each row follows the samples, sorted and without
	// the tail, or as they were taken (report.go, PrintSamples).
	ReportHistogram, ReportUnsorted bool
	// PostList is -l (bandwidth tests): requests go out in lists of this
	// many, a list started only where all of it fits in the window
	// (run_iter_bw), and one in PostList is signaled unless -Q says
	// otherwise; 0 means 1.
	PostList int
	// Comm is how the sides exchange control messages: CommRDMACM is
	// -R, CommTCP perftest's default without it (socket.go).
	Comm Comm
	// Bidir is -b (bandwidth tests, one RC QP; bidir.go):
	// both sides run the test at once and each prints both sides' sum.
	Bidir bool

	// udSizeIsMTU: -c UD without -s, whose size becomes the path MTU
	// once it is agreed, as perftest's check_mtu does.
	udSizeIsMTU bool
}

// ErrUnsupported is an option ndkxdp does not run (yet).
var ErrUnsupported = errors.New("perftest: not supported")

// ErrProtocol is a peer message that does not fit perftest's protocol.
var ErrProtocol = errors.New("perftest: protocol error")

// Check reports what normalize would refuse, without changing p: a
// command checks its flags with it before it touches a device.
func (p Params) Check() error { return p.normalize() }

// normalize fills defaults and checks limits, as perftest's parser does.
func (p *Params) normalize() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("perftest: "+format+": %w", append(a, verbs.ErrInvalid)...)
	}
	if p.Verb < Send || p.Verb > Atomic || p.Kind < BW || p.Kind > Lat {
		return bad("unknown test %d/%d", p.Verb, p.Kind)
	}
	if err := p.normalizeMode(bad); err != nil {
		return err
	}
	if p.WriteImm && p.Verb != Write {
		return bad("--write_with_imm is for ib_write_bw and ib_write_lat, not %v %v", p.Verb, kindName(p.Kind))
	}
	if p.WriteImm && p.Duration > 0 {
		return fmt.Errorf("perftest: --write_with_imm with -D: %w", ErrUnsupported)
	}
	if p.UseSRQ && p.Verb != Send {
		// perftest_parameters.c: "Using SRQ only avavilible in SEND tests."
		return bad("--use-srq is for send tests, not %v", p.Verb)
	}
	if err := p.normalizeUD(); err != nil {
		return err
	}
	if err := p.normalizeUC(); err != nil {
		return err
	}
	if err := p.normalizeQPs(bad); err != nil {
		return err
	}
	if err := p.normalizeBidir(bad); err != nil {
		return err
	}
	if err := p.normalizeReport(bad); err != nil {
		return err
	}
	switch {
	case p.Verb == Atomic:
		if p.Size != 0 && p.Size != SizeAtomic {
			return bad("atomics are %d bytes, not %d", SizeAtomic, p.Size)
		}
		p.Size = SizeAtomic
	case p.Size == 0 && p.Kind == BW:
		p.Size = DefaultSizeBW
	case p.Size == 0:
		p.Size = DefaultSizeLat
	}
	if p.Size < 1 || p.Size > MaxSize {
		return bad("size %d outside 1..%d", p.Size, MaxSize)
	}
	if p.Iterations == 0 {
		p.Iterations = DefaultIters
		if p.Verb == Write && p.Kind == BW {
			p.Iterations = DefaultItersWBW
		}
	}
	if p.Iterations < MinIters || p.Iterations > MaxIters {
		return bad("iterations %d outside %d..%d", p.Iterations, MinIters, MaxIters)
	}
	if p.Duration > 0 {
		// force_dependencies: iters = 0, a counter of the sample window.
		p.Iterations, p.NoPeak = 0, true
	}
	if p.TxDepth == 0 {
		p.TxDepth = DefaultTxBW
		if p.Kind == Lat {
			p.TxDepth = DefaultTxLat
		}
	}
	if p.TxDepth < MinTx || p.TxDepth > MaxTx {
		return bad("tx depth %d outside %d..%d", p.TxDepth, MinTx, MaxTx)
	}
	if p.RxDepth == 0 {
		p.RxDepth = DefaultRxSend
		if p.UC {
			// Nothing resends what finds no receive: as many as the
			// iterations (perftest's UC_MAX_RX rule; see UCMaxRx).
			p.RxDepth = UCMaxRx
		}
	}
	if p.RxDepth < 1 || p.RxDepth > MaxTx {
		return bad("rx depth %d outside 1..%d", p.RxDepth, MaxTx)
	}
	if p.Duration == 0 {
		p.RxDepth = min(p.RxDepth, p.Iterations)
	}
	if err := p.normalizePostList(bad); err != nil {
		return err
	}
	if (p.ReportHistogram || p.ReportUnsorted) && p.Kind != Lat {
		return bad("-H, -U: Available only on Latency tests (perftest's words)")
	}
	if p.CQMod == 0 {
		p.CQMod = DefaultCQMod
	}
	if p.CQMod < 1 || p.CQMod > 1024 {
		return bad("cq moderation %d outside 1..1024", p.CQMod)
	}
	p.CQMod = min(p.CQMod, p.TxDepth)
	if p.Kind == Lat {
		p.CQMod = 1
	}
	if p.OutReads == 0 {
		p.OutReads = 16
	}
	if p.OutReads < 1 || p.OutReads > 255 {
		return bad("outstanding reads %d outside 1..255", p.OutReads)
	}
	if p.Verb == Read || p.Verb == Atomic {
		// The window is min(TxDepth, OutReads); a signaled request must fit in it.
		p.CQMod = min(p.CQMod, p.OutReads)
	}
	if p.PostList > window(p) {
		// run_iter_bw starts a list only where all of it fits.
		return bad("-l %d: a post list longer than the window of %d requests is never posted", p.PostList, window(p))
	}
	return p.normalizeWire(bad)
}

// normalizePostList checks -l as perftest's parser does: bandwidth tests
// only, the iterations a multiple of it, and it a multiple of -Q, which
// it becomes where -Q is not given.
func (p *Params) normalizePostList(bad func(format string, a ...any) error) error {
	if p.PostList == 0 {
		p.PostList = 1
	}
	switch {
	case p.PostList < 1:
		return bad("-l %d: a post list holds one request or more", p.PostList)
	case p.PostList == 1:
		return nil
	case p.Kind != BW:
		return bad("-l %d: Post list is supported in BW tests only (perftest's words)", p.PostList)
	case p.Duration > 0 || p.QPs > 1 || (p.Bidir && p.Verb == Send):
		return fmt.Errorf("perftest: -l with -D, -q above 1 or send bw -b: %w", ErrUnsupported)
	case p.Iterations%p.PostList != 0:
		return bad("-l %d: Number of iterations must be a multiple of post list size (perftest's words; -n %d)", p.PostList, p.Iterations)
	case p.CQMod != 0 && p.PostList%p.CQMod != 0:
		return bad("-l %d: Post list size must be a multiple of CQ moderation (perftest's words; -Q %d)", p.PostList, p.CQMod)
	case p.CQMod == 0:
		p.CQMod = p.PostList
	}
	return nil
}

// normalizeWire is normalize for the connection's parameters: port, MTU,
// version string and connect retries.
func (p *Params) normalizeWire(bad func(format string, a ...any) error) error {
	if p.Port == 0 {
		p.Port = DefaultPort
	}
	if p.MTU == 0 {
		p.MTU = 1024
	}
	if _, ok := mtuEnum(p.MTU); !ok {
		return bad("MTU %d is not 256, 512, 1024, 2048 or 4096", p.MTU)
	}
	if p.Version == "" {
		p.Version = DefaultVersion
	}
	if len(p.Version) >= VersionLen {
		return bad("version %q too long", p.Version)
	}
	if p.Iterations > NoPeakIters {
		p.NoPeak = true
	}
	if p.QPTimeout == 0 {
		p.QPTimeout = DefaultQPTimeout
	}
	if p.QPTimeout < 1 || p.QPTimeout > 31 {
		return bad("-u %d: an IB ACK timeout code is 1..31 (0, no timeout, is not run: ndkxdp always bounds its retransmissions)", p.QPTimeout)
	}
	if p.Comm < CommAuto || p.Comm > CommRDMACMControl {
		return bad("unknown control channel %d", p.Comm)
	}
	if p.ConnectRetry.Attempts < 0 || p.ConnectRetry.Attempts > 1000 || p.ConnectRetry.Interval < 0 || p.ConnectRetry.Interval > 10*time.Second {
		return bad("connect retry %+v out of bounds (at most 1000 attempts, 10 s apart)", p.ConnectRetry)
	}
	return nil
}

// normalizeBidir checks -b against the modes it runs in: perftest's
// parser refuses it for latency tests; the rest are what bidir.go does
// not run yet.
func (p *Params) normalizeBidir(bad func(format string, a ...any) error) error {
	switch {
	case !p.Bidir:
		return nil
	case p.Kind == Lat:
		return bad("-b: Bidirectional is only available in BW test (perftest's words)")
	case p.UD:
		return fmt.Errorf("perftest: -b with -c UD: %w", ErrUnsupported)
	case p.WriteImm:
		return fmt.Errorf("perftest: -b with --write_with_imm: %w", ErrUnsupported)
	}
	return nil
}

// normalizeReport checks --output, -w and -y as perftest's parser does.
func (p *Params) normalizeReport(bad func(format string, a ...any) error) error {
	switch {
	case p.Output < OutputFull || p.Output > OutputLatency:
		return bad("unknown --output %d", p.Output)
	case p.Output != OutputFull && p.Kind == BW && p.Output == OutputLatency:
		return bad("--output latency: Output verbosity level for BW can be: bandwidth, message_rate (perftest's words)")
	case p.Output != OutputFull && p.Kind == Lat && p.Output != OutputLatency:
		return bad("--output: Output verbosity level for LAT can be: latency (perftest's words)")
	case p.LimitBW < 0 || p.LimitMsgRate < 0 || math.IsNaN(p.LimitBW) || math.IsNaN(p.LimitMsgRate):
		return bad("-w %v -y %v: a limit must be a number of at least 0", p.LimitBW, p.LimitMsgRate)
	case (p.LimitBW > 0 || p.LimitMsgRate > 0) && p.Kind != BW:
		return bad("-w and -y are for bandwidth tests")
	}
	return nil
}

// MaxDuration bounds -D: perftest reads it into an int of seconds.
const MaxDuration = math.MaxInt32 * time.Second

// normalizeMode checks -D and -a, which exclude each other, and sets Size
// to the buffer -a needs.
func (p *Params) normalizeMode(bad func(format string, a ...any) error) error {
	if p.Duration < 0 || p.Duration > MaxDuration {
		return bad("duration %v outside (0, %v]", p.Duration, MaxDuration)
	}
	if !p.AllSizes {
		return nil
	}
	if p.Duration > 0 {
		// force_dependencies refuses the pair.
		return bad("-D with -a: duration mode does not run all sizes")
	}
	if p.Verb == Atomic {
		// -a sets the size to MAX_SIZE, which atomics refuse.
		return bad("-a with atomics: their message size cannot be changed")
	}
	p.Size = MaxSize
	return nil
}

// margin is -f's default, a quarter of Duration in whole seconds
// (force_dependencies: margin = duration / 4 in int seconds).
func (p *Params) margin() time.Duration {
	return p.Duration / time.Second / 4 * time.Second
}

// preRunHandshakes is how many 56-byte handshakes the test's main() does
// between the post-connect handshake of create_rdma_cm_connection and the
// measurement, read from Debian 12's perftest 4.5+0.17 binaries and matched
// with rdma_cm.pcap: write/read/atomic bw shake once per QP to gather,
// once per QP while printing, once "after moving qp to RTR"; send bw and
// the latency tests shake once more (send: a sync so the client does not
// send before the server posted its receives; lat: a gather of all QPs
// before the per-QP loop).
func (p *Params) preRunHandshakes() int {
	if p.Kind == BW && p.Verb != Send {
		return 3
	}
	return 4
}
