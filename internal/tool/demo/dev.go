package demo

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// What serves the phases at -peer (-peer-kind).
const (
	peerNdkxdp   = "ndkxdp"   // ndkxdp demo -dev IF -serve: every phase
	peerRping    = "rping"    // rping -s: rping's round trips alone
	peerPerftest = "perftest" // a perftest -R server per phase, contents unchecked
)

// demoOnDev reports whether args give -dev, which makes -daemon the
// socket of the daemon serving IF rather than the embedded demo's switch;
// it looks before parsing, as the flag's kind depends on it.
func demoOnDev(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name := strings.TrimLeft(a, "-")
		if len(name) < len(a) && len(a)-len(name) <= 2 && (name == "dev" || strings.HasPrefix(name, "dev=")) {
			return true
		}
	}
	return false
}

// checkDemoDev checks the flags of -dev, -peer and -serve and refuses the
// embedded pair's with them, and theirs without -dev.
func checkDemoDev(fs *flag.FlagSet, f *demoFlags) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if f.dev == "" {
		for _, name := range []string{"peer", "serve", "peer-kind", "count"} {
			if given[name] {
				return cmdline.Usagef("-%s needs -dev IF: the interface this host reaches the peer through", name)
			}
		}
		return f.nic.Check("")
	}
	switch {
	case f.peer == "" && !f.serve:
		return cmdline.Usagef("-dev %s: give -peer ADDR (run every phase against the peer there) or -serve (serve them to one)", f.dev)
	case f.peer != "" && f.serve:
		return cmdline.Usagef("give one of -peer and -serve: -peer runs the phases against ADDR, -serve serves them")
	case given["mtu"]:
		return cmdline.Usagef("-mtu sets the embedded veth pair's MTU; with -dev the interface's own MTU applies (ip link set %s mtu N)", f.dev)
	case f.peerKind != peerNdkxdp && f.peerKind != peerRping && f.peerKind != peerPerftest:
		return cmdline.Usagef("-peer-kind %q: want %s, %s or %s", f.peerKind, peerNdkxdp, peerRping, peerPerftest)
	case f.serve && given["peer-kind"]:
		return cmdline.Usagef("-peer-kind names what serves at -peer; -serve serves as ndkxdp")
	case given["count"] && !f.serve:
		return cmdline.Usagef("-count is how many demos -serve serves; the client runs one")
	case f.count < 0:
		return cmdline.Usagef("-count %d: must be 0 (until interrupted) or more", f.count)
	case f.socket != "" && given["polling"]:
		return cmdline.Usagef("-polling sets how the daemon's engines poll: give it to `ndkxdp daemon`, not with -daemon")
	}
	if f.peer != "" {
		if _, _, err := splitPeer(f.peer); err != nil {
			return err
		}
	}
	if f.peer != "" && f.peerKind == peerPerftest {
		if err := checkPerftestFlags(*f); err != nil {
			return err
		}
	}
	if err := f.nic.Check(f.socket); err != nil {
		return err
	}
	if f.socket == "" {
		return cmdline.CheckDev(f.dev)
	}
	if f.capture != "" {
		return cmdline.Usagef("-capture needs -dev without -daemon: through -daemon the frames are the daemon's, not this command's (`ndkxdp dump` captures them)")
	}
	// -dev names the interface the daemon serves, for the report; the
	// daemon may see it in a network namespace of its own.
	return cmdline.CheckDaemonSocket(f.socket)
}

// splitPeer splits -peer into its host and port, 0 unless given.
func splitPeer(peer string) (string, uint16, error) {
	if a, err := netip.ParseAddr(strings.Trim(peer, "[]")); err == nil {
		return a.String(), 0, nil
	}
	host, port, err := net.SplitHostPort(peer)
	if err != nil {
		return peer, 0, nil // a host name, looked up at run time
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" {
		return "", 0, cmdline.Usagef("-peer %s: want ADDR, ADDR:PORT or [IPv6]:PORT with a port in 1..65535", peer)
	}
	return host, uint16(p), nil
}

// demoSide is this host's side on -dev: an adapter opened here or dialled
// at the daemon, and the demo's host on it.
type demoSide struct {
	dev  *ndkverbs.Device
	host *Host
	name string // the interface, or the daemon's socket
}

// openDemoSide opens the adapter and the demo's host on it.
func openDemoSide(ctx context.Context, f demoFlags, opts ndk.Options) (*demoSide, func(), error) {
	if err := cmdline.ToolNeedsCaps(f.socket); err != nil {
		return nil, nil, err
	}
	if f.socket == "" {
		if err := f.nic.Apply(&opts, f.dev); err != nil {
			return nil, nil, err
		}
	}
	capture, err := cmdline.OpenCapture(f.capture, &opts)
	if err != nil {
		return nil, nil, err
	}
	cmdline.EnterPhase(ctx, cmdline.OpenStep(f.dev, f.socket))
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := cmdline.OpenDevice(dctx, f.dev, f.socket, opts)
	if err != nil {
		if capture != nil {
			capture.Close()
		}
		return nil, nil, err
	}
	if f.socket != "" {
		if err := daemonServes(dctx, f.socket, f.dev); err != nil {
			d.Close()
			if capture != nil {
				capture.Close()
			}
			return nil, nil, err
		}
	}
	s := &demoSide{dev: d, name: f.dev}
	if f.socket != "" {
		s.name = f.dev + " (daemon " + f.socket + ")"
	}
	release := func() {
		d.Close()
		if capture != nil {
			capture.Close()
		}
	}
	if s.host, err = NewHost(s.name, d.Adapter); err != nil {
		release()
		return nil, nil, err
	}
	return s, release, nil
}

// runDemoOnDev runs the demo's phases against -peer, or serves them
// (-serve), on -dev.
func runDemoOnDev(ctx context.Context, f demoFlags, opts ndk.Options, stdout io.Writer) error {
	var peer netip.AddrPort
	if f.peer != "" {
		host, port, _ := splitPeer(f.peer)
		if port == 0 {
			port = Port // rping's default port too
			if f.peerKind == peerPerftest {
				port = perftest.DefaultPort
			}
		}
		cmdline.EnterPhase(ctx, "address lookup of -peer")
		a, err := cmdline.LookupAddr(ctx, "-peer", host)
		if err != nil {
			return err
		}
		peer = netip.AddrPortFrom(a, port)
	}
	start := time.Now()
	s, release, err := openDemoSide(ctx, f, opts)
	if err != nil {
		return err
	}
	defer release()
	a := s.dev.Adapter
	fmt.Fprintf(stdout, "this host: %s, %v, path MTU %d\n", s.name, a.LocalAddress(), a.PathMTU())
	if f.serve {
		return serveDemo(ctx, s.host, netip.AddrPortFrom(a.LocalAddress(), Port), f.count, stdout)
	}
	pd := &peerDemo{f: f, side: s, peer: peer}
	switch f.peerKind {
	case peerRping:
		err = pd.runRping(ctx, stdout)
	case peerPerftest:
		err = pd.runPerftest(ctx, stdout)
	default:
		err = pd.run(ctx, stdout)
	}
	if err != nil {
		return err
	}
	pd.printReport(stdout)
	if f.capture != "" {
		fmt.Fprintf(stdout, "capture: %s (every RoCEv2 frame this host sent or received)\n", f.capture)
	}
	fmt.Fprintf(stdout, "done in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// daemonServes refuses a -daemon socket whose daemon serves another
// interface than -dev: the demo would run on an interface it does not
// name.
func daemonServes(ctx context.Context, socket, dev string) error {
	var st daemon.Status
	if err := daemon.Query(ctx, strings.TrimPrefix(socket, "unix://"), daemon.OpAdminStatus, &st); err != nil {
		return fmt.Errorf("ask the daemon at %s which interface it serves: %w", socket, cmdline.SocketError(socket, err))
	}
	if st.Interface != "" && st.Interface != dev {
		return cmdline.Usagef("-dev %s -daemon %s: that daemon serves %s; give the socket of %s's daemon (by default %s), or -dev %s",
			dev, socket, st.Interface, dev, daemon.SocketPath(dev), st.Interface)
	}
	return nil
}
