package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/perftest"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const perfTestUsage = "usage: ndkxdp perf <send_bw|write_bw|read_bw|send_lat|write_lat|read_lat|atomic_bw> [-s size] [-n iters] [-t txdepth] [-p port] [ADDR] -dev IFNAME"

// perfTests maps the command's test names to perftest's binaries' tests.
var perfTests = map[string]struct {
	verb perftest.Verb
	kind perftest.Kind
}{
	"send_bw": {perftest.Send, perftest.BW}, "write_bw": {perftest.Write, perftest.BW},
	"read_bw": {perftest.Read, perftest.BW}, "atomic_bw": {perftest.Atomic, perftest.BW},
	"send_lat": {perftest.Send, perftest.Lat}, "write_lat": {perftest.Write, perftest.Lat},
	"read_lat": {perftest.Read, perftest.Lat},
}

// runPerfTest is one of perftest's ib_*_bw / ib_*_lat tools in rdma_cm mode
// (-R) on an ndkxdp adapter: the server without ADDR, the client with it,
// compatible with perftest on the other side.
func runPerfTest(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	test, ok := perfTests[name]
	if !ok {
		return fmt.Errorf("unknown test %q\n%s", name, perfTestUsage)
	}
	fs := flag.NewFlagSet("perf "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	p := perftest.Params{Verb: test.verb, Kind: test.kind}
	fs.IntVar(&p.Size, "s", 0, "message size in bytes (default: perftest's)")
	fs.IntVar(&p.Iterations, "n", 0, "iterations (default: perftest's)")
	fs.IntVar(&p.TxDepth, "t", 0, "TX depth (default: perftest's)")
	fs.IntVar(&p.RxDepth, "r", 0, "RX depth of send tests (default: perftest's)")
	fs.IntVar(&p.CQMod, "Q", 0, "signal every Q-th request (bw)")
	fs.IntVar(&p.OutReads, "o", 0, "outstanding READs/atomics")
	port := fs.Uint("p", perftest.DefaultPort, "rdma_cm port")
	cas := fs.Bool("cmp_and_swap", false, "atomic_bw: CMP_AND_SWAP instead of FETCH_AND_ADD (-A)")
	gbits := fs.Bool("report_gbits", false, "report Gb/s instead of MB/s")
	noPeak := fs.Bool("N", false, "no peak bandwidth")
	dev := fs.String("dev", "", "network interface to attach to (in this network namespace)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	// ADDR may stand between flags, as perftest allows.
	var addr string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		if addr != "" {
			return fmt.Errorf("unexpected arguments %q\n%s", fs.Args(), perfTestUsage)
		}
		addr, rest = fs.Arg(0), fs.Args()[1:]
	}
	switch {
	case *dev == "":
		return fmt.Errorf("-dev is required\n%s", perfTestUsage)
	case *port == 0 || *port > 0xFFFF:
		return fmt.Errorf("-p %d: not a port", *port)
	case *timeout <= 0:
		return fmt.Errorf("-timeout must be positive")
	}
	p.Port = uint16(*port)
	p.ReportGbits, p.NoPeak = *gbits, *noPeak
	if *cas {
		p.AtomicType = perftest.CompareAndSwap
	}
	// perftest -R clients retry the data connection 10 times, 100 ms
	// apart, when the server does not listen yet (REJ reason 8).
	p.ConnectRetry = perftest.Retry{Attempts: 50, Interval: 100 * time.Millisecond}
	var peer netip.Addr
	if addr != "" {
		var err error
		if peer, err = netip.ParseAddr(addr); err != nil {
			return fmt.Errorf("server address %q: %w", addr, err)
		}
	}
	if err := requireRoot(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	d, err := ndkverbs.Open(*dev, ndk.Options{})
	if err != nil {
		return err
	}
	defer d.Close()
	p.MTU = d.Adapter.PathMTU()
	role := "server"
	if peer.IsValid() {
		role = "client of " + peer.String()
	}
	fmt.Fprintf(stdout, "ndkxdp perf %s: %s, path MTU %d\n", name, role, p.MTU)
	if peer.IsValid() {
		_, err = perftest.RunClient(ctx, p, &ndkverbs.Connector{Dev: d, Peer: peer}, stdout)
		return err
	}
	l, err := ndkverbs.Listen(d, p.Port, ndkverbs.Depths{})
	if err != nil {
		return err
	}
	defer l.Close()
	_, err = perftest.RunServer(ctx, p, l, stdout)
	return err
}
