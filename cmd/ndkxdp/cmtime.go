package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmtime"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const cmtimeUsage = `usage: ndkxdp cmtime [-s ADDR] [-b ADDR] [-c connections] [-p PORT] [-oob] [-capture FILE] -dev IFNAME
       ndkxdp cmtime [-s ADDR] [-c connections] [-p PORT] [-oob] -daemon SOCKET`

const cmtimeSynopsis = cmtimeUsage + `

librdmacm's cmtime over ndkxdp on IFNAME, or through the ndkxdp daemon
serving at SOCKET: with -s ADDR a client opens -c RC connections to the
server's rdma_cm port all at once, then disconnects them all, and prints
how long the connects and the disconnects took; without -s a server
accepts them, each with a QP, answers each disconnect, and ends after
serving them (Linux cmtime's server runs until killed). -oob speaks
rdma-core 52 and later's cmtime (Debian 13's): the sides also sync over
TCP to the same port, over a warm-up round of one connection and two of
-c; without it, rdma-core 51 and older's (Debian 12's). Either side may
be Linux cmtime.`

type cmtimeFlags struct {
	dst, bind, dev, daemon, capture string
	port                            uint
	retries, timeoutMS              int
	cfg                             cmtime.Config
	timeout                         time.Duration
}

func parseCmtime(args []string, stdout, stderr io.Writer) (cmtimeFlags, error) {
	fs := cmdline.NewFlagSet("cmtime", cmtimeSynopsis, stderr)
	var f cmtimeFlags
	fs.StringVar(&f.dst, "s", "", "client: the server's address or host name (without it: serve)")
	fs.StringVar(&f.bind, "b", "", "server: the address to serve on (default: every address)")
	fs.IntVar(&f.cfg.Connections, "c", cmtime.DefaultConnections, fmt.Sprintf("connections, 1 to %d", cmtime.MaxConnections))
	fs.UintVar(&f.port, "p", cmtime.DefaultPort, "rdma_cm port (RDMA_PS_TCP), and the OOB TCP port with -oob")
	fs.IntVar(&f.retries, "r", 2, "cmtime's address and route resolution retries: accepted (ndk resolves through the kernel's tables)")
	fs.IntVar(&f.timeoutMS, "t", 2000, "cmtime's resolution timeout in ms: accepted (see -timeout)")
	fs.BoolVar(&f.cfg.OOB, "oob", false, "rdma-core 52 and later's cmtime: an OOB TCP connection syncs the sides over three rounds")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	switch {
	case f.port == 0 || f.port > 0xFFFF:
		return f, cmdline.Usagef("-p %d: not a port", f.port)
	case f.cfg.Connections < 1 || f.cfg.Connections > cmtime.MaxConnections:
		return f, cmdline.Usagef("-c %d: 1 to %d connections", f.cfg.Connections, cmtime.MaxConnections)
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, cmtimeUsage)
}

// runCmtime is librdmacm's cmtime, client (-s) or server, on an ndkxdp
// adapter.
func runCmtime(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseCmtime(args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	peer, bind, err := lookupEnds(ctx, f.dst, f.bind, f.dev)
	if err != nil {
		return err
	}
	d, closeDevice, err := cmdline.OpenTool(ctx, f.dev, f.daemon, f.capture, ndk.Options{})
	if err != nil {
		return err
	}
	defer closeDevice()
	depths := ndkverbs.Depths{Send: 1, Receive: 1}
	port := strconv.Itoa(int(f.port))
	if peer.IsValid() {
		dial := func(ctx context.Context) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "tcp", net.JoinHostPort(peer.String(), port))
		}
		err = cmtime.RunClient(ctx, f.cfg, &ndkverbs.Connector{Dev: d, Peer: peer, Depths: depths}, uint16(f.port), dial, stdout)
		return stepTimedOut(ctx, err, f.timeout, "cmtime")
	}
	if f.daemon != "" && !bind.IsUnspecified() && bind != d.Adapter.LocalAddress() {
		return cmdline.Usagef("-b %v: cannot assign requested address (EADDRNOTAVAIL): the daemon at %s serves %v", bind, f.daemon, d.Adapter.LocalAddress())
	}
	l, err := ndkverbs.ListenAddr(d, netip.AddrPortFrom(bind, uint16(f.port)), depths)
	if err != nil {
		return err
	}
	defer l.Close()
	var ol net.Listener
	if f.cfg.OOB {
		lc := net.ListenConfig{}
		if ol, err = lc.Listen(ctx, "tcp4", net.JoinHostPort(bind.String(), port)); err != nil {
			return fmt.Errorf("cmtime: oob listen: %w", err)
		}
		defer ol.Close()
	}
	return stepTimedOut(ctx, cmtime.RunServer(ctx, f.cfg, l, ol, stdout), f.timeout, "cmtime")
}
