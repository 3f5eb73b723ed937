package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rsocket"
	"github.com/ndkxdp/ndkxdp/internal/tool/rstream"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const rcopyUsage = `usage: ndkxdp rcopy [-p PORT] [-n COUNT] (-dev IFNAME | -daemon SOCKET)
       ndkxdp rcopy SOURCE SERVER[:DESTINATION] [-p PORT] (-dev IFNAME | -daemon SOCKET)`

const rcopySynopsis = rcopyUsage + `

librdmacm's rcopy over ndkxdp on IFNAME, or through the ndkxdp daemon
serving at SOCKET: the client sends the file SOURCE over an rsocket stream
to the server, which writes it as DESTINATION (default: SOURCE's name),
created or truncated with SOURCE's mode. The server takes one connection
after another (-n: that many, then it ends). Either side may be Linux
rcopy. Like rcopy's, the server writes any path the client names,
relative ones under its working directory.`

type rcopyFlags struct {
	src, server, dst     string
	dev, daemon, capture string
	port                 uint
	count                int
	timeout              time.Duration
}

func parseRcopy(args []string, stdout, stderr io.Writer) (rcopyFlags, error) {
	fs := cmdline.NewFlagSet("rcopy", rcopySynopsis, stderr)
	var f rcopyFlags
	fs.UintVar(&f.port, "p", rstream.RcopyPort, "port (rdma_cm's TCP port space)")
	fs.IntVar(&f.count, "n", 0, "server: connections to serve before ending (0: until stopped)")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", 0, "give up after this long (0: the client 10m, the server never)")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	if cmdline.WantsHelp(args) {
		return f, cmdline.ParseFlags(fs, args, stdout)
	}
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return f, cmdline.BadUsage(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	switch len(pos) {
	case 0:
	case 2:
		f.src, f.server = pos[0], pos[1]
		if i := strings.LastIndexByte(f.server, ':'); i >= 0 && !strings.HasSuffix(f.server, "]") && strings.Count(f.server, ":") == 1 {
			f.server, f.dst = f.server[:i], f.server[i+1:]
		}
		if f.dst == "" {
			f.dst = f.src
		}
	default:
		return f, cmdline.Usagef("rcopy takes no argument (server) or SOURCE and SERVER[:DESTINATION] (client), not %q\n%s", pos, rcopyUsage)
	}
	switch {
	case f.port == 0 || f.port > 0xFFFF:
		return f, cmdline.Usagef("-p %d: not a port", f.port)
	case f.count < 0 || f.count > 0 && f.src != "":
		return f, cmdline.Usagef("-n %d: a count of connections, for the server", f.count)
	case f.timeout < 0:
		return f, cmdline.Usagef("-timeout %v: must not be negative", f.timeout)
	}
	if f.timeout == 0 && f.src != "" {
		f.timeout = 10 * time.Minute
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, rcopyUsage)
}

// runRcopy is librdmacm's rcopy on an ndkxdp adapter.
func runRcopy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseRcopy(args, stdout, stderr)
	if err != nil {
		return err
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	var peer netip.Addr
	if f.server != "" {
		if peer, err = cmdline.LookupAddr(ctx, "SERVER", f.server); err != nil {
			return err
		}
	}
	d, closeDevice, err := cmdline.OpenTool(ctx, f.dev, f.daemon, f.capture, ndk.Options{})
	if err != nil {
		return err
	}
	defer closeDevice()
	cfg := rsocket.Config{} // rcopy sets no socket option: rsocket's defaults
	depths := ndkverbs.Depths{Send: rsocket.DefaultQueue, Receive: rsocket.DefaultQueue}
	if f.src != "" {
		s, err := rsocket.Dial(ctx, &ndkverbs.Connector{Dev: d, Peer: peer, Depths: depths}, uint16(f.port), cfg)
		if err != nil {
			return fmt.Errorf("rconnect failed: %w", err)
		}
		res, err := rstream.CopyTo(ctx, s, f.src, f.dst, stdout)
		if err != nil {
			fmt.Fprintln(stdout)
			return stepTimedOut(ctx, err, f.timeout, "rcopy")
		}
		fmt.Fprint(stdout, res.String())
		return nil
	}
	l, err := ndkverbs.Listen(d, uint16(f.port), depths)
	if err != nil {
		return fmt.Errorf("rlisten failed: %w", err)
	}
	defer l.Close()
	for n := 0; f.count == 0 || n < f.count; n++ {
		fmt.Fprint(stdout, "waiting for connection...")
		s, err := rsocket.Accept(ctx, l, cfg)
		if err != nil && ctx.Err() == nil {
			// A REQ that is no rsocket's was rejected (rs_accept).
			fmt.Fprintf(stderr, "rcopy: %v\n", err)
			n--
			continue
		}
		if err != nil {
			fmt.Fprintln(stdout)
			return stepTimedOut(ctx, err, f.timeout, "rcopy's accept")
		}
		fmt.Fprintf(stdout, "client: %v\n", s.PeerAddress())
		if err := rstream.Serve(ctx, s, stdout); err != nil {
			fmt.Fprintf(stderr, "rcopy: %v\n", err)
		}
		_ = s.Shutdown(ctx)
		s.Close()
	}
	return nil
}
