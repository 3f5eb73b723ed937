package cmdline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// CheckDev refuses an interface that does not exist in this network
// namespace, before anything is attached anywhere.
func CheckDev(dev string) error {
	if _, err := net.InterfaceByName(dev); err != nil {
		return Usagef("-dev %s: no such network interface in this network namespace (ENODEV); `ip link` lists them", dev)
	}
	return nil
}

// CheckDaemonSocket refuses a -daemon path where no unix socket is, with
// what to do about it.
func CheckDaemonSocket(socket string) error {
	path := strings.TrimPrefix(socket, "unix://")
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return Usagef("-daemon %s: no daemon socket there (%v); start one with `ndkxdp daemon -dev IFNAME -socket %s`", socket, err, path)
	case fi.Mode()&os.ModeSocket == 0:
		return Usagef("-daemon %s: not a unix socket (%v); give the path of `ndkxdp daemon`'s -socket", socket, fi.Mode().Type())
	}
	return nil
}

// OpenStep names the step OpenDevice takes, for the phase an
// interruption or -timeout reports.
func OpenStep(dev, socket string) string {
	if socket != "" {
		return "dialling the daemon at " + socket
	}
	return "attach to " + dev
}

// ToolNeedsCaps checks the capabilities a tool needs to attach to -dev;
// through -daemon it needs none (the daemon has them).
func ToolNeedsCaps(socket string) error {
	if socket != "" {
		return nil
	}
	return RequireCaps(ToolCaps)
}

// OpenDevice gives the tools their adapter: attached to -dev in this
// process, or a client of the daemon at -daemon, which owns the
// interface.
func OpenDevice(ctx context.Context, dev, socket string, opts ndk.Options) (*ndkverbs.Device, error) {
	if socket != "" {
		d, err := ndkverbs.Dial(ctx, socket)
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			// The socket's permissions refused this user: the fix is the
			// socket's group, not the capabilities describe would name.
			return nil, SocketError(strings.TrimPrefix(socket, "unix://"), err)
		}
		return d, err
	}
	if err := ServedByDaemon(dev); err != nil {
		return nil, err
	}
	return ndkverbs.Open(dev, opts)
}

// LookupAddr turns -a into an address: a literal, or a host name looked
// up as librdmacm's tools do (getaddrinfo), bounded by ctx. IPv4 comes
// first, as the tools' adapters listen on IPv4.
func LookupAddr(ctx context.Context, flagName, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		if err == nil {
			err = errors.New("no addresses")
		}
		return netip.Addr{}, Usagef("%s %q: not an address, and looking it up as a host name failed: %v", flagName, host, err)
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return addrs[0], nil
}

// OpenTool gives a tool without NIC flags its adapter: the capabilities
// check (none through a daemon), the -capture file, then OpenDevice.
// closeDevice closes the device and then the capture.
func OpenTool(ctx context.Context, dev, socket, capture string, opts ndk.Options) (d *ndkverbs.Device, closeDevice func(), err error) {
	if err := ToolNeedsCaps(socket); err != nil {
		return nil, nil, err
	}
	f, err := OpenCapture(capture, &opts)
	if err != nil {
		return nil, nil, err
	}
	if d, err = OpenDevice(ctx, dev, socket, opts); err != nil {
		if f != nil {
			f.Close()
		}
		return nil, nil, err
	}
	return d, func() {
		d.Close()
		if f != nil {
			f.Close()
		}
	}, nil
}

// OpenCapture creates the -capture file; nil without the flag.
func OpenCapture(path string, opts *ndk.Options) (*os.File, error) {
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

// SocketError says what a refused socket means: its permissions, not a
// missing capability (which describe would suggest for EACCES).
func SocketError(path string, err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: permission denied (EACCES): %s", path, socketAccessHint(path))
	}
	return err
}

// socketAccessHint names who may use the daemon's socket at path, and how
// this user becomes one of them.
func socketAccessHint(path string) string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return "the daemon's socket admits root and the members of its socket group (the daemon's -group, socket_group); join that group, or run as root"
	}
	group := strconv.FormatUint(uint64(st.Gid), 10)
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	return fmt.Sprintf("the daemon's socket (mode %04o) admits its owner and the members of group %s (the daemon's -group, socket_group): add this user to it (usermod -aG %s USER, then log in again), or run as root",
		st.Mode&0o777, group, group)
}
