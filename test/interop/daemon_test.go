package interop

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/test/daemonproc"
)

// TestInteropThroughDaemon runs rxe against ndkxdp the way an operator's
// applications reach it: an `ndkxdp daemon` process owns the tap, and
// `ndkxdp rping -daemon` and `ndkxdp perf -daemon` are its client
// processes, as server and as client of rxe's rping and perftest. The tap
// has no ETHTOOL_GCHANNELS, so the daemon also shows it counts its queues
// from netlink there.
func TestInteropThroughDaemon(t *testing.T) {
	vm := sharedVM(t)
	_, host := hostDaemon(t, vm)

	t.Run("rping/rxe_server", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		guest := fmt.Sprintf("rping -s -a %v -S 64 -C %d", GuestIPv4, rpingCount)
		out := guestServerCmd(t, ctx, vm, guest, rpingPort, host(ctx, "rping", "-c", "-a", GuestIPv4.String(), "-S", "64", "-C", fmt.Sprint(rpingCount), "-V"))
		t.Logf("rping through the daemon against rxe's server:\n%s", out)
	})
	t.Run("rping/rxe_client", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		guest := fmt.Sprintf("rping -c -a %v -S 64 -C %d -V -v", HostIPv4, rpingCount)
		out, _ := hostServerCmd(t, ctx, vm, host(ctx, "rping", "-s", "-a", HostIPv4.String(), "-C", fmt.Sprint(rpingCount)), guest)
		if n := strings.Count(out, "ping data: rdma-ping-"); n != rpingCount {
			t.Fatalf("rxe's client verified %d pings through the daemon, want %d:\n%s", n, rpingCount, out)
		}
	})
	for _, c := range []perfCase{
		{"ib_send_bw", perftest.Send, perftest.BW},
		{"ib_write_bw", perftest.Write, perftest.BW},
		{"ib_read_lat", perftest.Read, perftest.Lat},
		{"ib_send_lat", perftest.Send, perftest.Lat},
	} {
		prm := c.params(4096)
		ours := []string{"perf", strings.TrimPrefix(c.tool, "ib_"), "-n", fmt.Sprint(prm.Iterations), "-s", "4096"}
		t.Run(c.tool+"/rxe_server", func(t *testing.T) {
			ctx := ctxFor(t, c.timeout())
			out := guestServerCmd(t, ctx, vm, c.tool+" "+guestArgs(prm), perfPort, host(ctx, append(ours, GuestIPv4.String())...))
			requireRow(t, "ndkxdp's client through the daemon", out, out, prm)
		})
		t.Run(c.tool+"/rxe_client", func(t *testing.T) {
			ctx := ctxFor(t, c.timeout())
			theirs, _ := hostServerCmd(t, ctx, vm, host(ctx, ours...), c.tool+" "+guestArgs(prm)+" "+HostIPv4.String())
			requireRow(t, "rxe's client", theirs, theirs, prm)
		})
	}
}

// hostDaemon starts an `ndkxdp daemon` on the VM's tap in the host
// namespace, stopped with SIGTERM (and required to exit cleanly) when the
// test ends, and returns it with a builder of its client commands.
func hostDaemon(t *testing.T, vm *VM) (*daemonproc.Daemon, func(ctx context.Context, args ...string) *exec.Cmd) {
	t.Helper()
	bin := testenv.Ndkxdp(t)
	d := daemonproc.StartDaemonIn(t, vm.Host.NS, vm.Host.Tap, filepath.Join(t.TempDir(), "ndkxdp.sock"), daemonproc.PinRoot(t))
	d.Dial(t).Close()
	t.Cleanup(func() {
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
		if err := <-d.Done; err != nil {
			t.Errorf("daemon after SIGTERM: %v\n%s", err, d.Logs)
		}
	})
	return d, func(ctx context.Context, args ...string) *exec.Cmd {
		return vm.Host.Command(ctx, bin, append(args, "-daemon", d.Sock)...)
	}
}

// guestServerCmd runs guest as a server on port, waits until it listens,
// then runs client (an ndkxdp command in the host namespace) to its end,
// and returns the client's output once both succeeded.
func guestServerCmd(t *testing.T, ctx context.Context, vm *VM, guest string, port uint16, client *exec.Cmd) string {
	t.Helper()
	proc, err := vm.Start(ctx, "exec "+guest)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	if err := vm.WaitListen(ctx, port); err != nil {
		out, errOut, _ := proc.Output(ctx)
		t.Fatalf("%s does not listen: %v\n%s%s", guest, err, out, errOut)
	}
	ours, cerr := client.CombinedOutput()
	if cerr != nil {
		_ = proc.Kill()
	}
	out, errOut, code, err := proc.Wait(ctx)
	if cerr != nil || err != nil || code != 0 {
		t.Fatalf("%v: %v\n%s\nguest %q: exit %d (%v)\n%s%s", client.Args, cerr, ours, guest, code, err, out, errOut)
	}
	return string(ours)
}

// hostServerCmd starts server (an ndkxdp command in the host namespace),
// then runs guest as its client, which tries again while the server is
// not listening yet (rdma_cm's REJ, reason 8: the command gives no sign
// of listening, and neither rping's nor perftest's client retries). It
// returns the guest's output and the server's once both succeeded.
func hostServerCmd(t *testing.T, ctx context.Context, vm *VM, server *exec.Cmd, guest string) (theirs, ours string) {
	t.Helper()
	theirs, ours, err := hostServerTry(ctx, vm, server, guest)
	if err != nil {
		t.Fatal(err)
	}
	return theirs, ours
}

// hostServerTry is hostServerCmd returning its failure, with both sides'
// output, instead of ending the test.
func hostServerTry(ctx context.Context, vm *VM, server *exec.Cmd, guest string) (theirs, ours string, _ error) {
	var sout strings.Builder
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		return "", "", err
	}
	done := make(chan error, 1)
	go func() { done <- server.Wait() }()
	retry := fmt.Sprintf("for i in $(seq 50); do %s && exit 0; sleep 0.2; done; exit 1", guest)
	out, errOut, code, err := vm.Run(ctx, retry)
	if err != nil || code != 0 {
		_ = server.Process.Kill()
	}
	var serr error
	select {
	case serr = <-done:
	case <-ctx.Done():
		_ = server.Process.Kill()
		serr = <-done
	}
	if serr != nil || err != nil || code != 0 {
		return out + errOut, sout.String(), fmt.Errorf("%v: %v\n%s\nguest %q: exit %d (%v)\n%s%s", server.Args, serr, sout.String(), guest, code, err, out, errOut)
	}
	return out + errOut, sout.String(), nil
}
