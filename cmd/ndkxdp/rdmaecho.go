package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rdmaecho"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const rdmaEchoSynopsis = `usage: ndkxdp %[1]s %[2]s[-p PORT] [-capture FILE] -dev IFNAME
       ndkxdp %[1]s %[2]s[-p PORT] -daemon SOCKET

librdmacm's %[1]s example over ndkxdp on IFNAME, or through the ndkxdp
daemon serving at SOCKET: one RC connection through rdma_cm, one 16-byte
SEND each way (the client first), then a disconnect. Either side may be
Linux %[3]s.`

type rdmaEchoFlags struct {
	addr, dev, daemon, capture string
	port                       uint
	timeout                    time.Duration
}

func parseRdmaEcho(server bool, args []string, stdout, stderr io.Writer) (rdmaEchoFlags, error) {
	name, addr, other, what := "rdma_client", "-s ADDR ", "rdma_server", "the server's address or host name"
	if server {
		name, addr, other, what = "rdma_server", "[-s ADDR] ", "rdma_client", "the address to listen on (default: every address)"
	}
	usage := fmt.Sprintf(rdmaEchoSynopsis, name, addr, other)
	fs := cmdline.NewFlagSet(name, usage, stderr)
	var f rdmaEchoFlags
	fs.StringVar(&f.addr, "s", "", what)
	fs.UintVar(&f.port, "p", rdmaecho.DefaultPort, "rdma_cm port (RDMA_PS_TCP)")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	switch {
	case f.port == 0 || f.port > 0xFFFF:
		return f, cmdline.Usagef("-p %d: not a port", f.port)
	case !server && f.addr == "":
		// rdma_client.c's default, 127.0.0.1, is no RoCE peer.
		return f, cmdline.Usagef("-s: the server's address is needed (rdma_client's default, 127.0.0.1, is not on the wire)")
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, usage)
}

func runRdmaServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runRdmaEcho(ctx, true, args, stdout, stderr)
}

func runRdmaClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runRdmaEcho(ctx, false, args, stdout, stderr)
}

// runRdmaEcho is librdmacm's rdma_server or rdma_client on an ndkxdp
// adapter attached to -dev or dialled at -daemon.
func runRdmaEcho(ctx context.Context, server bool, args []string, stdout, stderr io.Writer) error {
	f, err := parseRdmaEcho(server, args, stdout, stderr)
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
	if !server {
		return stepTimedOut(ctx, rdmaecho.RunClient(ctx, &ndkverbs.Connector{Dev: d, Peer: addr, Depths: depths}, uint16(f.port), stdout), f.timeout, "rdma_client")
	}
	if !addr.IsUnspecified() && addr != d.Adapter.LocalAddress() {
		return cmdline.Usagef("-s %v: cannot assign requested address (EADDRNOTAVAIL): the adapter's is %v", addr, d.Adapter.LocalAddress())
	}
	l, err := ndkverbs.ListenAddr(d, netip.AddrPortFrom(addr, uint16(f.port)), depths)
	if err != nil {
		return err
	}
	defer l.Close()
	return stepTimedOut(ctx, rdmaecho.RunServer(ctx, l, stdout), f.timeout, "rdma_server")
}
