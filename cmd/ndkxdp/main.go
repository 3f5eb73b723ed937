// Command ndkxdp runs and inspects the ndkxdp software RDMA stack.
//
//	ndkxdp demo [-daemon] [flags]  two RDMA hosts on an embedded veth pair
//	ndkxdp demo -dev IF -peer ADDR|-serve  the same phases between two real hosts
//	ndkxdp perf baseline [flags]   raw AF_XDP, Go UDP and Go TCP on a veth pair
//	ndkxdp perf TEST [flags] [ADDR] perftest's ib_TEST over rdma_cm (-R) on -dev or -daemon
//	ndkxdp rping -s|-c [flags]     librdmacm's rping on -dev or -daemon
//	ndkxdp daemon -dev IFNAME      serve IFNAME to local applications
//	ndkxdp counters -dev IFNAME    steering counters of a pinned attachment
//	ndkxdp status|info|stats|qp -dev IFNAME [-j]  a running daemon, for its operator
//	ndkxdp dump -dev IFNAME [-w FILE]             the RoCEv2 frames a daemon moves
//	ndkxdp soak -duration D        mixed traffic with loss on a veth pair, RSS over time
//	ndkxdp version
//
// Every network the command builds lives in network namespaces it creates
// (addresses from 198.18.0.0/15, no default route) and is deleted on exit.
//
// Privileges: rping and perf TEST need CAP_NET_ADMIN, CAP_NET_RAW,
// CAP_IPC_LOCK, CAP_BPF and CAP_PERFMON (root has them), and with -daemon
// SOCKET none but access to the socket (the daemon has them); demo and
// perf baseline also CAP_SYS_ADMIN, for their namespaces (demo -dev needs
// what rping needs, as it builds none); counters CAP_BPF.
// The operator's commands need only the daemon's socket (dump: as root or
// the daemon's user).
// Each command checks them first and names any missing.
//
// Exit status: 0 on success and for -h, 2 for a bad command line, 1 for a
// failure, 130 after SIGINT and 143 after SIGTERM (128 + the signal, as a
// shell reports it).
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
  demo            run two RDMA hosts on an embedded veth pair and report,
                  or (-dev IF -peer ADDR, -serve) the same between two hosts
  perf baseline   measure raw AF_XDP, Go UDP and Go TCP on a veth pair
  perf TEST       perftest's send_bw, write_bw, read_bw, atomic_bw, send_lat,
                  write_lat or read_lat over rdma_cm against any RoCE peer
  rping           librdmacm's rping, client or server, against any RoCE peer
  daemon          serve an interface to local applications (ndk.Dial)
  counters        print the steering counters of a pinned attachment
  status          whether a daemon serves an interface, since when, its clients
  info            the device a daemon serves, as ibv_devinfo
  stats           a daemon's counters, as rdma statistic (-j: JSON)
  qp              a daemon's QPs, as rdma resource show qp (-j: JSON)
  dump            live capture of the RoCEv2 frames a daemon moves (pcap or text)
  soak            mixed traffic with injected loss on a veth pair, RSS over time
  version         print the version, build and kernel features

Run 'ndkxdp <command> -h' for the flags of a command.
`

func main() {
	if job, ok := os.LookupEnv(demoClientEnv); ok {
		os.Exit(runDemoClient(job, os.Stdin, os.Stdout, os.Stderr)) // demo -daemon's client process
	}
	os.Exit(mainStatus(os.Args[1:], os.Stdout, os.Stderr))
}

// mainStatus runs the command and returns the process's exit status. The
// first SIGINT or SIGTERM cancels the run, which then cleans up (namespaces,
// XDP programs) and returns; a second one ends the process at once, as the
// default disposition does.
func mainStatus(args []string, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := &tracker{}
	ctx = withTracker(ctx, tr)
	got := make(chan syscall.Signal, 1)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			got <- s.(syscall.Signal)
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			cancel()
		case <-done:
		}
	}()
	err := run(ctx, args, stdout, stderr)
	close(done)
	signal.Stop(sigs)
	if len(args) > 0 && (args[0] == "daemon" || args[0] == "dump") && err == nil {
		// A service's SIGTERM is its stop request, not an interruption:
		// a daemon that stopped cleanly exits 0 (systemd counts 143 a
		// failure unless told otherwise). So is a capture's SIGINT, as
		// tcpdump's.
		return 0
	}
	select {
	case s := <-got:
		fmt.Fprintf(stderr, "ndkxdp: interrupted during %s (%v)\n", tr.phase(), signalName(s))
		return 128 + int(s)
	default:
	}
	return exitStatus(err, stderr)
}

// signalName names a signal as a shell user knows it.
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// exitStatus prints err for a person and maps it to the exit status.
func exitStatus(err error, stderr io.Writer) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp) && !errors.As(err, &ue):
		return 0
	case errors.As(err, &ue):
		if ue.err != nil && !errors.Is(ue.err, flag.ErrHelp) {
			// A usage error's text is the command's own, usage lines
			// included: printed whole, as describe would shorten a log.
			fmt.Fprintf(stderr, "ndkxdp: %s\n", ue.err)
		}
		return 2
	}
	fmt.Fprintf(stderr, "ndkxdp: %s\n", describe(err))
	return 1
}

// usageError is a bad command line: the run did nothing, and the exit
// status is 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// badUsage wraps a flag or argument error as a usageError; flag.ErrHelp
// (-h) stays as it is, a request that succeeds.
func badUsage(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &usageError{err}
}

// usagef is a usageError with a message.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &usageError{flag.ErrHelp}
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "perf":
		return runPerf(ctx, args[1:], stdout, stderr)
	case "counters":
		return runCounters(args[1:], stdout, stderr)
	case "daemon":
		return runDaemon(ctx, args[1:], stdout, stderr)
	case "rping":
		return runRping(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "info":
		return runInfo(ctx, args[1:], stdout, stderr)
	case "stats":
		return runStats(ctx, args[1:], stdout, stderr)
	case "qp":
		return runQP(ctx, args[1:], stdout, stderr)
	case "dump":
		return runDump(ctx, args[1:], stdout, stderr)
	case "soak":
		return runSoak(ctx, args[1:], stdout, stderr)
	case "version":
		return runVersion(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" && args[1] != "help" {
			// `help CMD` is `CMD -h`.
			return run(ctx, []string{args[1], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usagef("unknown command %q", args[0])
	}
}

// newFlagSet is a command's flag set. Its usage starts with synopsis;
// errors and the usage after them go to stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// wantsHelp reports whether args ask for help (-h, -help, --help before
// a "--"). The help goes to stdout and the command succeeds, as the top
// level's does.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// parseFlags parses args with fs and refuses arguments that are not
// flags: no command takes any but perf TEST's ADDR, which it parses
// itself. For -h it prints the usage on stdout and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if wantsHelp(args) {
		fs.SetOutput(stdout)
		fs.Usage()
		return flag.ErrHelp
	}
	if err := fs.Parse(args); err != nil {
		return badUsage(err)
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}
