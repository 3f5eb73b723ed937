package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/demo"
	"github.com/ndkxdp/ndkxdp/internal/tool/soak"
)

// A subcommand is one word after ndkxdp. The usage text, `ndkxdp help`,
// `help CMD` and the dispatch all read the table below, so a command is
// added in one place.
type subcommand struct {
	name string
	// usage is the command's lines in the top-level usage text: what
	// follows "ndkxdp " and what it does (continuation lines start with
	// a newline). perf has two, for its two forms.
	usage []usageLine
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// stopIsSuccess: a clean return after SIGINT or SIGTERM is a success
	// (exit 0), not an interruption. A service's SIGTERM is its stop
	// request (systemd counts 143 a failure unless told otherwise), and a
	// capture's SIGINT ends it, as tcpdump's does.
	stopIsSuccess bool
}

type usageLine struct{ synopsis, what string }

// commands is filled in by init: help's entry reads the table.
var commands []subcommand

func init() {
	commands = []subcommand{
		{name: "demo", run: demo.Run, usage: []usageLine{{"demo", "run two RDMA hosts on an embedded veth pair and report,\nor (-dev IF -peer ADDR, -serve) the same between two hosts"}}},
		{name: "perf", run: runPerf, usage: []usageLine{
			{"perf baseline", "measure raw AF_XDP, Go UDP and Go TCP on a veth pair"},
			{"perf TEST", "perftest's send_bw, write_bw, read_bw, atomic_bw, send_lat,\nwrite_lat or read_lat against any RoCE peer, with -R or without"},
		}},
		{name: "rping", run: runRping, usage: []usageLine{{"rping", "librdmacm's rping, client or server, against any RoCE peer"}}},
		{name: "rdma_server", run: runRdmaServer, usage: []usageLine{{"rdma_server", "librdmacm's rdma_server example (one 16-byte SEND each way)"}}},
		{name: "rdma_client", run: runRdmaClient, usage: []usageLine{{"rdma_client", "librdmacm's rdma_client example, against rdma_server"}}},
		{name: "rdma_xserver", run: runRdmaXServer, usage: []usageLine{{"rdma_xserver", "librdmacm's rdma_xserver example, RC (one 16-byte SEND, the client's)"}}},
		{name: "rdma_xclient", run: runRdmaXClient, usage: []usageLine{{"rdma_xclient", "librdmacm's rdma_xclient example, against rdma_xserver"}}},
		{name: "ucmatose", run: runUcmatose, usage: []usageLine{{"ucmatose", "librdmacm's ucmatose (RC connections through rdma_cm), client or server"}}},
		{name: "udaddy", run: runUdaddy, usage: []usageLine{{"udaddy", "librdmacm's udaddy (UD datagrams, SIDR), client or server"}}},
		{name: "cmtime", run: runCmtime, usage: []usageLine{{"cmtime", "librdmacm's cmtime (many RC connections at once through rdma_cm, timed), client or server"}}},
		{name: "rstream", run: runRstream, usage: []usageLine{{"rstream", "librdmacm's rstream (an rsocket stream: latency and bandwidth), client or server"}}},
		{name: "riostream", run: runRiostream, usage: []usageLine{{"riostream", "librdmacm's riostream (rstream's tests by direct writes into mapped buffers), client or server"}}},
		{name: "rcopy", run: runRcopy, usage: []usageLine{{"rcopy", "librdmacm's rcopy (a file over an rsocket stream), client or server"}}},
		{name: "mckey", run: runMckey, usage: []usageLine{{"mckey", "librdmacm's mckey (UD multicast), sender or receiver"}}},
		{name: "rc_pingpong", run: runRCPingpong, usage: []usageLine{{"rc_pingpong", "ibverbs' ibv_rc_pingpong (RC, QPs connected over TCP, no rdma_cm)"}}},
		{name: "uc_pingpong", run: runUCPingpong, usage: []usageLine{{"uc_pingpong", "ibverbs' ibv_uc_pingpong (UC, QPs connected over TCP, nothing acknowledged)"}}},
		{name: "srq_pingpong", run: runSRQPingpong, usage: []usageLine{{"srq_pingpong", "ibverbs' ibv_srq_pingpong (RC QPs on one SRQ, connected over TCP)"}}},
		{name: "ud_pingpong", run: runUDPingpong, usage: []usageLine{{"ud_pingpong", "ibverbs' ibv_ud_pingpong (UD datagrams, addresses swapped over TCP)"}}},
		{name: "daemon", run: runDaemon, stopIsSuccess: true, usage: []usageLine{{"daemon", "serve an interface to local applications (ndk.Dial)"}}},
		{name: "counters", run: withoutContext(runCounters), usage: []usageLine{{"counters", "print the steering counters of a pinned attachment"}}},
		{name: "status", run: runStatus, usage: []usageLine{{"status", "whether a daemon serves an interface, since when, its clients"}}},
		{name: "info", run: runInfo, usage: []usageLine{{"info", "the device a daemon serves, as ibv_devinfo"}}},
		{name: "stats", run: runStats, usage: []usageLine{{"stats", "a daemon's counters, as rdma statistic (-j: JSON)"}}},
		{name: "qp", run: runQP, usage: []usageLine{{"qp", "a daemon's QPs, as rdma resource show qp (-j: JSON)"}}},
		{name: "dump", run: runDump, stopIsSuccess: true, usage: []usageLine{{"dump", "live capture of the RoCEv2 frames a daemon moves (pcap or text)"}}},
		{name: "soak", run: soak.Run, usage: []usageLine{{"soak", "mixed traffic with injected loss on a veth pair, RSS over time"}}},
		{name: "version", run: withoutContext(runVersion), usage: []usageLine{{"version", "print the version, build and kernel features"}}},
		{name: "help", run: runHelp},
	}
}

// lookup returns the command named name.
func lookup(name string) (subcommand, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return subcommand{}, false
}

func withoutContext(f func(args []string, stdout, stderr io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(_ context.Context, args []string, stdout, stderr io.Writer) error { return f(args, stdout, stderr) }
}

// usage is the top-level usage text.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: ndkxdp <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		for _, u := range c.usage {
			for i, line := range strings.Split(u.what, "\n") {
				name := u.synopsis
				if i > 0 {
					name = ""
				}
				fmt.Fprintf(&b, "  %-16s%s\n", name, line)
			}
		}
	}
	b.WriteString("\nRun 'ndkxdp <command> -h' for the flags of a command.\n")
	return b.String()
}

// runHelp prints the usage; `help CMD` is `CMD -h`.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] != "help" {
		return run(ctx, []string{args[0], "-h"}, stdout, stderr)
	}
	fmt.Fprint(stdout, usage())
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return &cmdline.UsageError{Err: flag.ErrHelp}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
		return nil
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprint(stderr, usage())
		return cmdline.Usagef("unknown command %q", args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}
