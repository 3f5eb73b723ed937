package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestBootJumboIPv6 boots a second VM with a 9000-byte MTU and IPv6: rxe
// must run a 4096-byte IB MTU, carry a RoCE v2 GID for the IPv6 address,
// and full-size frames must cross the tap unfragmented.
func TestBootJumboIPv6(t *testing.T) {
	requireVMTools(t)
	testJumboIPv6(t, bootVM(t, 15*time.Minute, Config{MTU: 9000, IPv6: true}))
}

// testJumboIPv6 checks a VM booted with Config{MTU: 9000, IPv6: true}.
func testJumboIPv6(t *testing.T, vm *VM) {
	if vm.Host.MTU != 9000 || !vm.Host.IPv6.IsValid() || vm.Guest.IPv6 != GuestIPv6 {
		t.Fatalf("host %+v guest %+v", vm.Host, vm.Guest)
	}
	if out := mustRun(t, vm, "cat /sys/class/net/eth0/mtu"); out != "9000\n" {
		t.Errorf("guest eth0 MTU %q", out)
	}
	if out := mustRun(t, vm, "ibv_devinfo -d rxe0"); !strings.Contains(out, "active_mtu:\t\t4096 (5)") {
		t.Errorf("rxe0 active MTU is not 4096:\n%s", out)
	}
	want := rocev2.GIDFromAddr(GuestIPv6)
	// One grep reads the whole table: a fork per entry is slow under TCG.
	out := mustRun(t, vm, "cd /sys/class/infiniband/rxe0/ports/1 && grep -s -H . gids/* gid_attrs/types/* || true")
	gids, types := map[string]string{}, map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		path, val, _ := strings.Cut(l, ":")
		if n, ok := strings.CutPrefix(path, "gids/"); ok {
			gids[n] = val
		} else if n, ok := strings.CutPrefix(path, "gid_attrs/types/"); ok {
			types[n] = val
		}
	}
	found := false
	for n, s := range gids {
		if g, err := parseSysfsGID(s); err == nil && g == want && types[n] == "RoCE v2" {
			found = true
		}
	}
	if !found {
		t.Errorf("no RoCE v2 GID %v:\n%s", want, out)
	}
	ctx := ctxFor(t, time.Minute)
	// 8972 bytes of ICMP payload fill a 9000-byte IPv4 packet; DF forbids
	// fragmenting it.
	for _, dst := range []string{GuestIPv4.String(), GuestIPv6.String()} {
		size := "8972"
		if strings.Contains(dst, ":") {
			size = "8952"
		}
		b, err := vm.Host.Command(ctx, "ping", "-c", "2", "-i", "0.2", "-W", "2", "-M", "do", "-s", size, dst).CombinedOutput()
		if err != nil || !strings.Contains(string(b), " 0% packet loss") {
			t.Errorf("jumbo ping to %s: %v\n%s", dst, err, b)
		}
	}
	mustRun(t, vm, fmt.Sprintf("ping -c 2 -i 0.2 -W 2 -M do -s 8972 %s", HostIPv4))
}
