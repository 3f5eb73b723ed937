package interop

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The guests' addresses on the segment JoinGuests makes: the daemon host
// keeps the default.
var (
	rxeGuestIPv4    = netip.MustParseAddr("198.18.1.3")
	rxeGuestMAC     = net.HardwareAddr{0x52, 0x54, 0x00, 0xc6, 0x12, 0x03}
	secondGuestIPv4 = netip.MustParseAddr("198.18.1.4")
	secondGuestMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0xc6, 0x12, 0x04}
)

// TestGuestsOnOneSegment runs ndkxdp on a real driver against real peers,
// guest to guest: the daemon host (Debian 13's backports kernel, the
// daemon under systemd on a two-queue virtio_net NIC that binds AF_XDP
// zero-copy) shares one bridge, inside the test's namespaces, with
// Debian 12's rxe guest and with a second ndkxdp guest (the same image,
// ndkxdp attached in process to its own virtio_net NIC). Each queue's
// bind mode and reason are logged as info reports them; then rping both
// ways with rxe, perftest's bandwidth and latency tools both ways with
// rxe (ndkxdp perf through the daemon on the other side), and rping and
// write_bw from the second ndkxdp guest to the daemon's clients.
func TestGuestsOnOneSegment(t *testing.T) {
	requireVMTools(t)
	img, err := EnsureImage(ctxFor(t, 20*time.Minute), ImageConfig{Systemd: true, Sources: BackportsSources, Packages: BackportsSystemdPackages()})
	if err != nil {
		t.Fatal(err)
	}
	files := daemonFiles(t)
	// The daemon binds its queues zero-copy at boot, which resets them;
	// when qemu then never reads a send queue again (stall.go), every
	// case below would time out for a fault of the device: the three
	// guests are booted anew, at most bootStallRetries times.
	var dh, rxe, second *VM
	for boot := 1; ; boot++ {
		dh = bootVM(t, 4*time.Minute, Config{Image: img, Queues: 2, CPUs: 2, MemoryMB: 1024, Files: files, ZeroCopyNIC: true})
		rxe = bootVM(t, 4*time.Minute, Config{GuestIPv4: rxeGuestIPv4, GuestMAC: rxeGuestMAC})
		second = bootVM(t, 4*time.Minute, Config{Image: img, MemoryMB: 1024, Files: files, ZeroCopyNIC: true, GuestIPv4: secondGuestIPv4, GuestMAC: secondGuestMAC})
		if err := JoinGuests(dh, rxe, second); err != nil {
			t.Fatal(err)
		}
		mustRun(t, dh, operatorInstall)
		waitDaemon(t, dh)
		if !sendQueuesStalled(t, dh, rxeGuestIPv4, boot) && !firstConnectionMute(t, dh, rxe, second, boot) {
			break
		}
		for _, vm := range []*VM{dh, rxe, second} {
			if err := vm.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	}
	// A failed case (the rxe ones time out when a queue of the daemon
	// host stalls) leaves the three guests' state in the log; the VMs
	// close after this runs.
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			t.Logf("after the failure:\n%s", guestDiagnostics(ctx, dh, rxe, second))
		}
	})
	var info daemon.Info
	guestJSON(t, dh, "ndkxdp info -j -dev eth0", &info)
	checkZeroCopy(t, dh, &info)
	for _, q := range info.Queues {
		t.Logf("daemon host queue %d: %s (multi-buffer %v): %s", q.Queue, q.Bind, q.MultiBuffer, q.BindReason)
	}
	dhIP, rxeIP := dh.Guest.IPv4.String(), rxeGuestIPv4.String()
	ours := func(args string) string { return "ndkxdp " + args + " -daemon " + daemonSocket + " -timeout 90s" }

	t.Run("rping/rxe_server", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		srv := startServer(t, ctx, rxe, fmt.Sprintf("rping -s -a %s -S 64 -C %d", rxeIP, rpingCount), rpingPort)
		out := mustRunCtx(t, ctx, dh, ours(fmt.Sprintf("rping -c -a %s -S 64 -C %d -V", rxeIP, rpingCount)))
		waitServer(t, ctx, srv, "rxe's rping server")
		t.Logf("the daemon's rping client against rxe's server:\n%s", out)
	})
	t.Run("rping/rxe_client", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		srv := startServer(t, ctx, dh, ours(fmt.Sprintf("rping -s -C %d", rpingCount)), 0)
		out := retryGuest(t, ctx, rxe, fmt.Sprintf("rping -c -a %s -S 64 -C %d -V -v", dhIP, rpingCount))
		waitServer(t, ctx, srv, "the daemon's rping server")
		if n := strings.Count(out, "ping data: rdma-ping-"); n != rpingCount {
			t.Fatalf("rxe's client verified %d pings through the daemon, want %d:\n%s", n, rpingCount, out)
		}
	})
	for _, c := range perfCases {
		if c.verb == perftest.Atomic && c.kind == perftest.Lat {
			continue // ib_atomic_bw's wire, one at a time: nothing new for zero-copy (CI time)
		}
		prm := c.params(4096)
		mine := fmt.Sprintf("perf %s -n %d", strings.TrimPrefix(c.tool, "ib_"), prm.Iterations)
		if prm.Size != 0 { // atomics: 8 bytes
			mine += fmt.Sprintf(" -s %d", prm.Size)
		}
		t.Run(c.tool+"/rxe_server", func(t *testing.T) {
			ctx := ctxFor(t, c.timeout())
			srv := startServer(t, ctx, rxe, c.tool+" "+guestArgs(prm), perfPort)
			out := mustRunCtx(t, ctx, dh, ours(mine+" "+rxeIP))
			waitServer(t, ctx, srv, "rxe's "+c.tool)
			requireRow(t, "the daemon's client", out, out, prm)
		})
		t.Run(c.tool+"/rxe_client", func(t *testing.T) {
			ctx := ctxFor(t, c.timeout())
			srv := startServer(t, ctx, dh, ours(mine), 0)
			theirs := retryGuest(t, ctx, rxe, c.tool+" "+guestArgs(prm)+" "+dhIP)
			waitServer(t, ctx, srv, "the daemon's perf server")
			requireRow(t, "rxe's client", theirs, theirs, prm)
		})
	}
	// The second guest's clients try again while refused (the daemon's
	// server may not listen yet); a try that hears nothing gives up after
	// 30 s so that another, with a fresh attach, fits in the subtest's
	// two minutes, which the daemon's server outlasts. They bind AF_XDP
	// in copy mode: a zero-copy bind resets the virtio queue pair
	// (VIRTIO_F_RING_RESET), and after such a reset Debian 12's qemu 7.2
	// now and then never again took a descriptor from that pair (doc.go);
	// the daemon host's zero-copy queues are what this test is about.
	inproc := stageDir + "/ndkxdp"
	serving := func(args string) string { return "ndkxdp " + args + " -daemon " + daemonSocket + " -timeout 115s" }
	t.Run("ndkxdp_guest/rping", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		srv := startServer(t, ctx, dh, serving(fmt.Sprintf("rping -s -C %d -d", rpingCount)), 0)
		out := guestClient(t, ctx, second, fmt.Sprintf("%s rping -c -dev eth0 -zero-copy off -a %s -S 64 -C %d -V -v -d -timeout 30s", inproc, dhIP, rpingCount), srv, dh)
		waitServer(t, ctx, srv, "the daemon's rping server")
		if n := strings.Count(out, "ping data: rdma-ping-"); n != rpingCount {
			t.Fatalf("the second ndkxdp guest verified %d pings, want %d:\n%s", n, rpingCount, out)
		}
	})
	t.Run("ndkxdp_guest/write_bw", func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		prm := perfCases[1].params(4096)
		srv := startServer(t, ctx, dh, serving(fmt.Sprintf("perf write_bw -n %d -s %d", prm.Iterations, prm.Size)), 0)
		out := guestClient(t, ctx, second, fmt.Sprintf("%s perf write_bw -dev eth0 -zero-copy off -n %d -s %d -timeout 30s %s", inproc, prm.Iterations, prm.Size, dhIP), srv, dh)
		waitServer(t, ctx, srv, "the daemon's perf server")
		requireRow(t, "the second ndkxdp guest's client", out, out, prm)
	})
	var stats daemon.Stats
	guestJSON(t, dh, "ndkxdp stats -j -dev eth0", &stats)
	for _, e := range stats.Engines {
		c := e.Engine
		t.Logf("daemon host queue %d: frames in %d out %d, retransmission rounds %d, out of sequence %d; tx_frames %d, %d sent in place",
			e.Queue, c["frames_in"], c["frames_out"], c["retransmits"], c["out_of_sequence"], e.Socket.TxFrames, e.Socket.TxInPlaceFrames)
	}
}

// startServer starts cmd in vm's guest and, for port > 0 (an rxe guest),
// waits until rdma_cm listens on it; the process is killed when the test
// ends.
func startServer(t *testing.T, ctx context.Context, vm *VM, cmd string, port uint16) *GuestProcess {
	t.Helper()
	p, err := vm.Start(ctx, "exec "+cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	if port > 0 {
		if err := vm.WaitListen(ctx, port); err != nil {
			out, errOut, _ := p.Output(ctx)
			t.Fatalf("%s does not listen: %v\n%s%s", cmd, err, out, errOut)
		}
	}
	return p
}

// waitServer waits for a server startServer started and requires exit 0.
func waitServer(t *testing.T, ctx context.Context, p *GuestProcess, who string) {
	t.Helper()
	out, errOut, code, err := p.Wait(ctx)
	if err != nil || code != 0 {
		t.Fatalf("%s: exit %d (%v):\n%s%s", who, code, err, out, errOut)
	}
}

// mustRunCtx runs cmd in vm's guest within ctx and returns its output,
// failing the test on a non-zero exit.
func mustRunCtx(t *testing.T, ctx context.Context, vm *VM, cmd string) string {
	t.Helper()
	out, errOut, code, err := vm.Run(ctx, cmd)
	if err != nil || code != 0 {
		t.Fatalf("%s: exit %d (%v):\n%s%s", cmd, code, err, out, errOut)
	}
	return out + errOut
}

// retryGuest runs cmd in vm's guest, again while it fails, for at most 50
// tries 0.2s apart: a client started before the other guest's server
// listens is refused (rdma_cm's REJ), and neither rping's nor perftest's
// client retries. It returns the successful run's output.
func retryGuest(t *testing.T, ctx context.Context, vm *VM, cmd string) string {
	t.Helper()
	return mustRunCtx(t, ctx, vm, fmt.Sprintf("for i in $(seq 50); do %s && exit 0; sleep 0.2; done; exit 1", cmd))
}

// guestClient runs cmd in client's guest as retryGuest does, each try
// stamped with the guest's clock. If it fails or ctx ends first it
// fails the test with what the tries printed so far, what srv (running
// in server's guest) printed, and both guests' view of the segment and
// of ndkxdp (guestDiagnostics).
func guestClient(t *testing.T, ctx context.Context, client *VM, cmd string, srv *GuestProcess, server *VM) string {
	t.Helper()
	p, err := client.Start(ctx, fmt.Sprintf("for i in $(seq 50); do echo \"try $i at $(date +%%T.%%N)\" >&2; %s && exit 0; echo \"try $i: exit $? at $(date +%%T.%%N)\" >&2; sleep 0.2; done; exit 1", cmd))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	out, errOut, code, err := p.Wait(ctx)
	if err == nil && code == 0 {
		t.Logf("%s:\n%s", cmd, errOut)
		return out + errOut
	}
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err != nil {
		out, errOut, _ = p.Output(dctx)
	}
	sOut, sErr, _ := srv.Output(dctx)
	t.Fatalf("%s: exit %d (%v):\n%s%s\nthe server's output so far:\n%s%s\n%s", cmd, code, err, out, errOut, sOut, sErr, guestDiagnostics(dctx, server, client))
	return ""
}

// sendQueuesStalled reports whether qemu left a send queue of dh, whose
// daemon has bound its queues, stalled (VM.SendQueueStalls, with peer on
// the other end), and logs what it measured. It fails the test when the
// guests' boot number boot was the last bootStallRetries allows, or
// when the check itself could not run.
func sendQueuesStalled(t *testing.T, dh *VM, peer netip.Addr, boot int) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stallProbeTimeout)
	defer cancel()
	stalled, detail, err := dh.SendQueueStalls(ctx, peer)
	if err != nil {
		t.Fatalf("check the daemon host's send queues: %v", err)
	}
	if len(stalled) == 0 {
		t.Logf("the daemon host's send queues after the daemon bound its queues (boot %d):\n%s", boot, detail)
		return false
	}
	q, _ := dh.VirtioQueues(ctx)
	if boot >= bootStallRetries {
		t.Fatalf("qemu left send queue(s) %v of the daemon host stalled after the zero-copy bind, in %d boots out of %d:\n%s%s", stalled, boot, boot, detail, q)
	}
	t.Logf("qemu left send queue(s) %v of the daemon host stalled after the zero-copy bind (boot %d of at most %d; qemu 7.2 after a queue reset, doc.go): booting the guests anew:\n%s%s", stalled, boot, bootStallRetries, detail, q)
	return true
}

// firstConnectionMute runs one rping from the daemon's client to rxe's
// server, and reports whether it met a mute link: the daemon's frames
// reached neither rxe nor anyone (no answer to any of its REQs). In CI
// the probe of sendQueuesStalled passed and then every frame of the
// daemon's zero-copy queues was lost although qemu took them from the
// send queue (its used index up to the driver's), while frames of the
// guest's stack went through: that, on a boot other than the last,
// counts as the device's fault too, with what each side counted in the
// log, and the guests boot anew. Any other failure fails the test.
func firstConnectionMute(t *testing.T, dh, rxe, second *VM, boot int) bool {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	srv := startServer(t, ctx, rxe, fmt.Sprintf("rping -s -a %s -S 64 -C 1", rxeGuestIPv4), rpingPort)
	// What the daemon host's guest wrote to its tap, for the log if the
	// link is mute: whether its frames left the guest, and as what.
	c, cerr := dh.Host.StartCapture()
	if cerr != nil {
		t.Fatalf("capture on the daemon host's tap: %v", cerr)
	}
	out, errOut, code, err := dh.Run(ctx, fmt.Sprintf("ndkxdp rping -c -a %s -S 64 -C 1 -V -daemon %s -timeout 40s", rxeGuestIPv4, daemonSocket))
	frames := c.Stop()
	if err == nil && code == 0 {
		waitServer(t, ctx, srv, "rxe's rping server")
		return false
	}
	_ = srv.Kill()
	msg := fmt.Sprintf("the daemon's first rping to rxe: exit %d (%v):\n%s%s\n%s", code, err, out, errOut, tapFrames(frames, 12))
	if err != nil || !mutePeer(out+errOut) || boot >= bootStallRetries {
		t.Fatalf("%s\n%s", msg, guestDiagnostics(context.Background(), dh, rxe, second))
	}
	t.Logf("the daemon host's link was mute on the first connection (boot %d of at most %d): booting the guests anew:\n%s\n%s",
		boot, bootStallRetries, msg, guestDiagnostics(context.Background(), dh, rxe, second))
	return true
}

// tapFrames describes the frames a guest wrote to its tap: how many,
// and the last n of them with their addresses (RoCEv2 ones decoded, with
// the ICRC checked; any other by its Ethernet header and first bytes).
func tapFrames(fs []Frame, n int) string {
	var from []Frame
	for _, f := range fs {
		if !f.Outgoing {
			from = append(from, f)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the guest wrote %d frames to its tap during the run (%d went the other way)", len(from), len(fs)-len(from))
	if len(from) > n {
		from = from[len(from)-n:]
	}
	if len(from) > 0 {
		fmt.Fprintf(&b, "; the last %d:", len(from))
	}
	b.WriteString("\n")
	var pkt rocev2.Packet
	for _, f := range from {
		if len(f.Data) < 14 {
			fmt.Fprintf(&b, "  runt of %d bytes: % x\n", len(f.Data), f.Data)
			continue
		}
		d := f.Data
		fmt.Fprintf(&b, "  %v -> %v type %#04x len %d: ", net.HardwareAddr(d[6:12]), net.HardwareAddr(d[0:6]), uint16(d[12])<<8|uint16(d[13]), len(d))
		if err := rocev2.Parse(d, &pkt); err == nil {
			fmt.Fprintf(&b, "%v -> %v %v QP %#x PSN %#06x\n", pkt.IP.Src, pkt.IP.Dst, pkt.BTH.Opcode, pkt.BTH.DestQP, uint32(pkt.BTH.PSN))
		} else {
			fmt.Fprintf(&b, "%v; % x\n", err, d[14:min(len(d), 14+48)])
		}
	}
	return b.String()
}

// mutePeer tells, from an ndkxdp client's output, a connection that got
// no answer at all (rdma_cm's REQ retried until the end, or the run's
// -timeout during connect) from any other failure.
func mutePeer(out string) bool {
	return strings.Contains(out, "no answer after") || strings.Contains(out, "during connect (ETIMEDOUT)")
}

// guestDiagnostics collects, from each of vms, what says why a connection
// between them stalls: the kernel's log, links, neighbours and the
// NIC's per-queue counters (ethtool -S: what the driver posted to each
// send queue, from the stack and from AF_XDP, and how often it kicked
// the device), qemu's view of the same queues (VirtioQueues), and the
// daemon's counters, QPs and journal where one runs.
func guestDiagnostics(ctx context.Context, vms ...*VM) string {
	const cmd = "set -x; ip -s link show eth0; ip neigh; ethtool -S eth0 | grep -v ': 0$'; dmesg | tail -n 40; " +
		"if systemctl is-active -q " + daemonUnit + " 2>/dev/null; then ndkxdp stats -dev eth0; ndkxdp qp -dev eth0; journalctl -u " + daemonUnit + " --no-pager | tail -n 40; fi; " +
		"ps -eo pid,stat,etime,time,args | grep -v ']$'"
	var b strings.Builder
	for _, vm := range vms {
		out, errOut, code, err := vm.Run(ctx, cmd)
		fmt.Fprintf(&b, "=== guest %v (exit %d, %v)\n%s%s", vm.Guest.IPv4, code, err, out, errOut)
		q, err := vm.VirtioQueues(ctx)
		fmt.Fprintf(&b, "=== qemu's virtqueues of guest %v (%v)\n%s", vm.Guest.IPv4, err, q)
		fmt.Fprintf(&b, "=== the host's side of guest %v (namespace %s)\n%s", vm.Guest.IPv4, vm.Host.NS, hostLinkCounters(vm.Host))
	}
	return b.String()
}

// hostLinkCounters lists each link of h's namespace with its counters:
// the tap's received frames are those qemu wrote from the guest's send
// queues, the bridge's and veths' where they went on.
func hostLinkCounters(h *Host) string {
	var b strings.Builder
	err := h.Do(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			a := l.Attrs()
			if s := a.Statistics; s != nil {
				fmt.Fprintf(&b, "%s (%s, master %d): rx packets %d dropped %d errors %d, tx packets %d dropped %d errors %d\n",
					a.Name, l.Type(), a.MasterIndex, s.RxPackets, s.RxDropped, s.RxErrors, s.TxPackets, s.TxDropped, s.TxErrors)
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(&b, "links: %v\n", err)
	}
	return b.String()
}
