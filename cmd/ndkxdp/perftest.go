package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

const perfTestUsage = "usage: ndkxdp perf <send_bw|write_bw|read_bw|send_lat|write_lat|read_lat|atomic_bw|atomic_lat> [-s size|-a] [-n iters|-D seconds] [-t txdepth] [-q qps] [-b] [-p port] [-use-srq] [-write_with_imm] [-polling adaptive|busy|progress] [-capture FILE] [ADDR] -dev IFNAME|-daemon SOCKET\n       ndkxdp perf tcp_lat [-s size] [-n iters] [-p port] [ADDR]"

// perfTestSynopsis is the -h text of one test.
func perfTestSynopsis(name string) string {
	if name == "tcp_lat" {
		return `usage: ndkxdp perf tcp_lat [-s size] [-n iters] [-p port] [ADDR]

send_lat's ping-pong over kernel TCP (TCP_NODELAY), the baseline the
latency tests are held against. Without ADDR it is the server and waits
for one client; with ADDR (an address or host name) it is the client of
the server there.`
	}
	return fmt.Sprintf(`usage: ndkxdp perf %s [flags] [ADDR] -dev IFNAME|-daemon SOCKET

perftest's ib_%s over ndkxdp on IFNAME, or through the ndkxdp daemon
serving at SOCKET, compatible with perftest on the other side, with -R
(rdma_cm) or without it (control messages over TCP, the data QP
connected out of band). Without ADDR it is the server and waits for one
client, taking either kind; with ADDR (an address or host name) it is
the client of the server there. ADDR may stand before, between or after
the flags.`, name, name)
}

// perfTests maps the command's test names to perftest's binaries' tests.
var perfTests = map[string]struct {
	verb perftest.Verb
	kind perftest.Kind
}{
	"send_bw": {perftest.Send, perftest.BW}, "write_bw": {perftest.Write, perftest.BW},
	"read_bw": {perftest.Read, perftest.BW}, "atomic_bw": {perftest.Atomic, perftest.BW},
	"send_lat": {perftest.Send, perftest.Lat}, "write_lat": {perftest.Write, perftest.Lat},
	"read_lat": {perftest.Read, perftest.Lat}, "atomic_lat": {perftest.Atomic, perftest.Lat},
}

// runPerfTest is one of perftest's ib_*_bw / ib_*_lat tools in rdma_cm mode
// (-R) on an ndkxdp adapter: the server without ADDR, the client with it,
// compatible with perftest on the other side.
func runPerfTest(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	if name == "tcp_lat" {
		return runTCPLat(ctx, args, stdout, stderr)
	}
	f, err := parsePerfTest(name, args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	cmdline.EnterPhase(ctx, "address lookup")
	var peer netip.Addr
	if f.addr != "" {
		if peer, err = cmdline.LookupAddr(ctx, "server address", f.addr); err != nil {
			return stepTimedOut(ctx, err, f.timeout, "address lookup")
		}
	}
	if err := cmdline.ToolNeedsCaps(f.daemon); err != nil {
		return err
	}
	capture, err := cmdline.OpenCapture(f.capture, &f.opts)
	if err != nil {
		return err
	}
	if capture != nil {
		defer capture.Close()
	}
	if f.daemon == "" {
		if err := f.nic.Apply(&f.opts, f.dev); err != nil {
			return err
		}
	}
	procs := ""
	if f.params.Kind == perftest.Lat {
		engines := f.opts.Queues
		if f.daemon != "" {
			engines = 0 // the daemon runs them
		}
		n, restore := latencyProcs(engines)
		defer restore()
		procs = fmt.Sprintf(", GOMAXPROCS %d", n)
	}
	step := cmdline.OpenStep(f.dev, f.daemon)
	cmdline.EnterPhase(ctx, step)
	d, err := cmdline.OpenDevice(ctx, f.dev, f.daemon, f.opts)
	if err != nil {
		return stepTimedOut(ctx, err, f.timeout, step)
	}
	defer d.Close()
	// Through a daemon the engines' counters are the daemon's since it
	// started: the run reports what changed during it.
	engines := d.Adapter.Stats()
	p := f.params
	p.MTU = d.Adapter.PathMTU()
	role := "server"
	if peer.IsValid() {
		role = "client of " + peer.String()
	}
	srq := ""
	if p.UseSRQ && (!peer.IsValid() || p.Kind == perftest.Lat || p.Bidir) {
		srq = ", receives through a shared receive queue (--use-srq)"
	}
	if p.WriteImm {
		srq += ", RDMA WRITE with immediate (--write_with_imm)"
	}
	if p.UC {
		srq += ", unreliable connection (-c UC: nothing acknowledged or resent)"
	}
	if p.QPs > 1 {
		srq += fmt.Sprintf(", %d QPs over %d engine(s)", p.QPs, len(engines))
	}
	if p.Bidir {
		srq += ", bidirectional (-b)"
	}
	if tc := f.opts.TrafficClass; tc != (ndk.TrafficClass{}) {
		srq += fmt.Sprintf(", IP TOS %d (-T)", rocev2.TOS(tc.DSCP, rocev2.ECN(tc.ECN)))
	}
	// Under --output stdout carries the figures alone, as perftest's does.
	info := stdout
	if p.Output != perftest.OutputFull {
		info = stderr
	}
	fmt.Fprintf(info, "ndkxdp perf %s: %s, path MTU %d, %s%s%s\n", name, role, p.MTU, pollingText(f.polling, f.spin, len(engines)), procs, srq)
	cmdline.EnterPhase(ctx, "perf "+name+" as "+role)
	var res perftest.Result
	// Through a daemon the engines' counters are the daemon's since it
	// started: the run reports what changed during it.
	base := cmdline.SumStats(engines)
	stopProgress := cmdline.Progress(stderr, progressLabel(name, p), d.Adapter)
	defer stopProgress()
	var depths ndkverbs.Depths
	if p.UC {
		depths.Receive = perftest.UCMaxRx // the receives a UC send test posts
	}
	if peer.IsValid() {
		res, err = perftest.RunClient(ctx, p, &ndkverbs.Connector{Dev: d, Peer: peer, Depths: depths}, stdout)
	} else {
		// Over TCP only, no rdma_cm listener: a client's REQ then finds
		// none (REJ reason 8), as with perftest's server without -R.
		l := ndkverbs.Unbound(d, depths)
		if p.Comm != perftest.CommTCP {
			if l, err = ndkverbs.Listen(d, p.Port, depths); err != nil {
				return err
			}
		}
		defer l.Close()
		res, err = perftest.RunServer(ctx, p, l, stdout)
	}
	stopProgress()
	if f.histogram {
		perftest.PrintHistogram(info, res.Hist)
	}
	if p.QPs > 1 && err == nil {
		printSpread(info, engines, d.Adapter.Stats())
	}
	printRunStats(stderr, cmdline.StatsSince(cmdline.SumStats(d.Adapter.Stats()), base), res.Waits, f.daemon != "")
	return stepTimedOut(ctx, err, f.timeout, "perf "+name+" as "+role)
}

// perfTestFlags are one test's command line, checked.
type perfTestFlags struct {
	params                      perftest.Params
	opts                        ndk.Options
	addr, dev, polling, capture string
	daemon                      string
	timeout, spin               time.Duration
	histogram                   bool
	nic                         cmdline.NICFlags
}

// parsePerfTest checks every flag, perftest's limits included, before
// anything touches the system or prints.
func parsePerfTest(name string, args []string, stdout, stderr io.Writer) (perfTestFlags, error) {
	var f perfTestFlags
	test, ok := perfTests[name]
	if !ok {
		return f, cmdline.Usagef("unknown test %q\n%s", name, perfTestUsage)
	}
	fs := cmdline.NewFlagSet("perf "+name, perfTestSynopsis(name), stderr)
	p := &f.params
	*p = perftest.Params{Verb: test.verb, Kind: test.kind}
	fs.IntVar(&p.Size, "s", 0, "message size in bytes (default: perftest's)")
	fs.IntVar(&p.Iterations, "n", 0, "iterations (default: perftest's)")
	fs.BoolVar(&p.AllSizes, "a", false, "run every size from 2 to 2^23 bytes, a row each (perftest's -a; both sides)")
	fs.BoolVar(&p.AllSizes, "all", false, "the same as -a")
	secs := fs.Int("D", 0, "duration mode: run this many seconds instead of -n iterations, counting the window between margins of a quarter each (perftest's -D)")
	fs.IntVar(secs, "duration", 0, "the same as -D")
	fs.IntVar(&p.TxDepth, "t", 0, "TX depth (default: perftest's)")
	fs.IntVar(&p.RxDepth, "r", 0, "RX depth of send tests (default: perftest's)")
	fs.IntVar(&p.CQMod, "Q", 0, "signal every Q-th request (bw)")
	fs.IntVar(&p.OutReads, "o", 0, "outstanding READs/atomics")
	fs.BoolVar(&f.histogram, "histogram", false, "latency tests: print the distribution of the samples after the report")
	port := fs.Uint("p", perftest.DefaultPort, "rdma_cm port")
	cas := fs.Bool("cmp_and_swap", false, "atomic_bw and atomic_lat: CMP_AND_SWAP instead of FETCH_AND_ADD (-A)")
	fs.BoolVar(&p.ReportGbits, "report_gbits", false, "report Gb/s instead of MB/s")
	fs.BoolVar(&p.NoPeak, "N", false, "no peak bandwidth")
	fs.BoolVar(&p.UseSRQ, "use-srq", false, "send tests: receive through a shared receive queue of -r receives (perftest's --use-srq)")
	fs.BoolVar(&p.UseSRQ, "use_srq", false, "the same as -use-srq")
	fs.BoolVar(&p.WriteImm, "write_with_imm", false, "write tests: RDMA WRITE with immediate, each consuming a receive of the peer (perftest 24.01 and later's --write_with_imm)")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev (-polling then sets the test's polling; the daemon's engines poll as it was started)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.StringVar(&f.polling, "polling", "adaptive", "adaptive: engines and the test spin briefly, then sleep until there is work; auto: progress where GOMAXPROCS exceeds the engines plus one, else adaptive (ndk.PollAuto); busy: they never sleep (a core each); progress: the test's polls and posts run the engine's turn on its own thread (ndk.PollProgress; in process only)")
	fs.DurationVar(&f.spin, "spin", verbs.DefaultSpin, "adaptive polling: how long the test spins before it sleeps, and the engines at least (they spin up to 200µs while work keeps coming); through -daemon, the test's only")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	f.nic.Register(fs)
	pt := registerPerftestFlags(fs, p, secs, port, cas)
	var err error
	if f.addr, err = parseWithAddr(fs, args, stdout); err != nil {
		return f, err
	}
	if err := pt.apply(fs, p, &f.dev, f.daemon); err != nil {
		return f, err
	}
	pt.tos.Apply(&f.opts)
	switch {
	case *port == 0 || *port > 0xFFFF:
		return f, cmdline.Usagef("-p %d: not a port", *port)
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	case f.polling != "adaptive" && f.polling != "auto" && f.polling != "busy" && f.polling != "progress":
		return f, cmdline.Usagef("unknown -polling %q (want adaptive, auto, busy or progress)", f.polling)
	case (*secs <= 0 && (flagSet(fs, "D") || flagSet(fs, "duration"))) || time.Duration(*secs) > perftest.MaxDuration/time.Second:
		return f, cmdline.Usagef("-D %d: want seconds, 1 to %d", *secs, perftest.MaxDuration/time.Second)
	}
	if err := checkSpin(f.spin, f.polling == "busy" && flagSet(fs, "spin")); err != nil {
		return f, cmdline.Usagef("-spin %v: %v", f.spin, err)
	}
	p.Duration = time.Duration(*secs) * time.Second
	if !flagSet(fs, "timeout") {
		// The default bounds the setup and the report, not -D's run.
		f.timeout += p.Duration
	}
	switch f.polling {
	case "adaptive":
		f.opts.Polling = ndk.PollAdaptive
	case "auto":
		f.opts.Polling = ndk.PollAuto
	case "busy":
		f.opts.Polling, p.BusyPoll = ndk.PollBusy, true
	case "progress":
		f.opts.Polling = ndk.PollProgress
	}
	f.opts.SpinTime, p.Spin = f.spin, f.spin
	p.Port = uint16(*port)
	if *cas {
		p.AtomicType = perftest.CompareAndSwap
	}
	// perftest -R clients retry the data connection 10 times, 100 ms
	// apart, when the server does not listen yet (REJ reason 8). Ours
	// waits up to 10 s: rxe's server in a loaded VM once took more than
	// 5 s to listen for it.
	p.ConnectRetry = perftest.Retry{Attempts: 100, Interval: 100 * time.Millisecond}
	if err := p.Check(); err != nil {
		return f, cmdline.Usagef("%v", err)
	}
	if err := f.nic.Check(f.daemon); err != nil {
		return f, err
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, perfTestUsage)
}

// progressLabel names the run on the progress line; a duration-mode run
// says how long it lasts, as the line counts the time so far.
func progressLabel(name string, p perftest.Params) string {
	if p.Duration > 0 {
		return fmt.Sprintf("perf %s -D %v", name, p.Duration)
	}
	return "perf " + name
}

// flagSet says whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseWithAddr parses flags with one optional ADDR before, between or
// after them, as perftest allows; more arguments are refused.
func parseWithAddr(fs *flag.FlagSet, args []string, stdout io.Writer) (string, error) {
	if cmdline.WantsHelp(args) {
		return "", cmdline.ParseFlags(fs, args, stdout)
	}
	var addr string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return "", cmdline.BadUsage(err)
		}
		if fs.NArg() == 0 {
			return addr, nil
		}
		if addr != "" {
			return "", cmdline.Usagef("unexpected arguments %q\n%s", fs.Args(), perfTestUsage)
		}
		addr, rest = fs.Arg(0), fs.Args()[1:]
	}
}

// printRunStats names, on stderr (stdout keeps perftest's text), what
// explains a tail: the sleeps of the engines and of the test's polling,
// and the transport's recoveries, during this run (s: statsSince).
// Through a daemon the engines are shared: other clients' work at the
// same time counts too, and the line says so.
// printSpread shows how a -q run's frames spread over the engines: the
// QPs go to the adapter's queues round-robin (ndk.PD.CreateQP), the
// control QP to the first.
func printSpread(w io.Writer, before, after []ndk.EngineStats) {
	if len(before) != len(after) {
		return
	}
	fmt.Fprintf(w, "ndkxdp perf: frames out, in per engine:")
	for i := range after {
		fmt.Fprintf(w, " %d: %d, %d;", i, after[i].FramesOut-before[i].FramesOut, after[i].FramesIn-before[i].FramesIn)
	}
	fmt.Fprintln(w)
}

func printRunStats(w io.Writer, s ndk.EngineStats, waits uint64, daemon bool) {
	whose := "this run"
	if daemon {
		whose = "during this run, the daemon's engines (other clients' work included)"
	}
	fmt.Fprintf(w, "ndkxdp: %s: engine sleeps %d, slow yields %d, test's blocking waits %d; retransmission rounds %d, ACK timeouts %d, RNR NAKs sent %d received %d, duplicate requests %d, out-of-sequence %d\n",
		whose, s.Sleeps, s.SlowYields, waits, s.Retransmits, s.Timeouts, s.RNRSent, s.RNRReceived, s.Duplicates, s.OutOfSeq)
}

// pollingText says how the run waits, as the tools print it; auto names
// what it chose for an adapter of engines engines in this process now.
func pollingText(mode string, spin time.Duration, engines int) string {
	switch mode {
	case "auto":
		return fmt.Sprintf("auto (GOMAXPROCS %d): %s", runtime.GOMAXPROCS(0), pollingText(ndk.PollAuto.Resolve(engines).String(), spin, engines))
	case "busy":
		return "busy polling"
	case "progress":
		return fmt.Sprintf("consumer-driven progress (test spins %v, then sleeps)", spin)
	}
	return fmt.Sprintf("adaptive polling (spin %v, then sleep)", spin)
}

// latencyProcs gives a latency test one P per engine the process runs (at
// least one), unless the environment sets GOMAXPROCS, and returns the
// count in effect and the function that gives the process its Ps back
// when the test ends (tests run several commands in one process). A
// ping-pong has one thing to do at a time: with a P of its own the
// consumer (or the idle P beside an engine) is a second polling thread on
// the machine, and every goroutine the engine wakes makes the runtime
// wake a thread for the idle P, on another CPU. On one P the engine hands
// the consumer its completion on its own thread. perf send_lat -n 3000
// between two namespaces, medians of six alternating runs: p50 10.6 ->
// 8.5 us, p99 72.7 -> 25.5 us; write_lat 13.6 -> 10.0 and 77.1 -> 29.4;
// read_lat 14.6 -> 10.8 and 108 -> 76; through daemons (whose Ps stay as
// they are), send_lat 19.8 -> 14.8 at p50. Bandwidth tests keep every P:
// there the engine and the consumer work at once.
func latencyProcs(engines int) (int, func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0), func() {}
	}
	own := max(engines, 1)
	procsMu.Lock()
	defer procsMu.Unlock()
	if procsTotal == 0 {
		procsSaved = runtime.GOMAXPROCS(0)
	}
	procsTotal += own
	runtime.GOMAXPROCS(procsTotal)
	return procsTotal, func() {
		procsMu.Lock()
		defer procsMu.Unlock()
		if procsTotal -= own; procsTotal == 0 {
			runtime.GOMAXPROCS(procsSaved)
		} else {
			runtime.GOMAXPROCS(procsTotal)
		}
	}
}

var (
	procsMu    sync.Mutex
	procsTotal int // the Ps the latency tests running in this process asked for
	procsSaved int // GOMAXPROCS before the first of them
)

// runTCPLat is the send_lat ping-pong over kernel TCP (perftest.TCPLat),
// the baseline perf's latency tests are held against: the same columns
// between the same two hosts. Without ADDR it serves one client.
func runTCPLat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cmdline.NewFlagSet("perf tcp_lat", perfTestSynopsis("tcp_lat"), stderr)
	var p perftest.Params
	fs.IntVar(&p.Size, "s", 0, "message size in bytes (default: send_lat's)")
	fs.IntVar(&p.Iterations, "n", 0, "iterations (default: send_lat's)")
	port := fs.Uint("p", perftest.DefaultPort, "TCP port")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	addr, err := parseWithAddr(fs, args, stdout)
	if err != nil {
		return err
	}
	switch {
	case *port == 0 || *port > 0xFFFF:
		return cmdline.Usagef("-p %d: not a port", *port)
	case *timeout <= 0:
		return cmdline.Usagef("-timeout %v: must be positive", *timeout)
	}
	procs, restore := latencyProcs(0) // as perf's own latency tests run
	defer restore()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var conn net.Conn
	if addr != "" {
		peer, err := cmdline.LookupAddr(ctx, "server address", addr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ndkxdp perf tcp_lat: client of %v, TCP_NODELAY, GOMAXPROCS %d\n", peer, procs)
		ap := netip.AddrPortFrom(peer, uint16(*port))
		for {
			var d net.Dialer
			conn, err = d.DialContext(ctx, "tcp", ap.String())
			if err == nil || ctx.Err() != nil || !errors.Is(err, unix.ECONNREFUSED) {
				break
			}
			time.Sleep(100 * time.Millisecond) // the server is not listening yet
		}
		if err != nil {
			return fmt.Errorf("connect to %v: %w", ap, err)
		}
	} else {
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", fmt.Sprintf(":%d", *port))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ndkxdp perf tcp_lat: server on %v, TCP_NODELAY, GOMAXPROCS %d\n", l.Addr(), procs)
		stop := context.AfterFunc(ctx, func() { l.Close() })
		conn, err = l.Accept()
		stop()
		l.Close()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fmt.Errorf("accept: %w", err)
		}
	}
	defer conn.Close()
	cmdline.EnterPhase(ctx, "perf tcp_lat")
	_, err = perftest.TCPLat(ctx, conn, p, addr != "", stdout)
	return stepTimedOut(ctx, err, *timeout, "perf tcp_lat")
}
