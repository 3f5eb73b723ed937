package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
)

// perftestFlags are perftest's flags that scripts pass and that ndkxdp
// perf either takes with perftest's meaning or refuses naming its own
// equivalent, and perftest's long spellings of the flags perf has. Go's
// flag package reads --name as -name, so `--size 64` needs only the name.
type perftestFlags struct {
	rdmaCM, cpuFreq, events, runInfinitely bool
	cpuUtil, outJSON                       bool
	outJSONFile                            string
	commRDMACM                             bool
	oldPostSend, warmUp, cycles            bool
	inline, sl                             int
	gidIndex, qps, ibPort, mtu             int
	ibDev, connection, atomicType          string
	output, comm                           string
	tos                                    cmdline.TOS
}

func registerPerftestFlags(fs *flag.FlagSet, p *perftest.Params, secs *int, port *uint, cas *bool) *perftestFlags {
	f := &perftestFlags{}
	both := func(short, long string, reg func(name string)) {
		reg(short)
		reg(long)
	}
	fs.IntVar(&p.Size, "size", 0, "the same as -s")
	fs.IntVar(&p.Iterations, "iters", 0, "the same as -n")
	fs.UintVar(port, "port", perftest.DefaultPort, "the same as -p")
	fs.IntVar(&p.TxDepth, "tx-depth", 0, "the same as -t")
	fs.IntVar(&p.RxDepth, "rx-depth", 0, "the same as -r")
	fs.IntVar(&p.CQMod, "cq-mod", 0, "the same as -Q")
	fs.IntVar(&p.OutReads, "outs", 0, "the same as -o")
	fs.BoolVar(&p.NoPeak, "noPeak", false, "the same as -N")
	both("R", "rdma_cm", func(n string) {
		fs.BoolVar(&f.rdmaCM, n, false, "control and data connections through rdma_cm only (perftest's -R); without it a client tries rdma_cm and then perftest's TCP exchange, and a server takes either (-comm)")
	})
	both("F", "CPU-freq", func(n string) {
		fs.BoolVar(&f.cpuFreq, n, false, "perftest's: do not fail on CPU frequency warnings (accepted: ndkxdp reads no CPU frequency)")
	})
	both("e", "events", func(n string) {
		fs.BoolVar(&f.events, n, false, "perftest's: wait for completions on events (accepted: -polling adaptive, the default, sleeps on them)")
	})
	both("x", "gid-index", func(n string) {
		fs.IntVar(&f.gidIndex, n, 0, "GID index, sent to the peer as perftest does (the rdma_cm resolves the address)")
	})
	both("d", "ib-dev", func(n string) {
		fs.StringVar(&f.ibDev, n, "", "perftest's RDMA device: here a network interface (as -dev), or an RDMA device whose interface is used")
	})
	both("q", "qp", func(n string) {
		fs.IntVar(&f.qps, n, 1, "QPs per test, bw tests only (perftest's -q; latency tests refuse it as perftest does): each its own rdma_cm connection, spread over the adapter's queues (-queues)")
	})
	both("i", "ib-port", func(n string) {
		fs.IntVar(&f.ibPort, n, 1, "IB port: 1, the only one")
	})
	both("m", "mtu", func(n string) {
		fs.IntVar(&f.mtu, n, 0, "perftest's path MTU: here it follows the interface's MTU (1500: 1024, 9000: 4096)")
	})
	both("c", "connection", func(n string) {
		fs.StringVar(&f.connection, n, "RC", "connection type: RC, UC (send and write tests) or UD (send_bw and send_lat)")
	})
	both("b", "bidirectional", func(n string) {
		fs.BoolVar(&p.Bidir, n, false, "bw tests: both sides run the test at once, each printing both sides' sum (perftest's -b; both sides)")
	})
	both("A", "atomic_type", func(n string) {
		fs.StringVar(&f.atomicType, n, "", "atomic_bw: FETCH_AND_ADD (default) or CMP_AND_SWAP")
	})
	both("I", "inline_size", func(n string) {
		fs.IntVar(&f.inline, n, 0, "perftest's inline size: accepted; nothing on the wire changes (the engine reads the payload as it builds the frame either way)")
	})
	fs.BoolVar(&f.oldPostSend, "use_old_post_send", false, "perftest's ibv_post_send instead of the ibv_wr API: accepted; nothing on the wire changes")
	fs.BoolVar(&f.warmUp, "perform_warm_up", false, "perftest's warm-up before write, read and atomic bw: accepted; ndkxdp perf warms up always")
	fs.BoolVar(&f.runInfinitely, "run_infinitely", false, "perftest's endless run: refused; -D SECONDS runs for a time")
	fs.BoolVar(&f.cpuUtil, "cpu_util", false, "perftest's host CPU share of -D runs: refused; time(1) or ndkxdp's own lines on stderr measure a run's CPU")
	fs.BoolVar(&f.outJSON, "out_json", false, "perftest's results as JSON: refused; --output prints only each row's figure")
	fs.StringVar(&f.outJSONFile, "out_json_file", "", "where perftest writes --out_json: refused with it")
	fs.StringVar(&f.output, "output", "", "print only each row's figure: bandwidth or message_rate (bw tests), latency (t_avg; latency tests), as perftest's --output; ndkxdp's own lines then go to stderr")
	both("w", "limit_bw", func(n string) {
		fs.Float64Var(&p.LimitBW, n, 0, "bw tests: fail unless a row's BW average reaches this (the report's units; perftest's verifier)")
	})
	both("y", "limit_msgrate", func(n string) {
		fs.Float64Var(&p.LimitMsgRate, n, 0, "bw tests: fail unless a row's MsgRate reaches this (Mpps)")
	})
	f.tos.Register(fs, "perftest's -T sets it on the data connection; here every connection of the run", "T", "tos")
	for _, n := range []string{"H", "report-histogram", "report-histogrm"} { // perftest's long option is spelled so
		fs.BoolVar(&p.ReportHistogram, n, false, "latency tests: print each sample (usec, sorted, without the two largest) before the row")
	}
	both("U", "report-unsorted", func(n string) {
		fs.BoolVar(&p.ReportUnsorted, n, false, "latency tests: print each sample (usec) as it was taken before the row")
	})
	both("z", "comm_rdma_cm", func(n string) {
		fs.BoolVar(&f.commRDMACM, n, false, "control messages through rdma_cm, data QPs connected out of band (perftest's -z; with -R, -R's)")
	})
	both("C", "report-cycles", func(n string) {
		fs.BoolVar(&f.cycles, n, false, "report in CPU cycles: refused; ndkxdp times in nanoseconds and reports usec")
	})
	both("l", "post_list", func(n string) {
		fs.IntVar(&p.PostList, n, 1, "bw tests: post requests in lists of this many, one signaled a list unless -Q (-n a multiple of it)")
	})
	both("u", "qp-timeout", func(n string) {
		fs.IntVar(&p.QPTimeout, n, perftest.DefaultQPTimeout, "QP timeout, IB's ACK timeout code 1..31 (4.096 µs x 2^N) of data QPs connected without -R; an rdma_cm connection takes the CM's")
	})
	both("S", "sl", func(n string) {
		fs.IntVar(&f.sl, n, 0, "service level 0..15 (RoCE v2 frames carry none, as rxe's do not)")
	})
	fs.StringVar(&f.comm, "comm", "auto", "how the two sides exchange control messages: rdma (as -R), tcp (perftest without -R: TCP to port -p, the data QP connected out of band), or auto (a client tries rdma_cm, then TCP where no rdma_cm listener answers; a server takes either)")
	fs.BoolVar(&p.ReportBoth, "report-both", false, "with -b: after the sum, each side's own row (perftest's --report-both)")
	return f
}

// apply checks perftest's flags against what ndkxdp perf can do and puts
// their meaning into p and dev.
func (f *perftestFlags) apply(fs *flag.FlagSet, p *perftest.Params, dev *string, daemon string) error {
	switch {
	case f.runInfinitely:
		return cmdline.Usagef("--run_infinitely: ndkxdp perf runs once; -D SECONDS runs for that long (and a loop in the shell runs again)")
	case f.cpuUtil:
		return cmdline.Usagef("--cpu_util: ndkxdp perf does not report the host's CPU share (perftest's, from /proc/stat, in -D runs only); time(1) measures the run's own")
	case f.outJSON || f.outJSONFile != "":
		return cmdline.Usagef("--out_json: ndkxdp perf writes no JSON; --output bandwidth, message_rate or latency prints only each row's figure")
	case qpsGiven(fs) && p.Kind == perftest.Lat:
		// perftest checks the test before the value: a latency test
		// refuses -q 1 too (perftest_parameters.c, case 'q').
		return cmdline.Usagef("-q %d: Multiple QPs only available on bw tests (perftest's words; latency tests take no -q)", f.qps)
	case f.qps < minQPs || f.qps > maxQPs:
		return cmdline.Usagef("-q %d: num of Qps should be between %d and %d", f.qps, minQPs, maxQPs)
	case f.inline < 0:
		return cmdline.Usagef("-I %d: an inline size is 0 or more", f.inline)
	case f.ibPort != 1:
		return cmdline.Usagef("-i %d: an ndkxdp adapter has one port, 1", f.ibPort)
	case !strings.EqualFold(f.connection, "RC") && !strings.EqualFold(f.connection, "UD") && !strings.EqualFold(f.connection, "UC"):
		return cmdline.Usagef("-c %s: ndkxdp runs RC, UC and UD connections only", f.connection)
	case f.mtu != 0:
		return cmdline.Usagef("-m %d: the path MTU follows the interface's MTU (ip link set dev IF mtu N: 1500 gives 1024, 9000 gives 4096)", f.mtu)
	case f.cycles:
		return cmdline.Usagef("-C: ndkxdp times with the monotonic clock in nanoseconds, not CPU cycles; its reports are in usec")
	case p.QPTimeout == 0: // the flag's default is 14
		return cmdline.Usagef("-u 0: no ACK timeout is not run; ndkxdp always bounds its retransmissions (1..31)")
	case f.sl < 0 || f.sl > 15:
		return cmdline.Usagef("-S %d: Only 15 Service levels (perftest's words: 0..15)", f.sl)
	case f.gidIndex < 0:
		return cmdline.Usagef("-x %d: not a GID index", f.gidIndex)
	}
	if err := f.tos.Check(daemon); err != nil {
		return err
	}
	if f.output != "" {
		o, err := perftest.ParseOutput(f.output)
		if err != nil {
			return cmdline.Usagef("%v", err)
		}
		p.Output = o
	}
	switch {
	case f.comm == "auto" && f.rdmaCM, f.comm == "rdma":
		p.Comm = perftest.CommRDMACM
	case f.comm == "tcp" && (f.rdmaCM || f.commRDMACM):
		return cmdline.Usagef("-comm tcp with -R or -z: they are rdma_cm")
	case f.comm == "auto" && f.commRDMACM:
		p.Comm = perftest.CommRDMACMControl
	case f.comm == "tcp":
		p.Comm = perftest.CommTCP
	case f.comm != "auto":
		return cmdline.Usagef("-comm %s: want auto, rdma or tcp", f.comm)
	}
	p.QPs = f.qps
	p.GIDIndex = int32(f.gidIndex)
	p.UD = strings.EqualFold(f.connection, "UD")
	p.UC = strings.EqualFold(f.connection, "UC")
	switch strings.ToUpper(f.atomicType) {
	case "", "FETCH_AND_ADD":
	case "CMP_AND_SWAP":
		p.AtomicType = perftest.CompareAndSwap
	default:
		return cmdline.Usagef("-A %s: want FETCH_AND_ADD or CMP_AND_SWAP", f.atomicType)
	}
	if f.ibDev == "" || daemon != "" {
		return nil // through a daemon, the device is the one it serves
	}
	ifname, ok := netdevOf(f.ibDev)
	switch {
	case !ok:
		return cmdline.Usagef("-d %s: no network interface or RDMA device of that name here; ndkxdp runs on a network interface: give -dev IF, or -daemon SOCKET", f.ibDev)
	case *dev != "" && *dev != ifname:
		return cmdline.Usagef("-d %s is interface %s, -dev says %s", f.ibDev, ifname, *dev)
	}
	*dev = ifname
	return nil
}

// perftest's bounds on -q (MIN_QP_NUM, MAX_QP_NUM in perftest_parameters.h).
const minQPs, maxQPs = 1, 16384

// qpsGiven reports whether the command line named -q or --qp.
func qpsGiven(fs *flag.FlagSet) bool {
	given := false
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "q" || fl.Name == "qp" {
			given = true
		}
	})
	return given
}

// netdevOf is the network interface an RDMA device name stands for: the
// name itself where it is an interface; for rxe and siw their parent;
// for a NIC's RDMA device the interface of the same PCI function.
func netdevOf(name string) (string, bool) {
	if strings.ContainsRune(name, '/') || name == "" {
		return "", false
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err == nil {
		return name, true
	}
	if b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", name, "parent")); err == nil {
		return strings.TrimSpace(string(b)), true
	}
	if m, _ := filepath.Glob(filepath.Join("/sys/class/infiniband", name, "device/net/*")); len(m) > 0 {
		return filepath.Base(m[0]), true
	}
	return "", false
}
