package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
)

// checkAdapterFlags takes exactly one of -dev and -daemon and checks it
// exists, before anything is attached or dialled.
func checkAdapterFlags(dev, socket, capture, synopsis string) error {
	switch {
	case dev == "" && socket == "":
		return cmdline.Usagef("-dev or -daemon is required\n%s", synopsis)
	case dev != "" && socket != "":
		return cmdline.Usagef("give one of -dev and -daemon: -dev attaches to the interface here, -daemon uses the daemon that owns it")
	case socket != "" && capture != "":
		return cmdline.Usagef("-capture needs -dev: through -daemon the frames are the daemon's, not this command's")
	case socket != "":
		return cmdline.CheckDaemonSocket(socket)
	}
	return cmdline.CheckDev(dev)
}

// checkLocalAddr refuses an address to listen on that is not dev's, as
// rdma_bind_addr does with EADDRNOTAVAIL.
func checkLocalAddr(dev string, a netip.Addr) error {
	if a.IsUnspecified() {
		return nil
	}
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return cmdline.Usagef("-dev %s: %v", dev, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", dev, err)
	}
	for _, x := range addrs {
		if n, ok := x.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return nil
			}
		}
	}
	return cmdline.Usagef("-a %v: cannot assign requested address (EADDRNOTAVAIL): %v is not an address of %s; `ip addr show %s` lists them, or leave out -a to listen on all of them",
		a, a, dev, dev)
}

// timeoutError is a run that -timeout ended: its message says which step
// did not finish in time, and errors.Is still finds the cause.
type timeoutError struct {
	step    string
	timeout time.Duration
	err     error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("gave up after -timeout %v during %s", e.timeout, e.step)
}

func (e *timeoutError) Unwrap() error { return e.err }

// stepTimedOut wraps err when the run's own -timeout (and not a signal)
// ended it during step.
func stepTimedOut(ctx context.Context, err error, timeout time.Duration, step string) error {
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &timeoutError{step: step, timeout: timeout, err: err}
	}
	return err
}

// checkSpin says what is wrong with an adaptive polling spin of d, given
// where busy polling was asked for too (perf -spin, the daemon's spin).
func checkSpin(d time.Duration, busy bool) error {
	switch {
	case d <= 0 || d > time.Second:
		return errors.New("want a duration above 0 and at most 1s")
	case busy:
		return errors.New("is for adaptive polling; busy polling never sleeps")
	}
	return nil
}
