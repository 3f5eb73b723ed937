package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmatose"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const ucmatoseUsage = `usage: ndkxdp ucmatose [-s ADDR] [-b ADDR] [-p PORT] [-c connections] [-C count] [-S size] [-t TOS] [-capture FILE] -dev IFNAME
       ndkxdp ucmatose [-s ADDR] [-p PORT] [-c connections] [-C count] [-S size] -daemon SOCKET`

const ucmatoseSynopsis = ucmatoseUsage + `

librdmacm's ucmatose (cmatose.c) over ndkxdp on IFNAME, or through the
ndkxdp daemon serving at SOCKET: without -s it serves (on -b, an address
of the interface, or on all of them) and accepts -c RC connections
through rdma_cm, sends -C messages of -S bytes on each, waits for as
many replies and disconnects; -s ADDR connects -c times to the server
there, replies to its messages and waits for its disconnects. Either
side may be Linux ucmatose.`

type ucmatoseFlags struct {
	dst, bind, dev, capture, daemon string
	format, portSpace               string
	ackTimeout                      int
	migrate                         bool
	port                            uint
	cfg                             cmatose.Config
	timeout                         time.Duration
	tos                             cmdline.TOS
}

func parseUcmatose(args []string, stdout, stderr io.Writer) (ucmatoseFlags, error) {
	fs := cmdline.NewFlagSet("ucmatose", ucmatoseSynopsis, stderr)
	var f ucmatoseFlags
	fs.StringVar(&f.dst, "s", "", "client: the server's address or host name (without it: serve)")
	fs.StringVar(&f.bind, "b", "", "server: the address to listen on (default: every address); client: the source address")
	fs.UintVar(&f.port, "p", cmatose.DefaultPort, "rdma_cm port (RDMA_PS_TCP)")
	fs.IntVar(&f.cfg.Connections, "c", cmatose.DefaultConnections, fmt.Sprintf("connections, 1 to %d", cmatose.MaxConnections))
	fs.IntVar(&f.cfg.Count, "C", cmatose.DefaultCount, fmt.Sprintf("messages each way on each connection, 0 to %d (0: none)", cmatose.MaxCount))
	fs.IntVar(&f.cfg.Size, "S", cmatose.DefaultSize, fmt.Sprintf("message size in bytes, 0 to %d (0: no messages)", cmatose.MaxSize))
	fs.StringVar(&f.format, "f", "name", "address format: name or ip (gid, an InfiniBand GID, is not RoCE's)")
	fs.StringVar(&f.portSpace, "P", "tcp", "rdma_cm port space: tcp (RDMA_PS_IB is not served)")
	fs.IntVar(&f.ackTimeout, "a", -1, "rdma_cm ACK timeout option: taken; ndkxdp's connections keep its own (IB code 14)")
	fs.BoolVar(&f.migrate, "m", false, "migrate the rdma_cm ids to a new event channel: taken (ndkxdp has no event channels to move)")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	f.tos.Register(fs, "ucmatose's type of service", "t")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	if err := f.tos.Check(f.daemon); err != nil {
		return f, err
	}
	switch {
	case f.cfg.Connections < 1:
		return f, cmdline.Usagef("-c %d: at least one connection", f.cfg.Connections)
	case f.cfg.Count < 0 || f.cfg.Size < 0:
		return f, cmdline.Usagef("-C %d -S %d: neither may be negative", f.cfg.Count, f.cfg.Size)
	}
	// cmatose.c: -C 0 and -S 0 move nothing; Config reads 0 as the default.
	if f.cfg.Count == 0 {
		f.cfg.Count = -1
	}
	if f.cfg.Size == 0 {
		f.cfg.Size = -1
	}
	switch {
	case f.port == 0 || f.port > 0xFFFF:
		return f, cmdline.Usagef("-p %d: not a port", f.port)
	case !strings.EqualFold(f.format, "name") && !strings.EqualFold(f.format, "ip") && !strings.EqualFold(f.format, "ipv6"):
		return f, cmdline.Usagef("-f %s: ndkxdp takes name or ip addresses (a gid is InfiniBand's)", f.format)
	case !strings.EqualFold(f.portSpace, "tcp"):
		return f, cmdline.Usagef("-P %s: ndkxdp serves rdma_cm's TCP port space only", f.portSpace)
	case f.ackTimeout > 31:
		return f, cmdline.Usagef("-a %d: an IB ACK timeout code is 0..31", f.ackTimeout)
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	}
	check := f.cfg
	if err := check.Fill(); err != nil {
		return f, cmdline.Usagef("%v", err)
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, ucmatoseUsage)
}

// runUcmatose is librdmacm's ucmatose, client (-s) or server, on an
// ndkxdp adapter attached to -dev or dialled at -daemon.
func runUcmatose(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseUcmatose(args, stdout, stderr)
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
	if f.daemon == "" && f.bind != "" {
		opts.Address = bind
	}
	d, closeDevice, err := cmdline.OpenTool(ctx, f.dev, f.daemon, f.capture, opts)
	if err != nil {
		return err
	}
	defer closeDevice()
	if f.daemon != "" && !bind.IsUnspecified() && bind != d.Adapter.LocalAddress() {
		return cmdline.Usagef("-b %v: cannot assign requested address (EADDRNOTAVAIL): the daemon at %s serves %v; leave out -b", bind, f.daemon, d.Adapter.LocalAddress())
	}
	// Each connection's queues hold -C requests.
	q := max(f.cfg.Count, 1)
	depths := ndkverbs.Depths{Send: q, Receive: q}
	if peer.IsValid() {
		err = cmatose.RunClient(ctx, f.cfg, &ndkverbs.Connector{Dev: d, Peer: peer, Depths: depths}, uint16(f.port), stdout)
	} else {
		l, lerr := ndkverbs.ListenAddr(d, netip.AddrPortFrom(bind, uint16(f.port)), depths)
		if lerr != nil {
			return lerr
		}
		defer l.Close()
		err = cmatose.RunServer(ctx, f.cfg, l, stdout)
	}
	return stepTimedOut(ctx, err, f.timeout, "ucmatose")
}
