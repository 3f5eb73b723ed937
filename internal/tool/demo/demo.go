package demo

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/ndk"
)

type demoFlags struct {
	dev        string
	mtu        int
	messages   int
	sendSize   int
	rdmaSize   int
	rdmaOps    int
	pings      int
	polling    string
	capture    string
	captureMax int
	daemon     bool
	// With -dev: -peer or -serve, and -daemon SOCKET (socket).
	peer, peerKind, socket string
	serve                  bool
	count                  int
	nic                    cmdline.NICFlags
}

const demoSynopsis = `usage: ndkxdp demo [-daemon] [flags]
       ndkxdp demo -dev IF -peer ADDR[:PORT] [-peer-kind ndkxdp|rping|perftest] [-daemon SOCKET] [flags]
       ndkxdp demo -dev IF -serve [-count N] [-daemon SOCKET] [flags]

Builds two network namespaces joined by a veth pair (198.18.0.1 and
198.18.0.2, no default route), opens ndkxdp on both ends, and runs SEND,
WRITE, READ and a SEND ping-pong between them over connections set up
with the IB CM; then reports rates, round-trip percentiles and the
transport's counters, and deletes the namespaces. With -daemon, an
ndkxdp daemon serves each end and every phase runs in a client process of
its own that dials both (ndk.Dial). Needs CAP_SYS_ADMIN for the
namespaces besides what every tool needs.

With -dev, this host's side runs on the interface IF (in this process, or
through the daemon serving IF at -daemon SOCKET) and every phase runs
against the peer at -peer ADDR: another host's "ndkxdp demo -dev IF
-serve" serves every phase; a peer running rping -s (Linux rping, or
"ndkxdp rping -s") serves rping's round trips alone (-peer-kind rping),
and perftest's servers (-R) one phase each (-peer-kind perftest); the
demo says which phases it skips and why.`

// The demo's MTU bounds: the veth pair carries IPv6 (2001:2::/48), which
// needs 1280 (RFC 8200), and 9000 gives the largest path MTU, 4096.
const (
	MinMTU = 1280
	MaxMTU = 9000
)

// parseDemo checks every flag before anything touches the system.
func parseDemo(args []string, stdout, stderr io.Writer) (demoFlags, ndk.Options, error) {
	fs := cmdline.NewFlagSet("demo", demoSynopsis, stderr)
	var f demoFlags
	fs.StringVar(&f.dev, "dev", "", "run this host's side on this network interface against -peer, or serve with -serve, instead of the embedded veth pair")
	fs.IntVar(&f.mtu, "mtu", 1500, fmt.Sprintf("MTU of the embedded veth pair, %d..%d (1500 gives path MTU 1024, 9000 gives 4096)", MinMTU, MaxMTU))
	fs.IntVar(&f.messages, "messages", 20000, "SEND messages to exchange and verify")
	fs.IntVar(&f.sendSize, "send-size", 64, "bytes per SEND")
	fs.IntVar(&f.rdmaSize, "rdma-size", 64<<10, "bytes per WRITE and READ")
	fs.IntVar(&f.rdmaOps, "rdma-ops", 500, "WRITEs and READs to run and verify")
	fs.IntVar(&f.pings, "pings", 5000, "SEND ping-pong round trips to time")
	fs.StringVar(&f.polling, "polling", "auto", "engine polling: auto (progress where GOMAXPROCS exceeds the engines plus one, else adaptive: ndk.PollAuto), adaptive, busy or progress (the consumer runs the engine's turns: ndk.PollProgress)")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the hosts exchange to this pcap file, once (the sender's copy); with -dev, every frame this host sends or receives")
	if demoOnDev(args) {
		fs.StringVar(&f.socket, "daemon", "", "with -dev: run this side through the ndkxdp daemon serving IF at this unix socket")
	} else {
		fs.BoolVar(&f.daemon, "daemon", false, "serve each end through an ndkxdp daemon in its namespace and run each phase in a client process of its own that dials both (with -dev: -daemon SOCKET, the daemon serving IF)")
	}
	fs.StringVar(&f.peer, "peer", "", fmt.Sprintf("with -dev: run every phase against the peer at this address or host name, port %d (perftest: %d) unless given (ADDR:PORT, [IPv6]:PORT)", Port, perftest.DefaultPort))
	fs.StringVar(&f.peerKind, "peer-kind", peerNdkxdp, "with -peer: what serves there: ndkxdp (ndkxdp demo -dev IF -serve: every phase, verified), rping (rping -s: its round trips only) or perftest (ib_send_bw, ib_write_bw, ib_read_bw, ib_send_lat -R on consecutive ports, contents unchecked)")
	fs.BoolVar(&f.serve, "serve", false, "with -dev: listen and serve every phase to ndkxdp demo -peer clients, one after another, until interrupted or -count demos")
	fs.IntVar(&f.count, "count", 0, "with -serve: stop after serving this many demos (0: until interrupted)")
	f.nic.Register(fs)
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, ndk.Options{}, err
	}
	switch {
	case f.mtu < MinMTU || f.mtu > MaxMTU:
		return f, ndk.Options{}, cmdline.Usagef("-mtu %d: must be in [%d, %d] (the pair carries IPv6, which needs %d; %d gives the largest path MTU, 4096)",
			f.mtu, MinMTU, MaxMTU, MinMTU, MaxMTU)
	case f.messages < 1 || f.messages > 10_000_000:
		return f, ndk.Options{}, cmdline.Usagef("-messages %d: must be in [1, 10000000]", f.messages)
	case f.sendSize < 8 || f.sendSize > 1<<20:
		return f, ndk.Options{}, cmdline.Usagef("-send-size %d: must be in [8, 1048576]", f.sendSize)
	case f.rdmaSize < 1 || f.rdmaSize > 16<<20:
		return f, ndk.Options{}, cmdline.Usagef("-rdma-size %d: must be in [1, 16777216]", f.rdmaSize)
	case f.rdmaOps < 1 || f.rdmaOps > 1_000_000:
		return f, ndk.Options{}, cmdline.Usagef("-rdma-ops %d: must be in [1, 1000000]", f.rdmaOps)
	case f.pings < 1 || f.pings > 1_000_000:
		return f, ndk.Options{}, cmdline.Usagef("-pings %d: must be in [1, 1000000]", f.pings)
	}
	opts, err := cmdline.AdapterOptions(f.nic.XDPMode, f.polling)
	if err != nil {
		return f, opts, err
	}
	if err := checkDemoDev(fs, &f); err != nil {
		return f, opts, err
	}
	return f, opts, nil
}

// Run is `ndkxdp demo`: args are its flags.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, opts, err := parseDemo(args, stdout, stderr)
	if err != nil {
		return err
	}
	if f.dev != "" {
		return runDemoOnDev(ctx, f, opts, stdout)
	}
	if err := cmdline.RequireCaps(cmdline.PairCaps); err != nil {
		return err
	}
	if err := f.nic.Apply(&opts, ""); err != nil {
		return err
	}
	start := time.Now()
	cmdline.EnterPhase(ctx, "setup of the veth pair and adapters")
	d, err := openDemo(ctx, f, opts, stdout)
	if err != nil {
		return err
	}
	defer d.close()
	if err := d.runPhases(ctx, stdout); err != nil {
		return err
	}
	d.printReport(stdout)
	cmdline.EnterPhase(ctx, "clean-up")
	capture := d.capture
	d.close()
	if capture != nil {
		if err := capture.Err(); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		fmt.Fprintf(stdout, "capture: %s (%d RoCEv2 frames, each once as its sender sent it)\n", f.capture, capture.Frames())
	}
	fmt.Fprintf(stdout, "done in %v; namespaces removed\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// demo is one run: the pair, the adapter on each end, and either the hosts
// the phases run on in this process and B's listener, or (-daemon) a
// daemon serving each adapter; and the report the phases write.
type demo struct {
	f       demoFlags
	file    *os.File
	capture *sharedCapture
	pair    *vethpair.Pair
	// served are the adapters on A's and B's veth ends, which run the
	// engines; the report's counts are theirs.
	served  [2]*ndk.Adapter
	a, b    *Host
	srv     *CMServer
	daemons [2]*demoDaemon
	lines   []string
	rtt     baseline.Latency
	rttTail transportCounts
}

// openDemo creates the capture file, the pair, both adapters, and the
// hosts and B's listener or the daemons; on an error it undoes what it
// did.
func openDemo(ctx context.Context, f demoFlags, opts ndk.Options, stdout io.Writer) (_ *demo, err error) {
	d := &demo{f: f}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if f.capture != "" {
		if d.file, err = os.Create(f.capture); err != nil {
			return nil, fmt.Errorf("-capture: %w", err)
		}
	}
	if d.pair, err = vethpair.NewPair(vethpair.Config{MTU: f.mtu}); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "hosts: %s %s <-> %s %s (veth, MTU %d)\n", d.pair.A.Name, d.pair.A.IPv4, d.pair.B.Name, d.pair.B.IPv4, f.mtu)
	if f.daemon && opts.Polling == ndk.PollAuto {
		// The daemons' clients cannot run their engines' turns.
		opts.Polling = ndk.PollAdaptive
	}
	optsA, optsB := opts, opts
	if d.file != nil {
		d.capture = &sharedCapture{w: d.file}
		optsA.Capture, optsB.Capture = d.capture.stream(d.pair.A.MAC), d.capture.stream(d.pair.B.MAC)
	}
	if d.served[0], err = OpenAdapterOn(d.pair.A, optsA); err != nil {
		return nil, err
	}
	if d.served[1], err = OpenAdapterOn(d.pair.B, optsB); err != nil {
		return nil, err
	}
	polling := opts.Polling.Resolve(opts.Queues).String()
	if opts.Polling == ndk.PollAuto {
		polling += fmt.Sprintf(" (auto, GOMAXPROCS %d)", runtime.GOMAXPROCS(0))
	}
	fmt.Fprintf(stdout, "adapters: ndkxdp on %s and %s, path MTU %d, %s polling\n", d.pair.A.Link, d.pair.B.Link, d.served[0].PathMTU(), polling)
	if f.daemon {
		return d, d.startDaemons(stdout)
	}
	if d.a, err = NewHost(d.pair.A.Name, d.served[0]); err != nil {
		return nil, err
	}
	if d.b, err = NewHost(d.pair.B.Name, d.served[1]); err != nil {
		return nil, err
	}
	if d.srv, err = ListenCM(ctx, d.b, d.listenAddr()); err != nil {
		return nil, err
	}
	return d, nil
}

// listenAddr is where B listens for the phases' connections.
func (d *demo) listenAddr() netip.AddrPort { return netip.AddrPortFrom(d.pair.B.IPv4, Port) }

// close releases what openDemo made, in reverse; a second call does
// nothing.
func (d *demo) close() {
	if d.srv != nil {
		d.srv.l.Close()
	}
	for _, x := range d.daemons {
		if x != nil {
			x.close()
		}
	}
	for _, a := range d.served {
		if a != nil {
			a.Close() // and with it the hosts' PDs and CQs
		}
	}
	if d.pair != nil {
		d.pair.Close()
	}
	if d.file != nil {
		d.file.Close()
	}
	*d = demo{f: d.f}
}

// demoPhase is one phase: its name, which an interruption reports and a
// client process is given, what it does, and its body, which returns its
// report line; the ping-pong's figures go to the report's RTT line
// instead.
type demoPhase struct {
	name string
	what string
	run  func(ctx context.Context, a, b *Host, qa, qb *ndk.QP) (string, baseline.Latency, error)
	rtt  bool
}

func demoPhases(f demoFlags) []demoPhase {
	return []demoPhase{
		{"SEND", fmt.Sprintf("SEND: %d messages of %d bytes, A -> B, contents verified", f.messages, f.sendSize), func(ctx context.Context, a, b *Host, qa, qb *ndk.QP) (string, baseline.Latency, error) {
			r, err := demoSend(ctx, a, b, qa, qb, f.messages, f.sendSize)
			return r.line("SEND", f.sendSize), baseline.Latency{}, err
		}, false},
		{"WRITE", fmt.Sprintf("WRITE: %d x %d bytes into B's memory, contents verified", f.rdmaOps, f.rdmaSize), func(ctx context.Context, a, b *Host, qa, _ *ndk.QP) (string, baseline.Latency, error) {
			r, err := demoWrite(ctx, a, b, qa, f.rdmaOps, f.rdmaSize)
			return r.line("WRITE", f.rdmaSize), baseline.Latency{}, err
		}, false},
		{"READ", fmt.Sprintf("READ: %d x %d bytes from B's memory, contents verified", f.rdmaOps, f.rdmaSize), func(ctx context.Context, a, b *Host, qa, _ *ndk.QP) (string, baseline.Latency, error) {
			r, err := demoRead(ctx, a, b, qa, f.rdmaOps, f.rdmaSize)
			return r.line("READ", f.rdmaSize), baseline.Latency{}, err
		}, false},
		{"ping-pong", fmt.Sprintf("ping-pong: %d SEND round trips of 64 bytes", f.pings), func(ctx context.Context, a, b *Host, qa, qb *ndk.QP) (string, baseline.Latency, error) {
			rtt, err := demoPingPong(ctx, a, b, qa, qb, f.pings)
			return "", rtt, err
		}, true},
	}
}

// phaseEvents is told where a phase is: connected (its QPs), started and
// done (its body); the in-process run prints and counts, a client process
// reports to the demo that started it.
type phaseEvents interface {
	connected(ph demoPhase, cn *Connection)
	started()
	done()
}

// runPhase runs ph on a fresh, connected QP pair between a and b, so that
// no phase inherits another's posted receives, and disconnects it.
func runPhase(ctx context.Context, a, b *Host, srv *CMServer, ph demoPhase, ev phaseEvents) (string, baseline.Latency, error) {
	cmdline.EnterPhase(ctx, "connection set-up for "+ph.name)
	cn, err := ConnectCM(ctx, a, b, srv)
	if err != nil {
		return "", baseline.Latency{}, fmt.Errorf("%s: %w", ph.what, err)
	}
	ev.connected(ph, cn)
	cmdline.EnterPhase(ctx, ph.name)
	ev.started()
	line, rtt, err := ph.run(ctx, a, b, cn.qa, cn.qb)
	ev.done()
	if err == nil {
		cmdline.EnterPhase(ctx, "disconnection after "+ph.name)
	}
	if derr := cn.Disconnect(ctx); err == nil {
		err = derr
	}
	if err != nil {
		return "", baseline.Latency{}, fmt.Errorf("%s: %w", ph.what, err)
	}
	return line, rtt, nil
}

// connectedText is the line that introduces a phase.
func connectedText(ph demoPhase, cn *Connection) string {
	return fmt.Sprintf("%s (QP 0x%06x <-> QP 0x%06x, connected through the IB CM: %v -> %v)",
		ph.what, cn.qa.QPN(), cn.qb.QPN(), cn.ca.LocalAddress(), cn.ca.PeerAddress())
}

// localEvents prints a phase's line and counts the recoveries during its
// body, for a run in this process.
type localEvents struct {
	d              *demo
	w              io.Writer
	before, during transportCounts
}

func (e *localEvents) connected(ph demoPhase, cn *Connection) {
	fmt.Fprintf(e.w, "%s...\n", connectedText(ph, cn))
}
func (e *localEvents) started() { e.before = e.d.counts() }
func (e *localEvents) done()    { e.during = e.d.counts().since(e.before) }

// runPhases runs the phases one after the other, here or each in a client
// process of its own (-daemon), and notes beside each phase's line the RNR
// NAKs and retransmissions that happened during it.
func (d *demo) runPhases(ctx context.Context, stdout io.Writer) error {
	phases := demoPhases(d.f)
	for _, ph := range phases {
		var line string
		var rtt baseline.Latency
		var during transportCounts
		var err error
		if d.f.daemon {
			line, rtt, during, err = d.runClientPhase(ctx, ph, stdout)
		} else {
			ev := &localEvents{d: d, w: stdout}
			line, rtt, err = runPhase(ctx, d.a, d.b, d.srv, ph, ev)
			during = ev.during
		}
		if err != nil {
			return err
		}
		if ph.rtt {
			d.rtt, d.rttTail = rtt, during
		} else {
			d.lines = append(d.lines, line+during.note())
		}
	}
	fmt.Fprintf(stdout, "connections: %d set up with REQ/REP/RTU and torn down with DREQ/DREP\n", len(phases))
	return nil
}

func (d *demo) printReport(w io.Writer) {
	fmt.Fprintf(w, "\nreport:\n")
	for _, l := range d.lines {
		fmt.Fprintln(w, l)
	}
	r := d.rtt
	fmt.Fprintf(w, "  %-6s RTT p50 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us (%d round trips)%s\n",
		"SEND", us(r.P50), us(r.P99), us(r.P999), us(r.Max), r.N, d.rttTail.note()+d.rttTail.waitsNote())
	for i, h := range []*vethpair.Host{d.pair.A, d.pair.B} {
		var st ndk.EngineStats
		for _, s := range d.served[i].Stats() {
			st.Add(s)
		}
		fmt.Fprintf(w, "  %s: %d frames out, %d in, %d bad ICRC, %d retransmission rounds, %d RNR NAKs received\n",
			h.Name, st.FramesOut, st.FramesIn, st.BadICRC, st.Retransmits, st.RNRReceived)
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
