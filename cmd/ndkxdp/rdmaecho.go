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
	"github.com/ndkxdp/ndkxdp/internal/tool/rdmaecho"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const rdmaEchoSynopsis = `usage: ndkxdp %[1]s %[2]s[-p PORT]%[4]s [-capture FILE] -dev IFNAME
       ndkxdp %[1]s %[2]s[-p PORT]%[4]s -daemon SOCKET

librdmacm's %[1]s example over ndkxdp on IFNAME, or through the ndkxdp
daemon serving at SOCKET: %[5]s. Either side may be Linux %[3]s.`

const (
	echoWhat  = "one RC connection through rdma_cm, one 16-byte SEND each way (the client first), then a disconnect"
	xEchoWhat = "one RC connection through rdma_cm (-c r, the default; -c x, XRC, is not served), one 16-byte SEND from the client, then a disconnect"
)

type rdmaEchoFlags struct {
	name                       string // rdma_server, rdma_client, rdma_xserver or rdma_xclient
	addr, dev, daemon, capture string
	port                       uint
	commType                   string
	timeout                    time.Duration
}

func (f *rdmaEchoFlags) server() bool { return strings.HasSuffix(f.name, "server") }

// parseRdmaEcho parses the flags of name, one of librdmacm's rdma_server,
// rdma_client, rdma_xserver and rdma_xclient.
func parseRdmaEcho(name string, args []string, stdout, stderr io.Writer) (rdmaEchoFlags, error) {
	f := rdmaEchoFlags{name: name}
	x := strings.HasPrefix(name, "rdma_x")
	other, addr, what := strings.Replace(name, "client", "server", 1), "-s ADDR ", "the server's address or host name"
	if f.server() {
		other, addr, what = strings.Replace(name, "server", "client", 1), "[-s ADDR] ", "the address to listen on (default: every address)"
	}
	cflag, desc := "", echoWhat
	if x {
		cflag, desc = " [-c r]", xEchoWhat
	}
	usage := fmt.Sprintf(rdmaEchoSynopsis, name, addr, other, cflag, desc)
	fs := cmdline.NewFlagSet(name, usage, stderr)
	fs.StringVar(&f.addr, "s", "", what)
	fs.UintVar(&f.port, "p", rdmaecho.DefaultPort, "rdma_cm port (RDMA_PS_TCP)")
	if x {
		fs.StringVar(&f.commType, "c", "r", "communication type: r, RC (x, XRC, is not served)")
	}
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	switch {
	case x && strings.HasPrefix(strings.ToLower(f.commType), "x"):
		return f, cmdline.Usagef("-c %s: XRC (extended reliable connected) is not served by ndkxdp; -c r runs RC", f.commType)
	case x && !strings.HasPrefix(strings.ToLower(f.commType), "r"):
		return f, cmdline.Usagef("-c %s: communication type r (RC) or x (XRC)", f.commType)
	case f.port == 0 || f.port > 0xFFFF:
		return f, cmdline.Usagef("-p %d: not a port", f.port)
	case !f.server() && f.addr == "":
		// rdma_client.c's default, 127.0.0.1, is no RoCE peer.
		return f, cmdline.Usagef("-s: the server's address is needed (%s's default, 127.0.0.1, is not on the wire)", name)
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, usage)
}

func runRdmaServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runRdmaEcho(ctx, "rdma_server", args, stdout, stderr)
}

func runRdmaClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runRdmaEcho(ctx, "rdma_client", args, stdout, stderr)
}

func runRdmaXServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runRdmaEcho(ctx, "rdma_xserver", args, stdout, stderr)
}

func runRdmaXClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runRdmaEcho(ctx, "rdma_xclient", args, stdout, stderr)
}

// runRdmaEcho is one of librdmacm's rdma_server, rdma_client,
// rdma_xserver and rdma_xclient on an ndkxdp adapter attached to -dev or
// dialled at -daemon.
func runRdmaEcho(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	f, err := parseRdmaEcho(name, args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	addr := netip.IPv4Unspecified()
	if f.addr != "" {
		if addr, err = cmdline.LookupAddr(ctx, "-s", f.addr); err != nil {
			return err
		}
	}
	d, closeDevice, err := cmdline.OpenTool(ctx, f.dev, f.daemon, f.capture, ndk.Options{})
	if err != nil {
		return err
	}
	defer closeDevice()
	depths := ndkverbs.Depths{Send: 1, Receive: 1}
	if !f.server() {
		run := rdmaecho.RunClient
		if name == "rdma_xclient" {
			run = rdmaecho.RunXClient
		}
		return stepTimedOut(ctx, run(ctx, &ndkverbs.Connector{Dev: d, Peer: addr, Depths: depths}, uint16(f.port), stdout), f.timeout, name)
	}
	if !addr.IsUnspecified() && addr != d.Adapter.LocalAddress() {
		return cmdline.Usagef("-s %v: cannot assign requested address (EADDRNOTAVAIL): the adapter's is %v", addr, d.Adapter.LocalAddress())
	}
	l, err := ndkverbs.ListenAddr(d, netip.AddrPortFrom(addr, uint16(f.port)), depths)
	if err != nil {
		return err
	}
	defer l.Close()
	serve := rdmaecho.RunServer
	if name == "rdma_xserver" {
		serve = rdmaecho.RunXServer
	}
	return stepTimedOut(ctx, serve(ctx, l, stdout), f.timeout, name)
}
