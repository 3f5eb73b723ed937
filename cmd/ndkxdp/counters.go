package main

import (
	"fmt"
	"io"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/loader"
)

const countersSynopsis = "usage: ndkxdp counters -dev IFNAME\n\nPrints the steering counters of the XDP program an ndkxdp daemon attached\nand pinned on IFNAME."

func runCounters(args []string, stdout, stderr io.Writer) error {
	fs := cmdline.NewFlagSet("counters", countersSynopsis, stderr)
	dev := fs.String("dev", "", "interface whose pinned attachment to read (required; in this network namespace)")
	root := fs.String("pin-root", "", "the daemon's -pin-root (default /sys/fs/bpf/ndkxdp)")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *dev == "" {
		return cmdline.Usagef("-dev is required\n%s", countersSynopsis)
	}
	if err := cmdline.CheckDev(*dev); err != nil {
		return err
	}
	if err := cmdline.RequireCaps([]cmdline.Capability{cmdline.CapBPF}); err != nil {
		return err
	}
	x, err := loader.OpenPinned(*dev, loader.Options{PinRoot: *root})
	if err != nil {
		return fmt.Errorf("%w (is an ndkxdp daemon attached and pinned on %s?)", err, *dev)
	}
	defer x.Close()
	c, err := x.Counters()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s (%s mode)\n%s", *dev, x.Mode(), c.String())
	return nil
}
