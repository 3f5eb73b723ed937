package interop

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// One VM serves the tests that leave it as they found it; booting one
// under TCG costs 10-15 s, building the image about a minute.
var shared struct {
	once sync.Once
	vm   *VM
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.vm != nil {
		if err := shared.vm.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "interop: close shared VM: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func requireVMTools(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "qemu-system-x86_64")
	testenv.RequireTool(t, "mmdebstrap")
	testenv.RequireTool(t, "zstd")
}

func sharedVM(t *testing.T) *VM {
	t.Helper()
	requireVMTools(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		shared.vm, shared.err = Boot(ctx, Config{})
		if shared.err == nil {
			logBoot(t, shared.vm)
		}
	})
	if shared.err != nil {
		t.Fatalf("boot the shared peer VM: %v", shared.err)
	}
	return shared.vm
}

// bootVM boots a VM of the test's own (within limit), logs how, and closes
// it when the test ends.
func bootVM(t *testing.T, limit time.Duration, cfg Config) *VM {
	t.Helper()
	vm, err := Boot(ctxFor(t, limit), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vm.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	logBoot(t, vm)
	return vm
}

func logBoot(t *testing.T, vm *VM) {
	t.Logf("peer VM: image %s (kernel %s, initramfs %.1f MB), %s (%s), ready in %v (guest uptime %v)",
		vm.Image.Hash, vm.Image.KernelRelease, float64(vm.Image.InitrdBytes)/1e6,
		vm.Accel, vm.AccelReason, vm.BootTime.Round(time.Millisecond), vm.GuestUptime.Round(time.Millisecond))
	if vm.BootNote != "" {
		t.Logf("peer VM: %s", vm.BootNote)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustRun(t *testing.T, vm *VM, cmd string) string {
	t.Helper()
	out, errOut, code, err := vm.Run(ctxFor(t, time.Minute), cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	if code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", cmd, code, out, errOut)
	}
	return out
}

func TestBootRxeReady(t *testing.T) { checkRxeReady(t, sharedVM(t)) }

// checkRxeReady: the agent's report of rxe0's RoCE v2 GID matches sysfs,
// the guest's NIC runs without TX NAPI and has the harness's MAC.
func checkRxeReady(t *testing.T, vm *VM) {
	checkVersions(t, vm)
	want := rocev2.GIDFromAddr(GuestIPv4)
	if vm.Guest.GID != want {
		t.Fatalf("GID %v, want %v", vm.Guest.GID, want)
	}
	// The agent's report must match what sysfs says now.
	idx := vm.Guest.GIDIndex
	out := mustRun(t, vm, fmt.Sprintf("cat /sys/class/infiniband/rxe0/ports/1/gids/%d /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/%d /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/%d", idx, idx, idx))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("sysfs GID entry: %q", out)
	}
	gid, err := parseSysfsGID(lines[0])
	if err != nil || gid != want || lines[1] != "RoCE v2" || lines[2] != "eth0" {
		t.Fatalf("GID %d is %q (%v), type %q, netdev %q; want %v, RoCE v2, eth0", idx, lines[0], err, lines[1], lines[2], want)
	}
	// The guest's virtio-net orphans transmitted skbs (no TX NAPI): rxe's
	// requester never waits for TX completions (vm.go).
	if napi := strings.TrimSpace(mustRun(t, vm, "cat /sys/module/virtio_net/parameters/napi_tx")); napi != "N" {
		t.Errorf("virtio_net napi_tx = %q, want N", napi)
	}
	mac := strings.TrimSpace(mustRun(t, vm, "cat /sys/class/net/eth0/address"))
	if mac != GuestMAC.String() {
		t.Errorf("guest eth0 MAC %s, want %s", mac, GuestMAC)
	}
	if vm.Accel != AccelKVM && vm.Accel != AccelTCG {
		t.Errorf("accelerator %q", vm.Accel)
	}
}

func TestIbvDevinfoPortActive(t *testing.T) { checkDevinfo(t, sharedVM(t)) }

func checkDevinfo(t *testing.T, vm *VM) {
	out := mustRun(t, vm, "ibv_devinfo -d rxe0")
	for _, want := range []string{"hca_id:\trxe0", "PORT_ACTIVE (4)", "link_layer:\t\tEthernet"} {
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo -d rxe0 lacks %q:\n%s", want, out)
		}
	}
}

func TestRunOutputAndExitCodes(t *testing.T) {
	vm := sharedVM(t)
	for _, tc := range []struct {
		cmd            string
		stdout, stderr string
		code           int
	}{
		{"true", "", "", 0},
		{"false", "", "", 1},
		{"echo out; echo err >&2; exit 7", "out\n", "err\n", 7},
		{"printf 'a b\\n\\tc'", "a b\n\tc", "", 0},
		{"head -c 100000 /dev/zero | tr '\\0' x", strings.Repeat("x", 100000), "", 0},
		{"kill -TERM $$", "", "", 143},
		{"no-such-command-here", "", "bash: line 1: no-such-command-here: command not found\n", 127},
	} {
		out, errOut, code, err := vm.Run(ctxFor(t, time.Minute), tc.cmd)
		if err != nil {
			t.Errorf("%q: %v", tc.cmd, err)
			continue
		}
		if out != tc.stdout || errOut != tc.stderr || code != tc.code {
			t.Errorf("%q: stdout %.40q stderr %q exit %d; want %.40q %q %d", tc.cmd, out, errOut, code, tc.stdout, tc.stderr, tc.code)
		}
	}
}

func TestRunConcurrent(t *testing.T) {
	vm := sharedVM(t)
	// Both run at once: the first finishes only after the second has
	// started and created its marker, so serialized execution would fail.
	ctx := ctxFor(t, time.Minute)
	type result struct {
		out  string
		code int
		err  error
	}
	res := make([]result, 2)
	var wg sync.WaitGroup
	for i, cmd := range []string{
		"for i in $(seq 1 200); do [ -e /tmp/conc-b ] && break; sleep 0.05; done; [ -e /tmp/conc-b ] && echo A-saw-B",
		"touch /tmp/conc-b; echo B",
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _, code, err := vm.Run(ctx, cmd)
			res[i] = result{out, code, err}
		}()
	}
	wg.Wait()
	mustRun(t, vm, "rm -f /tmp/conc-b")
	if res[0].err != nil || res[0].code != 0 || res[0].out != "A-saw-B\n" {
		t.Errorf("command A: %q exit %d err %v", res[0].out, res[0].code, res[0].err)
	}
	if res[1].err != nil || res[1].code != 0 || res[1].out != "B\n" {
		t.Errorf("command B: %q exit %d err %v", res[1].out, res[1].code, res[1].err)
	}
}

func TestStartKillAndOutput(t *testing.T) {
	vm := sharedVM(t)
	ctx := ctxFor(t, time.Minute)
	p, err := vm.Start(ctx, "echo started; sleep 600 & wait")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, err := p.Output(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if out == "started\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live output %q, want %q", out, "started\n")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	out, _, code, err := p.Wait(ctx)
	if err != nil || code != 137 || out != "started\n" {
		t.Fatalf("killed process: stdout %q exit %d err %v; want started, 137", out, code, err)
	}
	// The background sleep was in the killed process group too.
	if out := mustRun(t, vm, "for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 600' || true"); strings.TrimSpace(out) != "0" {
		t.Errorf("sleep 600 survived the kill (%s)", strings.TrimSpace(out))
	}
}

func TestRunContextCancelKills(t *testing.T) {
	vm := sharedVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, _, code, err := vm.Run(ctx, "sleep 30; touch /tmp/not-killed")
	if err == nil || code != -1 {
		t.Fatalf("Run past its deadline: exit %d err %v, want an error", code, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Run returned after %v", d)
	}
	if out := mustRun(t, vm, "sleep 0.5; [ -e /tmp/not-killed ] && echo yes || echo no"); out != "no\n" {
		t.Fatalf("command outlived its context: %q", out)
	}
}

func TestPingBothWays(t *testing.T) {
	vm := sharedVM(t)
	ctx := ctxFor(t, time.Minute)
	out, err := vm.Host.Command(ctx, "ping", "-c", "3", "-i", "0.2", "-W", "2", GuestIPv4.String()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 0% packet loss") {
		t.Errorf("host -> guest ping: %v\n%s", err, out)
	}
	g := mustRun(t, vm, "ping -c 3 -i 0.2 -W 2 "+HostIPv4.String())
	if !strings.Contains(g, " 0% packet loss") {
		t.Errorf("guest -> host ping:\n%s", g)
	}
}

// isFromGuest matches frames the VM sent that carry an IPv4 ICMP echo
// request.
func isGuestEcho(f Frame) bool {
	d := f.Data
	return !f.Outgoing && len(d) >= 14+20+8 &&
		binary.BigEndian.Uint16(d[12:]) == 0x0800 && d[14+9] == 1 && d[14+20] == 8 &&
		netip.AddrFrom4([4]byte(d[26:30])) == GuestIPv4
}

func TestNetemLoss(t *testing.T) {
	vm := sharedVM(t)
	ctx := ctxFor(t, 2*time.Minute)
	t.Cleanup(func() {
		if err := vm.SetLoss(context.Background(), 0); err != nil {
			t.Errorf("reset loss: %v", err)
		}
	})
	if err := vm.SetLoss(ctx, 100); err != nil {
		t.Fatal(err)
	}
	c, err := vm.Host.StartCapture()
	if err != nil {
		t.Fatal(err)
	}
	_, _, code, err := vm.Run(ctx, "ping -c 3 -i 0.2 -W 1 "+HostIPv4.String())
	frames := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if code == 0 {
		t.Errorf("guest ping succeeded with 100%% loss")
	}
	for _, f := range frames {
		if !f.Outgoing {
			t.Fatalf("with 100%% loss the host saw a frame from the guest: % x", f.Data[:min(len(f.Data), 42)])
		}
	}

	if err := vm.SetLoss(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, vm, "tc qdisc show dev eth0"); strings.Contains(out, "netem") {
		t.Fatalf("netem still installed after reset: %s", out)
	}
	c, err = vm.Host.StartCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	mustRun(t, vm, "ping -c 3 -i 0.2 -W 2 "+HostIPv4.String())
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.WaitFor(wctx, isGuestEcho); err != nil {
		t.Fatalf("after reset the host saw no echo request from the guest: %v", err)
	}
}

func TestSetLossRejectsBadPercent(t *testing.T) {
	vm := &VM{}
	for _, p := range []float64{-1, 100.5} {
		if err := vm.SetLoss(context.Background(), p); err == nil {
			t.Errorf("SetLoss(%v) accepted", p)
		}
	}
}

// TestBootKVMFallsBack pretends detection chose KVM. Where KVM works the VM
// runs under it; where it cannot boot the kernel (as on a paravirtual KVM
// without VMX), Boot must fall back to TCG and remember the verdict.
func TestBootKVMFallsBack(t *testing.T) {
	requireVMTools(t)
	if os.Getenv("NDKXDP_INTEROP_ACCEL") != "" {
		t.Setenv("NDKXDP_INTEROP_ACCEL", "")
	}
	img, err := EnsureImage(ctxFor(t, 15*time.Minute), ImageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// The verdict goes beside the image's directory: keep it out of the
	// real cache.
	local := *img
	local.Dir = filepath.Join(t.TempDir(), img.Hash)
	saved := detectAccel
	detectAccel = func() (Accel, string) { return AccelKVM, "test: pretend KVM works" }
	t.Cleanup(func() { detectAccel = saved })

	vm := bootVM(t, 5*time.Minute, Config{Image: &local})
	verdict, cached := kvmVerdict(&local)
	switch vm.Accel {
	case AccelKVM:
		if cached {
			t.Errorf("KVM worked but a failure verdict was stored: %s", verdict)
		}
	case AccelTCG:
		if !cached || !strings.Contains(verdict, "KVM boot failed") || !strings.Contains(vm.AccelReason, "KVM boot failed") {
			t.Errorf("fell back to TCG without recording why: verdict %q (stored %v), reason %q", verdict, cached, vm.AccelReason)
		}
	default:
		t.Fatalf("accelerator %q", vm.Accel)
	}
	if out := mustRun(t, vm, "cat /sys/class/infiniband/rxe0/ports/1/state"); !strings.Contains(out, "ACTIVE") {
		t.Errorf("rxe0 port state %q", out)
	}
}

// TestBootRetriesAHungAttempt: an attempt whose guest never got ready is
// cut at hangTimeout and the VM booted once more with the whole
// BootTimeout, and so is one whose kernel panicked; any other failure, a second hang, or a caller's timeout no
// longer than hangTimeout is returned as it is.
func TestBootRetriesAHungAttempt(t *testing.T) {
	saved := bootAttempt
	t.Cleanup(func() { bootAttempt = saved })
	hung := fmt.Errorf("interop: boot the peer VM (tcg): %w after 1m30s: context deadline exceeded", errNotReady)
	exited := errors.New("interop: boot the peer VM (tcg): qemu exited during boot")
	panicked := fmt.Errorf("interop: boot the peer VM (tcg): %w: qemu exited during boot", errPanicked)
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		results  []error
		timeouts []time.Duration // what each attempt was given
		ok       bool
	}{
		{"hang then boot", 3 * time.Minute, []error{hung, nil}, []time.Duration{hangTimeout, 3 * time.Minute}, true},
		{"first boot", 3 * time.Minute, []error{nil}, []time.Duration{hangTimeout}, true},
		{"qemu exits", 3 * time.Minute, []error{exited}, []time.Duration{hangTimeout}, false},
		{"two hangs", 3 * time.Minute, []error{hung, hung}, []time.Duration{hangTimeout, 3 * time.Minute}, false},
		{"short caller timeout", time.Minute, []error{hung}, []time.Duration{time.Minute}, false},
		{"panic then boot", 3 * time.Minute, []error{panicked, nil}, []time.Duration{hangTimeout, 3 * time.Minute}, true},
		{"panic, short caller timeout", time.Minute, []error{panicked, nil}, []time.Duration{time.Minute, time.Minute}, true},
		{"two panics", 3 * time.Minute, []error{panicked, panicked}, []time.Duration{hangTimeout, 3 * time.Minute}, false},
	} {
		var got []time.Duration
		bootAttempt = func(ctx context.Context, cfg Config, img *Image, accel Accel) (*VM, error) {
			got = append(got, cfg.BootTimeout)
			if err := tc.results[len(got)-1]; err != nil {
				return nil, err
			}
			return &VM{Accel: accel}, nil
		}
		vm, err := bootRetrying(context.Background(), Config{BootTimeout: tc.timeout}, &Image{}, AccelTCG)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.timeouts) {
			t.Errorf("%s: attempts given %v, error %v; want %v, success %v", tc.name, got, err, tc.timeouts, tc.ok)
			continue
		}
		if tc.ok && (len(got) > 1) != (strings.Contains(vm.BootNote, "hung") || strings.Contains(vm.BootNote, "panicked")) {
			t.Errorf("%s: boot note %q after %d attempts", tc.name, vm.BootNote, len(got))
		}
	}
}
