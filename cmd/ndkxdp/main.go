// Command ndkxdp runs and inspects the ndkxdp software RDMA stack: the
// daemon that serves an interface to local applications, the operator's
// commands that ask it, the demo, perftest's, rping's, udaddy's, mckey's and ibverbs' pingpong tools
// and the soak. `ndkxdp help` lists the commands (commands.go holds them), and
// `ndkxdp help CMD` a command's flags.
//
// Every network the command builds lives in network namespaces it creates
// (addresses from 198.18.0.0/15, no default route) and is deleted on exit.
//
// Privileges: rping, udaddy, mckey, rc_pingpong, ud_pingpong and perf TEST need CAP_NET_ADMIN, CAP_NET_RAW,
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

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/demo"
)

func main() {
	if job, ok := os.LookupEnv(demo.ClientEnv); ok {
		os.Exit(demo.RunClient(job, os.Stdin, os.Stdout, os.Stderr)) // demo -daemon's client process
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
	tr := &cmdline.Tracker{}
	ctx = cmdline.WithTracker(ctx, tr)
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
	if len(args) > 0 && err == nil {
		if c, ok := lookup(args[0]); ok && c.stopIsSuccess {
			return 0
		}
	}
	select {
	case s := <-got:
		fmt.Fprintf(stderr, "ndkxdp: interrupted during %s (%v)\n", tr.Phase(), signalName(s))
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
	var ue *cmdline.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp) && !errors.As(err, &ue):
		return 0
	case errors.As(err, &ue):
		if ue.Err != nil && !errors.Is(ue.Err, flag.ErrHelp) {
			// A usage error's text is the command's own, usage lines
			// included: printed whole, as describe would shorten a log.
			fmt.Fprintf(stderr, "ndkxdp: %s\n", ue.Err)
		}
		return 2
	}
	fmt.Fprintf(stderr, "ndkxdp: %s\n", describe(err))
	return 1
}
