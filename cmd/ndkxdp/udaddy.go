package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/udaddy"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const udaddyUsage = `usage: ndkxdp udaddy [-s ADDR] [-b ADDR] [-port PORT] [-c connections] [-C count] [-S size] [-t TOS] [-capture FILE] -dev IFNAME
       ndkxdp udaddy [-s ADDR] [-port PORT] [-c connections] [-C count] [-S size] -daemon SOCKET`

const udaddySynopsis = udaddyUsage + `

librdmacm's udaddy over ndkxdp's UD queue pairs on IFNAME, or through the
ndkxdp daemon serving at SOCKET: without -s it serves (on -b, an address
of the interface, or on all of them; through a daemon, on the daemon's
address); -s ADDR resolves the server's UD QP at ADDR through rdma_cm's
SIDR, sends -C datagrams of -S bytes and waits for as many answers.
Either side may be Linux udaddy.`

type udaddyFlags struct {
	dst, bind, dev, capture string
	daemon                  string
	format, portSpace       string
	psNumber                string
	port                    uint
	cfg                     udaddy.Config
	timeout                 time.Duration
	tos                     cmdline.TOS
}

func parseUdaddy(args []string, stdout, stderr io.Writer) (udaddyFlags, error) {
	fs := cmdline.NewFlagSet("udaddy", udaddySynopsis, stderr)
	var f udaddyFlags
	fs.StringVar(&f.dst, "s", "", "client: the server's address or host name (without it: serve)")
	fs.StringVar(&f.bind, "b", "", "server: the address to serve on (default: every address)")
	fs.UintVar(&f.port, "port", udaddy.DefaultPort, "rdma_cm UDP port space port (udaddy's is 7174)")
	fs.IntVar(&f.cfg.Count, "C", udaddy.DefaultCount, "datagrams each way")
	fs.IntVar(&f.cfg.Connections, "c", 1, fmt.Sprintf("connections: the client's UD QPs, each resolving the server and exchanging -C datagrams; the server's senders (1 to %d)", udaddy.MaxConnections))
	fs.IntVar(&f.cfg.Size, "S", udaddy.DefaultSize, "datagram size in bytes (at most the path MTU)")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	f.tos.Register(fs, "udaddy's type of service", "t")
	fs.StringVar(&f.format, "f", "name", "address format: name or ip (gid, an InfiniBand GID, is not RoCE's)")
	fs.StringVar(&f.portSpace, "P", "udp", "rdma_cm port space: udp (ipoib is not served)")
	fs.StringVar(&f.psNumber, "p", "0x111", "port space as a number (udaddy's old -p): 0x111, RDMA_PS_UDP")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	if ps, err := strconv.ParseUint(f.psNumber, 0, 32); err != nil || ps != 0x111 {
		return f, cmdline.Usagef("-p %s: ndkxdp serves rdma_cm's UDP port space only (0x111)", f.psNumber)
	}
	switch {
	case !strings.EqualFold(f.format, "name") && !strings.EqualFold(f.format, "ip") && !strings.EqualFold(f.format, "ipv6"):
		return f, cmdline.Usagef("-f %s: ndkxdp takes name or ip addresses (a gid is InfiniBand's)", f.format)
	case !strings.EqualFold(f.portSpace, "udp"):
		return f, cmdline.Usagef("-P %s: ndkxdp serves rdma_cm's UDP port space only", f.portSpace)
	}
	if err := f.tos.Check(f.daemon); err != nil {
		return f, err
	}
	switch {
	case f.port == 0 || f.port > 0xFFFF:
		return f, cmdline.Usagef("-port %d: not a port", f.port)
	case f.cfg.Connections < 1 || f.cfg.Connections > udaddy.MaxConnections:
		return f, cmdline.Usagef("-c %d: 1 to %d connections", f.cfg.Connections, udaddy.MaxConnections)
	case f.cfg.Count < 1 || f.cfg.Size < 1:
		return f, cmdline.Usagef("-C %d -S %d: both must be positive", f.cfg.Count, f.cfg.Size)
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, udaddyUsage)
}

// lookupEnds resolves librdmacm examples' -s (the server, for a client)
// and -b (the address to bind, one of dev's where dev is given; every
// address without -b).
func lookupEnds(ctx context.Context, dst, bindName, dev string) (peer, bind netip.Addr, err error) {
	bind = netip.IPv4Unspecified()
	if dst != "" {
		if peer, err = cmdline.LookupAddr(ctx, "-s", dst); err != nil {
			return peer, bind, err
		}
	}
	if bindName != "" {
		if bind, err = cmdline.LookupAddr(ctx, "-b", bindName); err != nil {
			return peer, bind, err
		}
		if dev != "" {
			if err := checkLocalAddr(dev, bind); err != nil {
				return peer, bind, err
			}
		}
	}
	return peer, bind, nil
}

// runUdaddy is librdmacm's udaddy, client (-s) or server, on an ndkxdp
// adapter attached to -dev.
func runUdaddy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseUdaddy(args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	peer, bind, err := lookupEnds(ctx, f.dst, f.bind, f.dev)
	if err != nil {
		return err
	}
	var opts ndk.Options
	f.tos.Apply(&opts)
	d, closeDevice, err := cmdline.OpenTool(ctx, f.dev, f.daemon, f.capture, opts)
	if err != nil {
		return err
	}
	defer closeDevice()
	a := d.Adapter
	if f.daemon != "" && !bind.IsUnspecified() && bind != a.LocalAddress() {
		return cmdline.Usagef("-b %v: cannot assign requested address (EADDRNOTAVAIL): the daemon at %s serves %v; leave out -b to serve on it", bind, f.daemon, a.LocalAddress())
	}
	var st udaddy.Stats
	if peer.IsValid() {
		st, err = udaddy.RunClient(ctx, a, netip.AddrPortFrom(peer, uint16(f.port)), f.cfg, stdout)
	} else {
		st, err = udaddy.RunServer(ctx, a, netip.AddrPortFrom(bind, uint16(f.port)), f.cfg, stdout)
	}
	fmt.Fprintf(stderr, "udaddy: %d datagrams sent, %d received\n", st.Sent, st.Received)
	return err
}
