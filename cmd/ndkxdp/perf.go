package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
)

func runPerf(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] != "baseline" && args[0][0] != '-' {
		return runPerfTest(ctx, args[0], args[1:], stdout, stderr) // perftest.go
	}
	if len(args) == 0 || args[0] != "baseline" {
		fmt.Fprintln(stderr, "usage: ndkxdp perf baseline [-duration D] [-pings N] [-mtu N]")
		fmt.Fprintln(stderr, perfTestUsage)
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("perf baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := fs.Duration("duration", time.Second, "length of each rate measurement")
	pings := fs.Int("pings", 20000, "timed round trips per ping-pong")
	mtu := fs.Int("mtu", 1500, "MTU of the veth pair")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *d <= 0 || *d > time.Minute || *pings < 1 || *pings > 10_000_000 {
		return fmt.Errorf("duration must be in (0, 1m] and pings in [1, 10000000]")
	}
	if err := requireRoot(); err != nil {
		return err
	}
	p, err := vethpair.NewPair(vethpair.Config{MTU: *mtu})
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Fprintf(stdout, "veth pair %s (%s) <-> %s (%s), MTU %d\n", p.A.Name, p.A.IPv4, p.B.Name, p.B.IPv4, *mtu)
	r, err := baseline.Run(p, baseline.Options{
		Duration: *d,
		Pings:    *pings,
		Progress: func(s string) { fmt.Fprintf(stderr, "  measuring %s\n", s) },
	})
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, r.Table())
	return ctx.Err()
}
