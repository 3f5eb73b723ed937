package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// checkDev refuses an interface that does not exist in this network
// namespace, before anything is attached anywhere.
func checkDev(dev string) error {
	if _, err := net.InterfaceByName(dev); err != nil {
		return usagef("-dev %s: no such network interface in this network namespace (ENODEV); `ip link` lists them", dev)
	}
	return nil
}

// checkAdapterFlags takes exactly one of -dev and -daemon and checks it
// exists, before anything is attached or dialled.
func checkAdapterFlags(dev, socket, capture, synopsis string) error {
	switch {
	case dev == "" && socket == "":
		return usagef("-dev or -daemon is required\n%s", synopsis)
	case dev != "" && socket != "":
		return usagef("give one of -dev and -daemon: -dev attaches to the interface here, -daemon uses the daemon that owns it")
	case socket != "" && capture != "":
		return usagef("-capture needs -dev: through -daemon the frames are the daemon's, not this command's")
	case socket != "":
		return checkDaemonSocket(socket)
	}
	return checkDev(dev)
}

// checkDaemonSocket refuses a -daemon path where no unix socket is, with
// what to do about it.
func checkDaemonSocket(socket string) error {
	path := strings.TrimPrefix(socket, "unix://")
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return usagef("-daemon %s: no daemon socket there (%v); start one with `ndkxdp daemon -dev IFNAME -socket %s`", socket, err, path)
	case fi.Mode()&os.ModeSocket == 0:
		return usagef("-daemon %s: not a unix socket (%v); give the path of `ndkxdp daemon`'s -socket", socket, fi.Mode().Type())
	}
	return nil
}

// openStep names the step openDevice takes, for the phase an
// interruption or -timeout reports.
func openStep(dev, socket string) string {
	if socket != "" {
		return "dialling the daemon at " + socket
	}
	return "attach to " + dev
}

// toolNeedsCaps checks the capabilities a tool needs to attach to -dev;
// through -daemon it needs none (the daemon has them).
func toolNeedsCaps(socket string) error {
	if socket != "" {
		return nil
	}
	return requireCaps(toolCaps)
}

// openDevice gives the tools their adapter: attached to -dev in this
// process, or a client of the daemon at -daemon, which owns the
// interface.
func openDevice(ctx context.Context, dev, socket string, opts ndk.Options) (*ndkverbs.Device, error) {
	if socket != "" {
		d, err := ndkverbs.Dial(ctx, socket)
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			// The socket's permissions refused this user: the fix is the
			// socket's group, not the capabilities describe would name.
			return nil, socketError(strings.TrimPrefix(socket, "unix://"), err)
		}
		return d, err
	}
	if err := servedByDaemon(dev); err != nil {
		return nil, err
	}
	return ndkverbs.Open(dev, opts)
}

// lookupAddr turns -a into an address: a literal, or a host name looked
// up as librdmacm's tools do (getaddrinfo), bounded by ctx. IPv4 comes
// first, as the tools' adapters listen on IPv4.
func lookupAddr(ctx context.Context, flagName, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		if err == nil {
			err = errors.New("no addresses")
		}
		return netip.Addr{}, usagef("%s %q: not an address, and looking it up as a host name failed: %v", flagName, host, err)
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return addrs[0], nil
}

// checkLocalAddr refuses an address to listen on that is not dev's, as
// rdma_bind_addr does with EADDRNOTAVAIL.
func checkLocalAddr(dev string, a netip.Addr) error {
	if a.IsUnspecified() {
		return nil
	}
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return usagef("-dev %s: %v", dev, err)
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
	return usagef("-a %v: cannot assign requested address (EADDRNOTAVAIL): %v is not an address of %s; `ip addr show %s` lists them, or leave out -a to listen on all of them",
		a, a, dev, dev)
}

// openCapture creates the -capture file; nil without the flag.
func openCapture(path string, opts *ndk.Options) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-capture: %w", err)
	}
	opts.Capture = f
	return f, nil
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
