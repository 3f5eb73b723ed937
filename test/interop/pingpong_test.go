package interop

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/pingpong"
)

// testPingpong runs rdma-core's ibv_rc_pingpong, ibv_ud_pingpong,
// ibv_srq_pingpong and ibv_uc_pingpong (ibverbs-utils) against ndkxdp's
// (internal/tool/pingpong), each side as server and as client: the addresses swapped over TCP port 18515, the
// QPs connected out of band with no rdma_cm, -g on both sides (rxe's
// index of its RoCE v2 IPv4 GID, ndkxdp's of the tap's), -c on both (the
// server checks the bytes the client wrote; uc_pingpong has no -c), at the C tools' default size
// and iterations and at a second size (a 64 KiB RC message of many
// packets with -e, a 100-byte datagram). Both sides' lines are checked:
// each names the other's QPN, PSN and GID, and counts size * iters * 2
// bytes. Part of every peer's full case set (runCases).
func testPingpong(t *testing.T, p *peer) {
	t.Run("gid_table", func(t *testing.T) { testGIDTable(t, p) })
	var hostGIDIdx int
	var hostGID [16]byte
	if err := p.vm.Host.Do(func() error {
		tab, err := pingpong.InterfaceGIDs(p.vm.Host.Tap)
		if err != nil {
			return err
		}
		hostGIDIdx = -1
		for _, e := range tab {
			if e.Addr == p.dev.Adapter.LocalAddress() {
				hostGIDIdx = e.Index
				break
			}
		}
		if hostGIDIdx < 0 {
			return fmt.Errorf("no GID of %v in %+v", p.dev.Adapter.LocalAddress(), tab)
		}
		hostGID, err = pingpong.PickGID(tab, hostGIDIdx, p.dev.Adapter.LocalAddress())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool      string
		mode      pingpong.Mode
		size      int
		iters     int
		events    bool
		extraArgs string
		numQP     int // srq_pingpong's -q
	}{
		{"ibv_rc_pingpong", pingpong.RC, pingpong.DefaultRCSize, pingpong.DefaultIters, false, "", 0},
		{"ibv_rc_pingpong", pingpong.RC, 65536, 50, true, "-s 65536 -n 50 -e", 0},
		{"ibv_ud_pingpong", pingpong.UD, pingpong.DefaultUDSize, pingpong.DefaultIters, false, "", 0},
		{"ibv_ud_pingpong", pingpong.UD, 100, 200, true, "-s 100 -n 200 -e", 0},
		{"ibv_srq_pingpong", pingpong.SRQ, pingpong.DefaultRCSize, pingpong.DefaultIters, false, "", pingpong.DefaultSRQQPs},
		{"ibv_srq_pingpong", pingpong.SRQ, 100, 200, true, "-s 100 -n 200 -e -q 4 -r 16", 4},
		{"ibv_uc_pingpong", pingpong.UC, pingpong.DefaultRCSize, pingpong.DefaultIters, false, "", 0},
		{"ibv_uc_pingpong", pingpong.UC, 100, 200, true, "-s 100 -n 200 -e", 0},
	} {
		// ibv_uc_pingpong has no -c, and writes no page marks to check.
		validate := c.mode != pingpong.UC
		chk := ""
		if validate {
			chk = "-c "
		}
		guestArgs := fmt.Sprintf("%s -d rxe0 -g %d %s%s", c.tool, p.vm.Guest.GIDIndex, chk, c.extraArgs)
		cfg := pingpong.Config{Mode: c.mode, Size: c.size, Iters: c.iters, Events: c.events, Validate: validate,
			GID: hostGID, NumQP: c.numQP}
		if c.numQP == 4 {
			cfg.RxDepth = 16
		}
		name := strings.TrimPrefix(c.tool, "ibv_")
		t.Run(fmt.Sprintf("%s/%dB/rxe_server", name, c.size), func(t *testing.T) {
			p.capture(t)
			ctx := ctxFor(t, 3*time.Minute)
			proc, err := p.vm.Start(ctx, "exec "+guestArgs)
			if err != nil {
				t.Fatal(err)
			}
			defer proc.Kill()
			if err := waitTCPListen(ctx, p.vm, pingpong.DefaultPort); err != nil {
				out, errOut, _ := proc.Output(ctx)
				t.Fatalf("%s does not listen: %v\n%s%s", guestArgs, err, out, errOut)
			}
			var ours bytes.Buffer
			var st pingpong.Stats
			cfg := cfg
			cfg.Server = GuestIPv4.String()
			cerr := p.vm.Host.Do(func() (err error) {
				st, err = pingpong.Run(ctx, p.dev.Adapter, cfg, &ours)
				return err
			})
			if cerr != nil {
				_ = proc.Kill()
			}
			out, errOut, code, err := proc.Wait(ctx)
			t.Logf("rxe's %s server:\n%s%sndkxdp's client:\n%s", c.tool, out, errOut, ours.String())
			if cerr != nil || err != nil || code != 0 {
				t.Fatalf("ndkxdp's client: %v; rxe's server: exit %d (%v)", cerr, code, err)
			}
			checkPingpongLines(t, c.mode, c.size, c.iters, "rxe's server", out, "ndkxdp's client", ours.String(), st)
		})
		t.Run(fmt.Sprintf("%s/%dB/rxe_client", name, c.size), func(t *testing.T) {
			p.capture(t)
			ctx := ctxFor(t, 3*time.Minute)
			var ours bytes.Buffer
			var st pingpong.Stats
			listening := make(chan struct{})
			done := make(chan error, 1)
			cfg := cfg
			cfg.Listening = func() { close(listening) }
			go func() {
				done <- p.vm.Host.Do(func() (err error) {
					st, err = pingpong.Run(ctx, p.dev.Adapter, cfg, &ours)
					return err
				})
			}()
			select {
			case <-listening:
			case err := <-done:
				t.Fatalf("ndkxdp's server: %v\n%s", err, ours.String())
			}
			out, errOut, code, err := p.vm.Run(ctx, guestArgs+" "+HostIPv4.String())
			var serr error
			if err != nil || code != 0 {
				select {
				case serr = <-done:
				case <-time.After(5 * time.Second):
					serr = fmt.Errorf("still running after the guest's client failed")
				}
			} else {
				serr = <-done
			}
			t.Logf("rxe's %s client:\n%s%sndkxdp's server:\n%s", c.tool, out, errOut, ours.String())
			if err != nil || code != 0 || serr != nil {
				t.Fatalf("rxe's client: exit %d (%v); ndkxdp's server: %v", code, err, serr)
			}
			checkPingpongLines(t, c.mode, c.size, c.iters, "rxe's client", out, "ndkxdp's server", ours.String(), st)
		})
	}
}

// checkPingpongLines: both sides printed their address lines (one a QP),
// each side's remote lines are the other's local ones in order (LID 0,
// QPN, PSN and the GID of the other's IPv4 address), the result lines
// count size * iters * 2 bytes, and no side found invalid data.
func checkPingpongLines(t *testing.T, mode pingpong.Mode, size, iters int, who, out, ourWho, ours string, st pingpong.Stats) {
	t.Helper()
	addr := regexp.MustCompile(`(?m)^  (local|remote) address: +LID (0x[0-9a-f]{4}), QPN (0x[0-9a-f]{6}), PSN (0x[0-9a-f]{6})[,:] GID (\S+)$`)
	lines := func(s string) map[string][]string {
		m := map[string][]string{}
		for _, l := range addr.FindAllStringSubmatch(s, -1) {
			m[l[1]] = append(m[l[1]], strings.Join(l[2:], " "))
		}
		return m
	}
	theirs, mine := lines(out), lines(ours)
	if len(theirs["local"]) == 0 || len(theirs["remote"]) == 0 || len(mine["local"]) == 0 || len(mine["remote"]) == 0 {
		t.Fatalf("address lines missing: %s %q, %s %q", who, theirs, ourWho, mine)
	}
	if !slices.Equal(theirs["local"], mine["remote"]) || !slices.Equal(theirs["remote"], mine["local"]) {
		t.Fatalf("the sides disagree: %s says local %q remote %q; %s local %q remote %q", who, theirs["local"], theirs["remote"], ourWho, mine["local"], mine["remote"])
	}
	wantLocal := fmt.Sprintf("0x0000 0x%06x 0x%06x ::ffff:%v", st.Local.QPN, st.Local.PSN, HostIPv4)
	if mine["local"][0] != wantLocal || !strings.HasSuffix(theirs["local"][0], "::ffff:"+GuestIPv4.String()) {
		t.Fatalf("local lines: ours %q (want %q first), theirs %q", mine["local"], wantLocal, theirs["local"])
	}
	if mode == pingpong.UD {
		// ud_pingpong.c:724 prints "PSN 0x%06x: GID" in its local line.
		colon := regexp.MustCompile(`(?m)^  local address: .*PSN 0x[0-9a-f]{6}: GID `)
		if !colon.MatchString(out) || !colon.MatchString(ours) {
			t.Fatalf("a local line lacks ud_pingpong's colon:\n%s\n%s", out, ours)
		}
	}
	res := regexp.MustCompile(fmt.Sprintf(`(?m)^%d bytes in [\d.]+ seconds = [\d.]+ Mbit/sec\n%d iters in [\d.]+ seconds = [\d.]+ usec/iter$`, size*iters*2, iters))
	for _, s := range []struct{ who, out string }{{who, out}, {ourWho, ours}} {
		if !res.MatchString(s.out) {
			t.Fatalf("%s printed no result lines for %d x %d bytes:\n%s", s.who, iters, size, s.out)
		}
		if strings.Contains(s.out, "invalid data") {
			t.Fatalf("%s found invalid data:\n%s", s.who, s.out)
		}
	}
	// srq_pingpong counts over all its QPs and stops posting at -n
	// completed sends, so up to a send a QP more may complete.
	if st.Sent < iters || st.Recvd < iters || (mode != pingpong.SRQ && (st.Sent != iters || st.Recvd != iters)) {
		t.Fatalf("%s sent %d and received %d, want %d each", ourWho, st.Sent, st.Recvd, iters)
	}
}

// testGIDTable: the GID table pingpong.GIDTable predicts for the guest's
// NIC (its MAC and addresses) is rxe0's, entry for entry, so that -g
// means on ndkxdp what it means on rxe.
func testGIDTable(t *testing.T, p *peer) {
	out := mustRun(t, p.vm, "cd /sys/class/infiniband/rxe0/ports/1 && grep -s -H . gids/* gid_attrs/types/* || true")
	gids, types := map[int]string{}, map[int]string{}
	for _, l := range strings.Split(out, "\n") {
		path, val, _ := strings.Cut(l, ":")
		var n int
		if _, err := fmt.Sscanf(path, "gids/%d", &n); err == nil {
			if g, err := parseSysfsGID(val); err == nil && g != ([16]byte{}) {
				gids[n] = pingpong.GIDString(g)
			}
		} else if _, err := fmt.Sscanf(path, "gid_attrs/types/%d", &n); err == nil {
			types[n] = val
		}
	}
	addrs := []netip.Addr{GuestIPv4}
	if p.vm.Guest.IPv6.IsValid() {
		addrs = append(addrs, p.vm.Guest.IPv6)
	}
	want := pingpong.GIDTable(GuestMAC, addrs)
	var got, pred strings.Builder
	for i := 0; i < len(gids)+len(want); i++ {
		if g, ok := gids[i]; ok {
			fmt.Fprintf(&got, "%d %s %s\n", i, g, types[i])
		}
	}
	for _, e := range want {
		fmt.Fprintf(&pred, "%d %s %s\n", e.Index, pingpong.GIDString(e.GID), e.Type())
	}
	t.Logf("rxe0's GID table:\n%s", got.String())
	if got.String() != pred.String() {
		t.Fatalf("rxe0's GID table:\n%swant (pingpong.GIDTable):\n%s", got.String(), pred.String())
	}
	if p.vm.Guest.GIDIndex >= len(want) || want[p.vm.Guest.GIDIndex].Addr != GuestIPv4 {
		t.Fatalf("the agent's GID index %d is %+v in the predicted table", p.vm.Guest.GIDIndex, want[p.vm.Guest.GIDIndex])
	}
}

// waitTCPListen waits until a TCP socket listens on port in the guest
// (the pingpong tools' exchange; WaitListen is rdma_cm's).
func waitTCPListen(ctx context.Context, vm *VM, port uint16) error {
	cmd := fmt.Sprintf("grep -qE ':%04X [0-9A-F]+:0000 0A' /proc/net/tcp /proc/net/tcp6", port)
	for {
		_, _, code, err := vm.Run(ctx, cmd)
		if err != nil {
			return err
		}
		if code == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no TCP listener on port %d in the guest: %w", port, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
