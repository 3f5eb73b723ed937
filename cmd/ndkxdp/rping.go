package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rping"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const rpingUsage = "usage: ndkxdp rping -s|-c -a ADDR [-p PORT] [-C count] [-S size] [-v] [-V] -dev IFNAME"

// runRping is librdmacm's rping (client -c or server -s) on an ndkxdp
// adapter attached to -dev, speaking rping's protocol over an rdma_cm
// connection, so either side may be Linux rping.
func runRping(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.Bool("s", false, "server: wait for a client")
	client := fs.Bool("c", false, "client: connect to -a")
	addr := fs.String("a", "", "client: the server's address; server: the address to listen on (default: every address)")
	port := fs.Uint("p", rping.DefaultPort, "rdma_cm port")
	count := fs.Int("C", 0, "pings (0: until interrupted or -timeout)")
	size := fs.Int("S", rping.DefaultSize, fmt.Sprintf("ping size in bytes (%d..%d)", rping.MinSize, rping.MaxSize))
	verbose := fs.Bool("v", false, "print the ping data")
	validate := fs.Bool("V", false, "client: check each pong against its ping")
	dev := fs.String("dev", "", "network interface to attach to (in this network namespace)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *server == *client:
		return fmt.Errorf("give exactly one of -s and -c\n%s", rpingUsage)
	case *dev == "":
		return fmt.Errorf("-dev is required\n%s", rpingUsage)
	case *client && *addr == "":
		return fmt.Errorf("a client needs -a ADDR\n%s", rpingUsage)
	case *port == 0 || *port > 0xFFFF:
		return fmt.Errorf("-p %d: not a port", *port)
	case *timeout <= 0:
		return fmt.Errorf("-timeout must be positive")
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q\n%s", fs.Args(), rpingUsage)
	}
	var peer netip.Addr
	if *addr != "" {
		var err error
		if peer, err = netip.ParseAddr(*addr); err != nil {
			return fmt.Errorf("-a %q: %w", *addr, err)
		}
	}
	cfg := rping.Config{Size: *size, Count: *count, Validate: *validate}
	if *verbose {
		cfg.Verbose = stdout
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
	var st rping.Stats
	if *client {
		st, err = rping.RunClient(ctx, cfg, &ndkverbs.Connector{Dev: d, Peer: peer}, uint16(*port))
	} else {
		var l *ndkverbs.Listener
		if l, err = ndkverbs.Listen(d, uint16(*port), ndkverbs.Depths{}); err != nil {
			return err
		}
		defer l.Close()
		st, err = rping.RunServer(ctx, cfg, l)
	}
	fmt.Fprintf(stderr, "rping: %d pings\n", st.Pings)
	return err
}
