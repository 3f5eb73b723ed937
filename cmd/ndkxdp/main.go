// Command ndkxdp runs and inspects the ndkxdp software RDMA stack.
//
//	ndkxdp demo [flags]            two RDMA hosts on an embedded veth pair
//	ndkxdp perf baseline [flags]   raw AF_XDP, Go UDP and Go TCP on a veth pair
//	ndkxdp perf TEST [flags] [ADDR] perftest's ib_TEST over rdma_cm (-R) on -dev
//	ndkxdp rping -s|-c [flags]     librdmacm's rping on -dev
//	ndkxdp counters -dev IFNAME    steering counters of a pinned attachment
//	ndkxdp soak -duration D        mixed traffic with loss on a veth pair, RSS over time
//	ndkxdp version
//
// Every network the command builds lives in network namespaces it creates
// (addresses from 198.18.0.0/15, no default route) and is deleted on exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: ndkxdp <command> [flags]

commands:
  demo            run two RDMA hosts on an embedded veth pair and report
  perf baseline   measure raw AF_XDP, Go UDP and Go TCP on a veth pair
  perf TEST       perftest's send_bw, write_bw, read_bw, atomic_bw, send_lat,
                  write_lat or read_lat over rdma_cm against any RoCE peer
  rping           librdmacm's rping, client or server, against any RoCE peer
  counters        print the steering counters of a pinned attachment
  soak            mixed traffic with injected loss on a veth pair, RSS over time
  version         print the version

Run 'ndkxdp <command> -h' for the flags of a command.
`

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "ndkxdp: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "perf":
		return runPerf(ctx, args[1:], stdout, stderr)
	case "counters":
		return runCounters(args[1:], stdout, stderr)
	case "rping":
		return runRping(ctx, args[1:], stdout, stderr)
	case "soak":
		return runSoak(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "ndkxdp", version)
		return nil
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// requireRoot explains what is missing instead of failing deep inside a
// netlink or bpf call.
func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (or CAP_NET_ADMIN, CAP_BPF, CAP_IPC_LOCK and CAP_SYS_ADMIN for the namespaces)")
	}
	return nil
}
