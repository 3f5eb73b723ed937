package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/ndkxdp/ndkxdp/loader"
)

func runCounters(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("counters", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dev := fs.String("dev", "", "interface whose pinned attachment to read (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dev == "" {
		fs.Usage()
		return fmt.Errorf("-dev is required")
	}
	if err := requireRoot(); err != nil {
		return err
	}
	x, err := loader.OpenPinned(*dev, loader.Options{})
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
