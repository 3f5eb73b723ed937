package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/demo"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
)

const baselineSynopsis = `usage: ndkxdp perf baseline [-duration D] [-pings N] [-mtu N]

Builds a veth pair in two network namespaces and measures raw AF_XDP, Go
UDP and Go TCP on it: the ceiling and the kernel baselines ndkxdp's own
figures are held against. Needs CAP_SYS_ADMIN for the namespaces.`

func runPerf(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] != "baseline" && args[0][0] != '-' {
		return runPerfTest(ctx, args[0], args[1:], stdout, stderr) // perftest.go
	}
	if len(args) > 0 && cmdline.WantsHelp(args[:1]) {
		fmt.Fprintf(stdout, "%s\n\n%s\n", baselineSynopsis, perfTestUsage)
		return nil
	}
	if len(args) == 0 || args[0] != "baseline" {
		fmt.Fprintf(stderr, "%s\n\n%s\n", baselineSynopsis, perfTestUsage)
		return cmdline.Usagef("perf needs a test name or baseline")
	}
	fs := cmdline.NewFlagSet("perf baseline", baselineSynopsis, stderr)
	d := fs.Duration("duration", time.Second, "length of each rate measurement, (0, 1m]")
	pings := fs.Int("pings", 20000, "timed round trips per ping-pong, [1, 10000000]")
	mtu := fs.Int("mtu", 1500, fmt.Sprintf("MTU of the veth pair, [%d, %d]", demo.MinMTU, demo.MaxMTU))
	if err := cmdline.ParseFlags(fs, args[1:], stdout); err != nil {
		return err
	}
	switch {
	case *d <= 0 || *d > time.Minute:
		return cmdline.Usagef("-duration %v: must be in (0, 1m]", *d)
	case *pings < 1 || *pings > 10_000_000:
		return cmdline.Usagef("-pings %d: must be in [1, 10000000]", *pings)
	case *mtu < demo.MinMTU || *mtu > demo.MaxMTU:
		return cmdline.Usagef("-mtu %d: must be in [%d, %d] (the pair carries IPv6, which needs %d)", *mtu, demo.MinMTU, demo.MaxMTU, demo.MinMTU)
	}
	if err := cmdline.RequireCaps(cmdline.PairCaps); err != nil {
		return err
	}
	cmdline.EnterPhase(ctx, "setup of the veth pair")
	p, err := vethpair.NewPair(vethpair.Config{MTU: *mtu})
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Fprintf(stdout, "veth pair %s (%s) <-> %s (%s), MTU %d\n", p.A.Name, p.A.IPv4, p.B.Name, p.B.IPv4, *mtu)
	r, err := baseline.Run(ctx, p, baseline.Options{
		Duration: *d,
		Pings:    *pings,
		Progress: func(s string) {
			cmdline.EnterPhase(ctx, "measuring "+s)
			fmt.Fprintf(stderr, "  measuring %s\n", s)
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, r.Table())
	return nil
}
