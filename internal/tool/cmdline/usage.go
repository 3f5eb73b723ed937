package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// UsageError is a bad command line: the run did nothing, and the exit
// status is 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

func (e *UsageError) Unwrap() error { return e.Err }

// BadUsage wraps a flag or argument error as a UsageError; flag.ErrHelp
// (-h) stays as it is, a request that succeeds.
func BadUsage(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &UsageError{Err: err}
}

// Usagef is a UsageError with a message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// NewFlagSet is a command's flag set. Its usage starts with synopsis;
// errors and the usage after them go to stderr.
func NewFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// WantsHelp reports whether args ask for help (-h, -help, --help before
// a "--"). The help goes to stdout and the command succeeds, as the top
// level's does.
func WantsHelp(args []string) bool {
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

// ParseFlags parses args with fs and refuses arguments that are not
// flags: no command takes any but perf TEST's ADDR, which it parses
// itself. For -h it prints the usage on stdout and returns flag.ErrHelp.
func ParseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if WantsHelp(args) {
		fs.SetOutput(stdout)
		fs.Usage()
		return flag.ErrHelp
	}
	if err := fs.Parse(args); err != nil {
		return BadUsage(err)
	}
	if fs.NArg() > 0 {
		return Usagef("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}
