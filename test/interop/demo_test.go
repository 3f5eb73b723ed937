package interop

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// TestInteropDemoAgainstRping runs `ndkxdp demo -dev TAP -peer GUEST
// -peer-kind rping` against rxe's own rping -s in the shared VM: the demo
// names the phases rping serves and those it skips, times rping's round
// trips with every pong compared, and rxe's rping ends cleanly when the
// demo disconnects.
func TestInteropDemoAgainstRping(t *testing.T) {
	vm := sharedVM(t)
	exe := testenv.Ndkxdp(t)
	ctx := ctxFor(t, 2*time.Minute)
	srv, err := vm.Start(ctx, fmt.Sprintf("rping -s -a %v -p %d", GuestIPv4, rpingPort))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	if err := vm.WaitListen(ctx, rpingPort); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--net=/var/run/netns/"+vm.Host.NS, exe, "demo", "-dev", vm.Host.Tap,
		"-peer", GuestIPv4.String(), "-peer-kind", "rping", "-pings", "50").CombinedOutput()
	if err != nil {
		t.Fatalf("demo against rxe's rping -s: %v\n%s", err, out)
	}
	for _, want := range []string{"-peer-kind rping", "SEND:      skipped", "WRITE:     skipped", "READ:      skipped",
		"ping-pong: runs as rping's round trips", "rping      150 x 64       READ by the peer and written back, each compared",
		"rping  RTT p50", "(50 round trips of 64 bytes)", "0 bad ICRC"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	gout, gerr, code, err := srv.Wait(ctx)
	if err != nil || code != 0 {
		t.Errorf("rxe's rping -s: exit %d (%v)\n%s%s", code, err, gout, gerr)
	}
	t.Logf("%s", out)
}
