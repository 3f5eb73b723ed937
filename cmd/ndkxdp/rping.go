package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rping"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const rpingUsage = `usage: ndkxdp rping -s|-c -a ADDR [-p PORT] [-C count] [-S size] [-v] [-V] [-P] [-I ADDR] [-t TOS] [-capture FILE] -dev IFNAME
       ndkxdp rping -s|-c -a ADDR [flags] -daemon SOCKET`

const rpingSynopsis = rpingUsage + `

librdmacm's rping over ndkxdp on IFNAME, or through the ndkxdp daemon
serving at SOCKET: -s serves (on -a, an address of the interface, or on
all of them), -c connects to the server at -a (an address or a host
name). Either side may be Linux rping.`

type rpingFlags struct {
	server, client     bool
	addr, dev, capture string
	daemon             string
	port               uint
	cfg                rping.Config
	timeout            time.Duration
	nic                cmdline.NICFlags
	// persistent (-P) serves one client after another; debug (-d) prints
	// each step.
	persistent, debug bool
	// source (-I) is a client's source address; tos (-t) the IP TOS byte
	// of the adapter's frames and REQs, -1 for none; ownQP (-q) is
	// rping's "self-created, self-modified QP", which ndkxdp's always is.
	source string
	tos    cmdline.TOS
	ownQP  bool
}

func parseRping(args []string, stdout, stderr io.Writer) (rpingFlags, error) {
	fs := cmdline.NewFlagSet("rping", rpingSynopsis, stderr)
	var f rpingFlags
	fs.BoolVar(&f.server, "s", false, "server: wait for a client")
	fs.BoolVar(&f.client, "c", false, "client: connect to -a")
	fs.StringVar(&f.addr, "a", "", "client: the server's address or host name; server: the address to listen on (default: every address)")
	fs.UintVar(&f.port, "p", rping.DefaultPort, "rdma_cm port")
	fs.IntVar(&f.cfg.Count, "C", 0, "pings (0: until interrupted or -timeout)")
	fs.IntVar(&f.cfg.Size, "S", rping.DefaultSize, fmt.Sprintf("ping size in bytes (%d..%d)", rping.MinSize, rping.MaxSize))
	verbose := fs.Bool("v", false, "print the ping data")
	fs.BoolVar(&f.cfg.Validate, "V", false, "client: check each pong against its ping")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	fs.BoolVar(&f.persistent, "P", false, "server: persistent, serve one client after another until interrupted (rping's -P)")
	fs.BoolVar(&f.debug, "d", false, "print each step on stderr (rping's debug output)")
	fs.StringVar(&f.source, "I", "", "client: the source address to connect from, an address of -dev (of the daemon's adapter with -daemon)")
	f.tos.Register(fs, "rping's type of service", "t")
	fs.BoolVar(&f.ownQP, "q", false, "rping's self-created, self-modified QP: accepted, as ndkxdp's QP is always its own (nothing on the wire changes)")
	f.nic.Register(fs)
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	if f.persistent && !flagSet(fs, "timeout") {
		f.timeout = math.MaxInt64 // a persistent server runs until interrupted
	}
	if *verbose {
		f.cfg.Verbose = stdout
	}
	switch {
	case f.persistent && f.client:
		return f, cmdline.Usagef("-P is a server's (keep serving clients); a client runs -C pings\n%s", rpingUsage)
	case f.server == f.client:
		return f, cmdline.Usagef("give exactly one of -s and -c\n%s", rpingUsage)
	case f.client && f.addr == "":
		return f, cmdline.Usagef("a client needs -a ADDR\n%s", rpingUsage)
	case f.port == 0 || f.port > 0xFFFF:
		return f, cmdline.Usagef("-p %d: not a port", f.port)
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	case f.source != "" && !f.client:
		return f, cmdline.Usagef("-I is a client's source address; a server listens on -a\n%s", rpingUsage)
	}
	if err := f.tos.Check(f.daemon); err != nil {
		return f, err
	}
	if err := f.cfg.Check(); err != nil {
		return f, cmdline.Usagef("%v", err)
	}
	if err := f.nic.Check(f.daemon); err != nil {
		return f, err
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, rpingUsage)
}

// runRping is librdmacm's rping (client -c or server -s) on an ndkxdp
// adapter attached to -dev or dialled at -daemon, speaking rping's
// protocol over an rdma_cm connection, so either side may be Linux rping.
func runRping(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseRping(args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	step := "address lookup"
	f.cfg.Phase = func(s string) {
		step = s
		cmdline.EnterPhase(ctx, "rping "+s)
		if f.debug {
			fmt.Fprintf(stderr, "rping: %s\n", s)
		}
	}
	f.cfg.Phase(step)
	listen := netip.IPv4Unspecified()
	var peer netip.Addr
	if f.addr != "" {
		a, err := cmdline.LookupAddr(ctx, "-a", f.addr)
		if err != nil {
			return stepTimedOut(ctx, err, f.timeout, step)
		}
		if f.client {
			peer = a
		} else {
			if f.dev != "" {
				if err := checkLocalAddr(f.dev, a); err != nil {
					return err
				}
			}
			listen = a
		}
	}
	var source netip.Addr
	if f.source != "" {
		a, err := netip.ParseAddr(f.source)
		if err != nil {
			return cmdline.Usagef("-I %s: not an address", f.source)
		}
		if f.dev != "" {
			if err := checkLocalAddr(f.dev, a.Unmap()); err != nil {
				return err
			}
		}
		source = a.Unmap()
	}
	if err := cmdline.ToolNeedsCaps(f.daemon); err != nil {
		return err
	}
	var opts ndk.Options
	if f.daemon == "" {
		if err := f.nic.Apply(&opts, f.dev); err != nil {
			return err
		}
		opts.Address = source
		f.tos.Apply(&opts)
	}
	capture, err := cmdline.OpenCapture(f.capture, &opts)
	if err != nil {
		return err
	}
	if capture != nil {
		defer capture.Close()
	}
	f.cfg.Phase(cmdline.OpenStep(f.dev, f.daemon))
	d, err := cmdline.OpenDevice(ctx, f.dev, f.daemon, opts)
	if err != nil {
		return stepTimedOut(ctx, err, f.timeout, step)
	}
	defer d.Close()
	if source.IsValid() && source != d.Adapter.LocalAddress() {
		return cmdline.Usagef("-I %v: cannot assign requested address (EADDRNOTAVAIL): the adapter sends from %v", source, d.Adapter.LocalAddress())
	}
	if f.daemon != "" && !listen.IsUnspecified() && listen != d.Adapter.LocalAddress() {
		return cmdline.Usagef("-a %v: cannot assign requested address (EADDRNOTAVAIL): the daemon at %s serves %v; leave out -a to listen on it", listen, f.daemon, d.Adapter.LocalAddress())
	}
	var st rping.Stats
	if f.client {
		st, err = rping.RunClient(ctx, f.cfg, &ndkverbs.Connector{Dev: d, Peer: peer}, uint16(f.port))
	} else {
		var l *ndkverbs.Listener
		if l, err = ndkverbs.ListenAddr(d, netip.AddrPortFrom(listen, uint16(f.port)), ndkverbs.Depths{}); err != nil {
			return err
		}
		defer l.Close()
		for {
			st, err = rping.RunServer(ctx, f.cfg, l)
			if !f.persistent || ctx.Err() != nil || d.Adapter.Err() != nil {
				break
			}
			// -P: one client's end, however it ended, is not the server's.
			if err != nil {
				fmt.Fprintf(stderr, "rping: client ended: %s\n", describe(err))
			}
			fmt.Fprintf(stderr, "rping: %d pings\n", st.Pings)
		}
	}
	fmt.Fprintf(stderr, "rping: %d pings\n", st.Pings)
	return stepTimedOut(ctx, err, f.timeout, step)
}
