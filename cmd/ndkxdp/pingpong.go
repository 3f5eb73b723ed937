package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/pingpong"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const pingpongUsage = `usage: ndkxdp %[1]s [-p PORT] [-s SIZE] [-r RX_DEPTH] [-n ITERS] [-g GID_IDX] [-e] [-c]%[2]s [-capture FILE] -dev IFNAME [HOST]
       ndkxdp %[1]s [flags] -daemon SOCKET [HOST]`

const pingpongSynopsis = `

rdma-core's ibv_%[1]s over ndkxdp on IFNAME, or through the ndkxdp
daemon serving at SOCKET: without HOST it serves (waits for a client on
TCP port -p), with HOST (an address or host name) it connects to the
server there. The two sides swap LID:QPN:PSN:GID over that TCP
connection, as the C tools do, and connect their %[2]s QPs out of band
(no rdma_cm), then ping-pong -n messages of -s bytes. Either side may be
ibv_%[1]s. RoCE needs -g on both sides: a GID index as rxe numbers
them (show_gids; 0 the link-local GID made from the MAC, 1 the
interface's first IPv4 address), here the index of the adapter's
address.`

type pingpongFlags struct {
	dev, daemon, capture, ibDev string
	ibPort                      int
	cfg                         pingpong.Config
	gidIndex                    int
	timeout                     time.Duration
}

func pingpongText(mode pingpong.Mode) (name, usage, synopsis string) {
	name, mtu, qp := "rc_pingpong", " [-m MTU]", "RC"
	switch mode {
	case pingpong.UD:
		name, mtu, qp = "ud_pingpong", "", "UD"
	case pingpong.SRQ:
		name, mtu, qp = "srq_pingpong", " [-m MTU] [-q NUM_QP]", "-q RC"
	case pingpong.UC:
		name, qp = "uc_pingpong", "UC"
	}
	usage = fmt.Sprintf(pingpongUsage, name, mtu)
	if mode == pingpong.UC {
		usage = strings.Replace(usage, " [-c]", "", 1)
	}
	return name, usage, usage + fmt.Sprintf(pingpongSynopsis, name, qp)
}

func parsePingpong(mode pingpong.Mode, args []string, stdout, stderr io.Writer) (pingpongFlags, error) {
	name, usage, synopsis := pingpongText(mode)
	fs := cmdline.NewFlagSet(name, synopsis, stderr)
	f := pingpongFlags{cfg: pingpong.Config{Mode: mode}}
	both := func(short, long string, reg func(name string)) {
		reg(short)
		reg(long)
	}
	defSize := pingpong.DefaultRCSize
	if mode == pingpong.UD {
		defSize = pingpong.DefaultUDSize
	}
	both("p", "port", func(n string) {
		fs.IntVar(&f.cfg.Port, n, pingpong.DefaultPort, "listen on/connect to TCP port")
	})
	both("s", "size", func(n string) { fs.IntVar(&f.cfg.Size, n, defSize, "size of message to exchange") })
	both("r", "rx-depth", func(n string) {
		fs.IntVar(&f.cfg.RxDepth, n, pingpong.DefaultRxDepth, "number of receives to post at a time")
	})
	both("n", "iters", func(n string) { fs.IntVar(&f.cfg.Iters, n, pingpong.DefaultIters, "number of exchanges") })
	both("l", "sl", func(n string) {
		fs.IntVar(&f.cfg.SL, n, 0, "service level (0-15; RoCE v2 frames carry none, as rxe's do not)")
	})
	both("e", "events", func(n string) {
		fs.BoolVar(&f.cfg.Events, n, false, "sleep on CQ events (NdkArmCq) instead of polling")
	})
	both("g", "gid-idx", func(n string) {
		fs.IntVar(&f.gidIndex, n, -1, "local port GID index, as rxe numbers them (show_gids: 1 is the first IPv4 address); ndkxdp takes its adapter's address")
	})
	if mode != pingpong.UC { // ibv_uc_pingpong has no -c
		both("c", "chk", func(n string) { fs.BoolVar(&f.cfg.Validate, n, false, "validate received buffer") })
	}
	both("d", "ib-dev", func(n string) {
		fs.StringVar(&f.ibDev, n, "", "the C tool's IB device: here a network interface (as -dev), or an RDMA device whose interface is used")
	})
	both("i", "ib-port", func(n string) { fs.IntVar(&f.ibPort, n, 1, "IB port: 1, the only one") })
	if mode == pingpong.SRQ {
		both("q", "num_qp", func(n string) {
			fs.IntVar(&f.cfg.NumQP, n, pingpong.DefaultSRQQPs, fmt.Sprintf("number of QPs on the SRQ, 1 to %d, at most -r", pingpong.MaxSRQQPs))
		})
	}
	if mode != pingpong.UD {
		both("m", "mtu", func(n string) {
			fs.IntVar(&f.cfg.MTU, n, pingpong.DefaultMTU, "path MTU: 256, 512, 1024, 2048 or 4096, at most the interface's (1500: 1024)")
		})
	}
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long (a lost UD datagram is never resent)")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	host, err := parseWithHost(fs, args, stdout, usage)
	if err != nil {
		return f, err
	}
	f.cfg.Server = host
	switch {
	case f.cfg.Port < 1 || f.cfg.Port > 65535:
		return f, cmdline.Usagef("-p %d: not a port", f.cfg.Port)
	case f.cfg.Size < 1 || f.cfg.Iters < 1:
		return f, cmdline.Usagef("-s %d -n %d: both must be positive", f.cfg.Size, f.cfg.Iters)
	case f.cfg.RxDepth < 2:
		return f, cmdline.Usagef("-r %d: at least 2 receives", f.cfg.RxDepth)
	case f.cfg.SL < 0 || f.cfg.SL > 15:
		return f, cmdline.Usagef("-l %d: a service level is 0-15", f.cfg.SL)
	case f.ibPort != 1:
		return f, cmdline.Usagef("-i %d: an ndkxdp adapter has one port, 1", f.ibPort)
	case f.gidIndex < -1:
		return f, cmdline.Usagef("-g %d: not a GID index", f.gidIndex)
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	}
	if mode == pingpong.SRQ && (f.cfg.NumQP < 1 || f.cfg.NumQP > pingpong.MaxSRQQPs || f.cfg.NumQP > f.cfg.RxDepth) {
		return f, cmdline.Usagef("-q %d: 1 to %d QPs, at most -r %d (must have at least one receive per QP)", f.cfg.NumQP, pingpong.MaxSRQQPs, f.cfg.RxDepth)
	}
	if mode != pingpong.UD {
		switch f.cfg.MTU {
		case 256, 512, 1024, 2048, 4096:
		default:
			return f, cmdline.Usagef("-m %d: one of 256, 512, 1024, 2048, 4096\n%s", f.cfg.MTU, usage)
		}
	}
	if f.ibDev != "" && f.daemon == "" {
		ifname, ok := netdevOf(f.ibDev)
		switch {
		case !ok:
			return f, cmdline.Usagef("-d %s: no network interface or RDMA device of that name here; give -dev IF, or -daemon SOCKET", f.ibDev)
		case f.dev != "" && f.dev != ifname:
			return f, cmdline.Usagef("-d %s is interface %s, -dev says %s", f.ibDev, ifname, f.dev)
		}
		f.dev = ifname
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, usage)
}

// parseWithHost parses flags with one optional HOST before, between or
// after them, as getopt_long lets the C tools take it.
func parseWithHost(fs *flag.FlagSet, args []string, stdout io.Writer, usage string) (string, error) {
	if cmdline.WantsHelp(args) {
		return "", cmdline.ParseFlags(fs, args, stdout)
	}
	var host string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return "", cmdline.BadUsage(err)
		}
		if fs.NArg() == 0 {
			return host, nil
		}
		if host != "" {
			return "", cmdline.Usagef("unexpected arguments %q\n%s", fs.Args(), usage)
		}
		host, rest = fs.Arg(0), fs.Args()[1:]
	}
}

func runRCPingpong(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPingpong(ctx, pingpong.RC, args, stdout, stderr)
}

func runUDPingpong(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPingpong(ctx, pingpong.UD, args, stdout, stderr)
}

func runSRQPingpong(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPingpong(ctx, pingpong.SRQ, args, stdout, stderr)
}

func runUCPingpong(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPingpong(ctx, pingpong.UC, args, stdout, stderr)
}

// runPingpong is ibv_rc_pingpong or ibv_ud_pingpong, client (HOST) or
// server, on an ndkxdp adapter attached to -dev or dialled at -daemon.
func runPingpong(ctx context.Context, mode pingpong.Mode, args []string, stdout, stderr io.Writer) error {
	f, err := parsePingpong(mode, args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	d, closeDevice, err := cmdline.OpenTool(ctx, f.dev, f.daemon, f.capture, ndk.Options{})
	if err != nil {
		return err
	}
	defer closeDevice()
	a := d.Adapter
	if f.gidIndex >= 0 {
		var table []pingpong.GID
		if f.daemon != "" {
			table = pingpong.GIDsOfMAC(a.MAC(), a.LocalAddress())
		} else if table, err = pingpong.InterfaceGIDs(f.dev); err != nil {
			return err
		}
		if f.cfg.GID, err = pingpong.PickGID(table, f.gidIndex, a.LocalAddress()); err != nil {
			return cmdline.Usagef("%v", err)
		}
	}
	_, err = pingpong.Run(ctx, a, f.cfg, stdout)
	return stepTimedOut(ctx, err, f.timeout, "the ping-pong")
}
