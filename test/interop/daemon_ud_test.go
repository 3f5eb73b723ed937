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

// TestInteropUDThroughDaemon runs rxe's udaddy and `ib_send_bw -c UD -R`
// against `ndkxdp udaddy -daemon` and `ndkxdp perf send_bw -c UD -daemon`,
// client processes of an `ndkxdp daemon` that owns the tap, each side as
// server and as client: the daemon's UD QPs answer rxe's SIDR_REQs, its
// CM resolves rxe's services, and every datagram arrives both ways.
func TestInteropUDThroughDaemon(t *testing.T) {
	vm := sharedVM(t)
	bin := testenv.Ndkxdp(t)
	sock := filepath.Join(t.TempDir(), "ndkxdp.sock")
	d := daemonproc.StartDaemonIn(t, vm.Host.NS, vm.Host.Tap, sock, daemonproc.PinRoot(t))
	d.Dial(t).Close()
	defer func() {
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
		if err := <-d.Done; err != nil {
			t.Errorf("daemon after SIGTERM: %v\n%s", err, d.Logs)
		}
	}()
	host := func(ctx context.Context, args ...string) *exec.Cmd {
		return vm.Host.Command(ctx, bin, append(args, "-daemon", sock)...)
	}
	const size = 512 // under every tap MTU's path MTU
	counts := fmt.Sprintf("-C %d -S %d", udaddyCount, size)
	complete := func(t *testing.T, who, out string) {
		t.Helper()
		if !strings.Contains(out, "data transfers complete") {
			t.Fatalf("%s did not complete:\n%s", who, out)
		}
	}
	t.Run("udaddy/rxe_server", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		out := guestServerCmd(t, ctx, vm, fmt.Sprintf("udaddy -b %v %s", GuestIPv4, counts), 7174,
			host(ctx, "udaddy", "-s", GuestIPv4.String(), "-C", fmt.Sprint(udaddyCount), "-S", fmt.Sprint(size)))
		t.Logf("ndkxdp's udaddy client through the daemon against rxe's server:\n%s", out)
		complete(t, "ndkxdp's client", out)
		if !strings.Contains(out, fmt.Sprintf("%d datagrams sent, %d received", udaddyCount, udaddyCount)) {
			t.Fatalf("ndkxdp's client did not count every datagram:\n%s", out)
		}
	})
	t.Run("udaddy/rxe_client", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		theirs, ours := hostServerCmd(t, ctx, vm, host(ctx, "udaddy", "-C", fmt.Sprint(udaddyCount), "-S", fmt.Sprint(size)),
			fmt.Sprintf("udaddy -s %v %s", HostIPv4, counts))
		t.Logf("rxe's udaddy client:\n%sndkxdp's server through the daemon:\n%s", theirs, ours)
		complete(t, "rxe's client", theirs)
		complete(t, "ndkxdp's server", ours)
	})
	prm := perfCase{"ib_send_bw", perftest.Send, perftest.BW}.params(size)
	prm.UD = true
	args := "ib_send_bw -c UD " + guestArgs(prm)
	ours := []string{"perf", "send_bw", "-c", "UD", "-n", fmt.Sprint(prm.Iterations), "-s", fmt.Sprint(size)}
	t.Run("ib_send_bw_ud/rxe_server", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		out := guestServerCmd(t, ctx, vm, args, perfPort, host(ctx, append(ours, GuestIPv4.String())...))
		requireRow(t, "ndkxdp's client through the daemon", out, out, prm)
	})
	t.Run("ib_send_bw_ud/rxe_client", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		theirs, mine := hostServerCmd(t, ctx, vm, host(ctx, ours...), args+" "+HostIPv4.String())
		requireRow(t, "rxe's client", theirs, theirs, prm)
		requireRow(t, "ndkxdp's server through the daemon", mine, mine, prm)
	})
}
