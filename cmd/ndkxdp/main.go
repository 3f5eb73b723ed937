// Command ndkxdp runs and inspects the ndkxdp software RDMA stack: the
// daemon that serves an interface to local applications, the operator's
// commands that ask it, the demo, perftest's and rping's tools and the
// soak. `ndkxdp help` lists the commands (commands.go holds them), and
// `ndkxdp help CMD` a command's flags.
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
	if len(args) > 0 && err == nil {
		if c, ok := lookup(args[0]); ok && c.stopIsSuccess {
			return 0
		}
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
