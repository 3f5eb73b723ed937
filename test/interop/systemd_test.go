package interop

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rping"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The daemon's files are staged here in the guest; the test installs them
// as the README tells operators to.
const (
	stageDir     = "/root/ndkxdp-install"
	daemonSocket = "/run/ndkxdp/eth0.sock"
	daemonUnit   = "ndkxdp@eth0"
)

// operatorInstall is the README's "run it from systemd" list, from the
// staged copies.
var operatorInstall = strings.Join([]string{
	"install -m 0755 " + stageDir + "/ndkxdp /usr/local/bin/",
	"install -m 0644 " + stageDir + "/packaging/ndkxdp@.service /etc/systemd/system/",
	"install -D -m 0644 " + stageDir + "/packaging/ndkxdp.json.example /etc/ndkxdp/eth0.json",
	"groupadd --system rdma",
	"systemctl enable --now " + daemonUnit,
}, " && ")

// daemonFiles builds ndkxdp as a static binary and stages it with the
// unit and the example config.
func daemonFiles(t *testing.T) []File {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ndkxdp")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/ndkxdp/ndkxdp/cmd/ndkxdp")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/ndkxdp: %v\n%s", err, out)
	}
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return []File{
		{Path: stageDir + "/ndkxdp", Mode: 0o755, Data: read(bin)},
		{Path: stageDir + "/packaging/ndkxdp@.service", Mode: 0o644, Data: read("../../packaging/ndkxdp@.service")},
		{Path: stageDir + "/packaging/ndkxdp.json.example", Mode: 0o644, Data: read("../../packaging/ndkxdp.json.example")},
	}
}

// TestDaemonUnderSystemdOnVirtio runs the daemon as operators do, under
// systemd on a multi-queue virtio_net NIC in the daemon host VM: the
// README's install steps, `systemctl enable --now`, the operator's
// listings, verified RDMA traffic from an ndkxdp adapter on the host side
// of the tap to clients of the daemon, served on both queues, and a
// `systemctl stop` that disconnects a live connection (a DREQ reaches the
// host) and exits 0 under the unit's sandbox.
func TestDaemonUnderSystemdOnVirtio(t *testing.T) {
	requireVMTools(t)
	img, err := EnsureImage(ctxFor(t, 20*time.Minute), ImageConfig{Systemd: true})
	if err != nil {
		t.Fatal(err)
	}
	runDaemonHost(t, img, nil)
}

// TestDaemonOnBackportsKernel is TestDaemonUnderSystemdOnVirtio on Debian
// 13's backports kernel, whose virtio_net offers AF_XDP zero copy where
// 6.12's does not: on a NIC that meets its conditions every queue must
// bind zero-copy, and the daemon's traffic runs over zero-copy sockets.
func TestDaemonOnBackportsKernel(t *testing.T) {
	requireVMTools(t)
	img, err := EnsureImage(ctxFor(t, 20*time.Minute), ImageConfig{Systemd: true, Sources: BackportsSources, Packages: BackportsSystemdPackages()})
	if err != nil {
		t.Fatal(err)
	}
	runDaemonHost(t, img, inPlaceSends)
}

// runDaemonHost installs and drives the daemon in a daemon host VM of
// img (TestDaemonUnderSystemdOnVirtio); then, with the daemon stopped,
// after runs if given.
func runDaemonHost(t *testing.T, img *Image, after func(*testing.T, *VM, *ndkverbs.Device)) {
	files := daemonFiles(t)
	if after != nil {
		files = append(files, inPlaceSendFile(t))
	}
	t.Logf("daemon host: Debian %s, kernel %s, image built in %.0fs (built by this run: %v)", img.Suite, img.KernelRelease, img.BuildSeconds, img.Built)
	// A fresh guest where qemu left a send queue stalled after the
	// daemon's zero-copy bind (stall.go).
	// The same where the first connection finds the guest's link mute
	// (no frame of the daemon's reaches the host: qemu's stall after the
	// zero-copy bind, come after the probe).
	var vm *VM
	var dev *ndkverbs.Device
	start := time.Now()
	for boot := 1; ; boot++ {
		vm = bootVM(t, 4*time.Minute, Config{Image: img, Queues: 2, CPUs: 2, MemoryMB: 1024, Files: files, ZeroCopyNIC: true})
		mustRun(t, vm, operatorInstall)
		waitDaemon(t, vm)
		if !sendQueuesStalled(t, vm, vm.Host.IPv4, boot) {
			if err := vm.Host.Do(func() (err error) {
				dev, err = ndkverbs.Open(vm.Host.Tap, ndk.Options{Queues: vm.Host.Queues})
				return err
			}); err != nil {
				t.Fatalf("attach ndkxdp to %s: %v", vm.Host.Tap, err)
			}
			start = time.Now()
			pings, err := guestRpingErr(t, vm, dev, 50)
			if err == nil {
				break
			}
			if pings > 0 || !strings.Contains(err.Error(), "no answer") || boot >= bootStallRetries {
				t.Fatal(err)
			}
			t.Logf("the daemon host's link was mute on the first connection (boot %d of at most %d; qemu 7.2's stall after a queue reset, doc.go): booting anew: %v\n%s",
				boot, bootStallRetries, err, guestDiagnostics(context.Background(), vm))
			dev.Close()
		}
		if err := vm.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	t.Cleanup(func() { dev.Close() })

	var info daemon.Info
	guestJSON(t, vm, "ndkxdp info -j -dev eth0", &info)
	checkInfo(t, vm, &info)
	checkZeroCopy(t, vm, &info)
	var st daemon.Status
	guestJSON(t, vm, "ndkxdp status -j -dev eth0", &st)
	if pid := strings.TrimSpace(mustRun(t, vm, "systemctl show -p MainPID --value "+daemonUnit)); st.Interface != "eth0" || fmt.Sprint(st.PID) != pid {
		t.Fatalf("status says interface %q pid %d; systemd's main PID is %s", st.Interface, st.PID, pid)
	}
	t.Logf("kernel's words on XDP (dmesg):\n%s", mustRun(t, vm, "dmesg | grep -i -E 'xdp|xsk' || true"))

	guestWriteBW(t, vm, dev, 4096, 2000)
	// Queue 0 carries the CM's datagrams both ways, and the daemon's QPs,
	// one per server, go to its engines in turn; but the host's QPs do
	// too, and a REQ refused before the guest's server listened cost one:
	// both connections may have ended up on one host queue. Another
	// connection then goes to the next.
	for round := 1; !queuesServed(t, vm, round == 4); round++ {
		t.Logf("round %d: a queue has not received or sent yet; another rping", round)
		guestRping(t, vm, dev, 10)
	}
	t.Logf("traffic through the daemon took %v", time.Since(start).Round(time.Millisecond))
	checkNoInPlace(t, vm, &info)

	stopWithConnection(t, vm, dev)
	if info.Queues[0].Bind == "copy" {
		probeZeroCopy(t, vm)
	}
	if after != nil {
		after(t, vm, dev)
	}
}

// inPlaceSendFile builds test/interop/inplacesend, static, staged beside
// the daemon's files.
func inPlaceSendFile(t *testing.T) File {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "inplacesend")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/ndkxdp/ndkxdp/test/interop/inplacesend")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./test/interop/inplacesend: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return File{Path: stageDir + "/inplacesend", Mode: 0o755, Data: b}
}

// inPlacePort is where the host listens for inplacesend.
const inPlacePort = 7175

// inPlaceSends: with the daemon stopped, ndkxdp attached in process to the
// guest's NIC (inplacesend, which serves its adapter as the daemon does)
// SENDs and WRITEs whole AllocBuffer buffers of one packet each to the
// host. Every queue still binds zero copy without multi-buffer
// (xdp_zc_max_segs 1), and the queues' tx_in_place_bytes, as `ndkxdp
// stats` reports them, add up to exactly the bytes posted: each packet
// left as one descriptor over its buffer, headers in the pool's headroom,
// no byte copied. The host receives every byte intact (its engine checked
// each ICRC).
func inPlaceSends(t *testing.T, vm *VM, dev *ndkverbs.Device) {
	t.Helper()
	const size, count = 1000, 20
	ctx := ctxFor(t, 3*time.Minute)
	a, pd := dev.Adapter, dev.PD
	sink := make([]byte, size*count)
	recv := make([]byte, size*count)
	sinkMR, err := pd.RegisterMR(sink, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer sinkMR.Deregister()
	recvMR, err := pd.RegisterMR(recv, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer recvMR.Deregister()
	cq, err := a.CreateCQ(2*count, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	qp, err := pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: count, InitiatorQueueDepth: 4,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	for i := range count {
		sge, _ := recvMR.SGE(i*size, size)
		if err := qp.Receive(nil, []ndk.SGE{sge}); err != nil {
			t.Fatal(err)
		}
	}
	accepted := make(chan error, 1)
	l, err := a.CreateListener(func(c *ndk.Connector) {
		var pdata [12]byte
		binary.BigEndian.PutUint64(pdata[:8], sinkMR.Addr())
		binary.BigEndian.PutUint32(pdata[8:], sinkMR.RemoteToken())
		accepted <- c.Accept(ctx, qp, 0, 0, pdata[:], nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Listen(netip.AddrPortFrom(a.LocalAddress(), inPlacePort)); err != nil {
		t.Fatal(err)
	}
	cmd := fmt.Sprintf("%s/inplacesend -dev eth0 -queues %d -peer %s -size %d -count %d",
		stageDir, vm.Host.Queues, netip.AddrPortFrom(a.LocalAddress(), inPlacePort), size, count)
	out, errOut, code, err := vm.Run(ctx, cmd)
	if err != nil || code != 0 {
		t.Fatalf("%s: exit %d (%v)\nstdout: %s\nstderr: %s", cmd, code, err, out, errOut)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("host accept: %v", err)
	}
	var rep struct {
		Posted uint64
		Ops    int
		Info   daemon.Info
		Stats  daemon.Stats
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inplacesend's report: %v\n%s", err, out)
	}
	// What the host got: every SEND, every WRITE, the bytes the guest
	// wrote into each buffer.
	var r [1]ndk.ResultEx
	for i := range count {
		if cq.GetResultsEx(r[:]) == 0 {
			t.Fatalf("host: %d receives of %d completed", i, count)
		}
		if r[0].Status != ndk.StatusSuccess || r[0].BytesTransferred != size {
			t.Fatalf("host receive %d: %+v", i, r[0])
		}
	}
	a.Stats() // orders our reads with the engine that placed the bytes
	for i := range count {
		for j := range size {
			if want := byte(i*31 + j*7); recv[i*size+j] != want || sink[i*size+j] != want {
				t.Fatalf("buffer %d byte %d: received %#x, written %#x, want %#x", i, j, recv[i*size+j], sink[i*size+j], want)
			}
		}
	}
	var inPlace, frames, rounds uint64
	for _, q := range rep.Info.Queues {
		t.Logf("in process: queue %d %s (multi-buffer %v): %s", q.Queue, q.Bind, q.MultiBuffer, q.BindReason)
		if q.Bind != "zero-copy" || q.MultiBuffer {
			t.Errorf("in process: queue %d bound %s, multi-buffer %v; want zero-copy without (xdp_zc_max_segs %d)", q.Queue, q.Bind, q.MultiBuffer, rep.Info.XDPZCMaxSegs)
		}
	}
	for _, e := range rep.Stats.Engines {
		t.Logf("in process: queue %d: frames out %d, retransmission rounds %d; tx_frames %d, %d with %d bytes sent in place",
			e.Queue, e.Engine["frames_out"], e.Engine["retransmits"], e.Socket.TxFrames, e.Socket.TxInPlaceFrames, e.Socket.TxInPlaceBytes)
		inPlace += e.Socket.TxInPlaceBytes
		frames += e.Socket.TxInPlaceFrames
		rounds += e.Engine["retransmits"]
	}
	// A retransmitted packet leaves in place again (its buffer's
	// headroom is free once the first frame completed), so only without
	// retransmissions are the counts exactly the posts.
	switch {
	case rep.Posted != 2*size*count || rep.Ops != 2*count:
		t.Fatalf("inplacesend posted %d bytes in %d requests, want %d in %d", rep.Posted, rep.Ops, 2*size*count, 2*count)
	case rounds == 0 && (inPlace != rep.Posted || frames != uint64(rep.Ops)):
		t.Fatalf("posted %d bytes in %d SENDs and WRITEs from AllocBuffer memory; sent in place %d bytes in %d frames: want all of them", rep.Posted, rep.Ops, inPlace, frames)
	case inPlace < rep.Posted || frames < uint64(rep.Ops):
		t.Fatalf("posted %d bytes in %d SENDs and WRITEs from AllocBuffer memory; sent in place %d bytes in %d frames (%d retransmission rounds): want at least all of them", rep.Posted, rep.Ops, inPlace, frames, rounds)
	}
	t.Logf("in process on zero-copy virtio_net (xdp_zc_max_segs %d): %d SENDs and WRITEs of whole %d-byte AllocBuffer buffers, %d bytes, all sent in place, one descriptor each",
		rep.Info.XDPZCMaxSegs, rep.Ops, size, inPlace)
}

// waitDaemon waits until the unit is active and its daemon answers on
// its socket.
func waitDaemon(t *testing.T, vm *VM) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	cmd := "systemctl is-active " + daemonUnit + " && ndkxdp status -dev eth0 >/dev/null"
	for {
		out, errOut, code, err := vm.Run(ctx, cmd)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if code == 0 {
			return
		}
		select {
		case <-ctx.Done():
			j, _, _, _ := vm.Run(ctxFor(t, 30*time.Second), "journalctl -u "+daemonUnit+" --no-pager -o cat")
			t.Fatalf("%s never answered (last: %s %s); journal:\n%s", daemonUnit, out, errOut, j)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// guestJSON runs cmd in the guest and decodes its JSON output into v.
func guestJSON(t *testing.T, vm *VM, cmd string, v any) {
	t.Helper()
	out := mustRun(t, vm, cmd)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
}

// checkInfo checks what `ndkxdp info` says of the NIC: virtio_net, XDP in
// the driver, an AF_XDP socket on each of the NIC's queues. Whether a
// queue binds zero-copy is the kernel's to say; the test records it.
func checkInfo(t *testing.T, vm *VM, info *daemon.Info) {
	t.Helper()
	if info.Driver != "virtio_net" || info.XDPMode != "driver" {
		t.Errorf("info: driver %q, XDP mode %q; want virtio_net, driver", info.Driver, info.XDPMode)
	}
	if len(info.Queues) != vm.Host.Queues {
		t.Fatalf("info: %d queues bound, want %d: %+v", len(info.Queues), vm.Host.Queues, info.Queues)
	}
	var binds []string
	for _, q := range info.Queues {
		if q.Bind != "zero-copy" && q.Bind != "copy" {
			t.Errorf("queue %d: bind %q, want zero-copy or copy", q.Queue, q.Bind)
		}
		binds = append(binds, fmt.Sprintf("queue %d %s", q.Queue, q.Bind))
	}
	if !info.Served {
		t.Error("info: not served")
	}
	t.Logf("info: driver %s %s, XDP mode %s, AF_XDP %s, MTU %d (path MTU %d), kernel %s",
		info.Driver, info.DriverVersion, info.XDPMode, strings.Join(binds, ", "), info.MTU, info.ActivePathMTU, info.Versions.Kernel)
}

// guestRping runs `ndkxdp rping -s` on the daemon in the guest and the
// host's rping client with every pong verified.
func guestRping(t *testing.T, vm *VM, dev *ndkverbs.Device, count int) {
	t.Helper()
	if _, err := guestRpingErr(t, vm, dev, count); err != nil {
		t.Fatal(err)
	}
}

// guestRpingErr is guestRping returning its failure and the pings the
// host's client verified.
func guestRpingErr(t *testing.T, vm *VM, dev *ndkverbs.Device, count int) (int, error) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	srv, err := vm.Start(ctx, fmt.Sprintf("ndkxdp rping -s -daemon %s -p %d -C %d -timeout 90s", daemonSocket, rpingPort, count))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	cfg := rping.Config{Count: count, Validate: true}
	var st rping.Stats
	err = retryRejected(ctx, func() (err error) {
		st, err = rping.RunClient(ctx, cfg, &ndkverbs.Connector{Dev: dev, Peer: GuestIPv4}, rpingPort)
		return err
	})
	out, errOut, code, werr := srv.Wait(ctx)
	if err != nil || st.Pings != count || werr != nil || code != 0 {
		return st.Pings, fmt.Errorf("rping: host client %d verified pings of %d (%v); guest server exit %d (%v):\n%s%s", st.Pings, count, err, code, werr, out, errOut)
	}
	t.Logf("rping: %d pings, each pong verified, host client <-> guest daemon's client", st.Pings)
	return st.Pings, nil
}

// retryRejected runs connect until it is not refused for want of a
// listener (REJ reason 8: the guest's server is not listening yet), at
// most 100 times.
func retryRejected(ctx context.Context, connect func() error) error {
	for range 100 {
		err := connect()
		var rej *verbs.RejectError
		if !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidServiceID {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("rejected 100 times: nobody listens")
}

// guestWriteBW runs `ndkxdp perf write_bw` as the server in the guest and
// the host's perftest client.
func guestWriteBW(t *testing.T, vm *VM, dev *ndkverbs.Device, size, iters int) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	srv, err := vm.Start(ctx, fmt.Sprintf("ndkxdp perf write_bw -daemon %s -p %d -s %d -n %d -timeout 90s", daemonSocket, perfPort, size, iters))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	prm := perftest.Params{Verb: perftest.Write, Kind: perftest.BW, Size: size, Iterations: iters, Port: perfPort,
		ConnectRetry: perftest.Retry{Attempts: 100, Interval: 100 * time.Millisecond}}
	var ours bytes.Buffer
	// In the host namespace: a client that may turn to TCP (perftest
	// without -R) dials from there.
	err = vm.Host.Do(func() error {
		_, err := perftest.RunClient(ctx, prm, &ndkverbs.Connector{Dev: dev, Peer: GuestIPv4}, &ours)
		return err
	})
	out, errOut, code, werr := srv.Wait(ctx)
	if err != nil || werr != nil || code != 0 {
		t.Fatalf("write_bw: host client: %v\n%s\nguest server exit %d (%v):\n%s%s", err, ours.String(), code, werr, out, errOut)
	}
	t.Logf("write_bw %d x %d B: host client:\n%sguest server:\n%s", iters, size, reportLines(ours.String()), reportLines(out))
}

// queuesServed reports whether, in the daemon's own counters, the engine
// of every queue received and sent frames; last makes a queue that did
// not a failure.
func queuesServed(t *testing.T, vm *VM, last bool) bool {
	t.Helper()
	var stats daemon.Stats
	guestJSON(t, vm, "ndkxdp stats -j -dev eth0", &stats)
	if len(stats.Engines) != vm.Host.Queues {
		t.Fatalf("stats: %d engines, want %d", len(stats.Engines), vm.Host.Queues)
	}
	served := true
	for _, e := range stats.Engines {
		c := e.Engine
		t.Logf("queue %d: frames in %d out %d, forwarded in %d out %d; socket rx_dropped %d rx_ring_full %d fill_ring_empty %d tx_invalid %d; tx_frames %d, %d with %d bytes sent in place",
			e.Queue, c["frames_in"], c["frames_out"], c["forwarded_in"], c["forwarded_out"],
			e.Socket.RxDropped, e.Socket.RxRingFull, e.Socket.FillRingEmpty, e.Socket.TxInvalid,
			e.Socket.TxFrames, e.Socket.TxInPlaceFrames, e.Socket.TxInPlaceBytes)
		if e.Socket.TxFrames == 0 && c["frames_out"] > 0 {
			t.Errorf("queue %d: the engine sent %d frames, the socket's tx_frames says 0", e.Queue, c["frames_out"])
		}
		if c["frames_in"] == 0 || c["frames_out"] == 0 {
			served = false
			if last {
				t.Fatalf("queue %d: frames in %d, out %d: want both served", e.Queue, c["frames_in"], c["frames_out"])
			}
		}
	}
	return served
}

// checkNoInPlace: the daemon's ports send a payload in place only from
// the daemon's own UMEM (one descriptor over a whole AllocBuffer buffer's
// headroom on any socket, chains only with multi-buffer), and a daemon
// client's memory, its AllocBuffer pool included, is a shared-memory
// arena outside it: traffic through the daemon is copied, whatever the
// socket. The zero-copy queues, which the backports kernel's
// xdp_zc_max_segs of 1 leaves without multi-buffer, must say so.
func checkNoInPlace(t *testing.T, vm *VM, info *daemon.Info) {
	t.Helper()
	if info.XDPZCMaxSegs != 1 {
		return
	}
	var stats daemon.Stats
	guestJSON(t, vm, "ndkxdp stats -j -dev eth0", &stats)
	for _, e := range stats.Engines {
		if e.Queue < len(info.Queues) && info.Queues[e.Queue].Bind == "zero-copy" && (e.Socket.TxInPlaceFrames != 0 || e.Socket.TxInPlaceBytes != 0) {
			t.Errorf("queue %d: zero copy, only daemon clients' memory (never in the UMEM), yet %d frames with %d bytes sent in place", e.Queue, e.Socket.TxInPlaceFrames, e.Socket.TxInPlaceBytes)
		}
	}
}

// stopWithConnection stops the unit while the host's rping client is
// connected to a client of the daemon: the daemon disconnects it (the
// host receives a DREQ), exits 0, detaches and unpins, and logged nothing
// the sandbox refused.
func stopWithConnection(t *testing.T, vm *VM, dev *ndkverbs.Device) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	srv, err := vm.Start(ctx, fmt.Sprintf("ndkxdp rping -s -daemon %s -p %d -timeout 90s", daemonSocket, rpingPort))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	dreqs := dev.Adapter.CMStats().Received[rocev2.AttrDREQ]
	var pings rping.Stats
	done := make(chan error, 1)
	go func() {
		done <- retryRejected(ctx, func() (err error) {
			pings, err = rping.RunClient(ctx, rping.Config{Validate: true}, &ndkverbs.Connector{Dev: dev, Peer: GuestIPv4}, rpingPort)
			return err
		})
	}()
	for {
		var st daemon.Status
		guestJSON(t, vm, "ndkxdp status -j -dev eth0", &st)
		if st.Connections > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("rping client ended before the stop: %v", err)
		case <-ctx.Done():
			t.Fatal("no connection at the daemon")
		case <-time.After(200 * time.Millisecond):
		}
	}
	start := time.Now()
	mustRun(t, vm, "systemctl stop "+daemonUnit)
	stopped := time.Since(start)
	var cerr error
	select {
	case cerr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the host's rping client still runs 30 s after the daemon stopped")
	}
	if got := dev.Adapter.CMStats().Received[rocev2.AttrDREQ]; got <= dreqs {
		t.Errorf("host received %d DREQs during the stop, want at least 1 (client ended: %v)", got-dreqs, cerr)
	}
	show := mustRun(t, vm, "systemctl show -p ActiveState -p Result -p ExecMainCode -p ExecMainStatus "+daemonUnit)
	for _, want := range []string{"ActiveState=inactive", "Result=success", "ExecMainStatus=0"} {
		if !strings.Contains(show, want+"\n") {
			t.Errorf("after systemctl stop: want %s in\n%s", want, show)
		}
	}
	journal := mustRun(t, vm, "journalctl -u "+daemonUnit+" --no-pager -o cat")
	for _, want := range []string{`"msg":"stopping: disconnecting every client's connections","clients":1`, `"msg":"stopped: detached and unpinned"`} {
		if !strings.Contains(journal, want) {
			t.Errorf("journal lacks %s:\n%s", want, journal)
		}
	}
	for _, refused := range []string{"EPERM", "EACCES", "not permitted", "permission denied", "ERROR", "WARN"} {
		if strings.Contains(journal, refused) {
			t.Errorf("journal has %q: something was refused under the unit's sandbox:\n%s", refused, journal)
		}
	}
	if out := mustRun(t, vm, "ip link show eth0"); strings.Contains(out, "xdp") {
		t.Errorf("after the stop eth0 still has XDP:\n%s", out)
	}
	// Pins live under the namespace's directory: nothing may be left
	// below the pin root.
	if out := mustRun(t, vm, "find /sys/fs/bpf/ndkxdp -mindepth 1 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Errorf("after the stop pins are left:\n%s", out)
	}
	t.Logf("systemctl stop took %v with 1 connection; the host's client ended after %d pings: %v; unit: %s",
		stopped.Round(time.Millisecond), pings.Pings, cerr, strings.ReplaceAll(strings.TrimSpace(show), "\n", " "))
}

// Virtio feature bits (virtio_config.h, virtio_net.h) that Linux 6.12's
// virtio_net needs of a device for AF_XDP zero copy.
var zeroCopyVirtioFeatures = []struct {
	bit  int
	name string
}{
	{15, "VIRTIO_NET_F_MRG_RXBUF"},
	{32, "VIRTIO_F_VERSION_1"},
	{33, "VIRTIO_F_ACCESS_PLATFORM"},
	{40, "VIRTIO_F_RING_RESET"},
}

// checkZeroCopy: the NIC negotiated every virtio feature zero copy needs
// (Config.ZeroCopyNIC), so whether the queues bind zero-copy is the
// kernel's call. Where the device's XDP features offer xsk-zerocopy,
// every queue must have bound zero-copy; where they do not (6.12's
// virtio_net never offers it), every queue bound copy mode and says that
// the kernel refused the zero-copy bind with EOPNOTSUPP.
func checkZeroCopy(t *testing.T, vm *VM, info *daemon.Info) {
	t.Helper()
	bits := strings.TrimSpace(mustRun(t, vm, "cat /sys/class/net/eth0/device/features"))
	var have []string
	for _, f := range zeroCopyVirtioFeatures {
		if f.bit >= len(bits) || bits[f.bit] != '1' {
			t.Errorf("the NIC did not negotiate %s (bit %d): features %s", f.name, f.bit, bits)
			continue
		}
		have = append(have, f.name)
	}
	t.Logf("zero copy: the NIC negotiated %s; the device's XDP features: %s", strings.Join(have, ", "), info.XDPFeatures)
	if strings.Contains(info.XDPFeatures, "xsk-zerocopy") {
		t.Logf("zero copy: the device's xdp_zc_max_segs: %d", info.XDPZCMaxSegs)
		for _, q := range info.Queues {
			if q.Bind != "zero-copy" {
				t.Errorf("queue %d bound %s although the device offers xsk-zerocopy: %s", q.Queue, q.Bind, q.BindReason)
			}
			t.Logf("queue %d: %s (multi-buffer %v): %s", q.Queue, q.Bind, q.MultiBuffer, q.BindReason)
		}
		switch {
		case info.XDPZCMaxSegs == 0:
			t.Errorf("the device offers xsk-zerocopy, but info shows no xdp_zc_max_segs (the kernel sends it with xsk-zerocopy)")
		case info.XDPZCMaxSegs == 1:
			// The kernel's limit: xp_assign_dev refuses XDP_USE_SG with
			// XDP_ZEROCOPY, so the zero-copy sockets have no
			// multi-buffer and send in place only whole AllocBuffer
			// buffers as one descriptor, and info says why
			// (checkNoInPlace checks the counters after traffic).
			for _, q := range info.Queues {
				if q.Bind == "zero-copy" && (q.MultiBuffer || !strings.Contains(q.BindReason, "xdp_zc_max_segs 1")) {
					t.Errorf("queue %d: zero copy, multi-buffer %v, reason %q; with xdp_zc_max_segs 1 want no multi-buffer and the reason naming it", q.Queue, q.MultiBuffer, q.BindReason)
				}
			}
		default:
			t.Errorf("xdp_zc_max_segs %d: zero copy could have multi-buffer here, and no test sends in place from a zero-copy socket on this kernel yet", info.XDPZCMaxSegs)
		}
		return
	}
	if !strings.Contains(info.XDPFeatures, "basic") {
		t.Errorf("XDP features %q: the kernel did not say what the device offers", info.XDPFeatures)
	}
	for _, q := range info.Queues {
		// The first socket asks for zero-copy; the others share its
		// UMEM and take its mode.
		refused := strings.Contains(q.BindReason, "operation not supported") || q.Queue > 0 && strings.Contains(q.BindReason, "shared UMEM")
		if q.Bind != "copy" || !refused || !strings.Contains(q.BindReason, "lack xsk-zerocopy") {
			t.Errorf("queue %d: %s (%s); without xsk-zerocopy want copy after EOPNOTSUPP", q.Queue, q.Bind, q.BindReason)
		}
		t.Logf("queue %d: %s: %s", q.Queue, q.Bind, q.BindReason)
	}
}

// probeZeroCopy asks for a zero-copy bind the daemon did not get and
// records the kernel's refusal.
func probeZeroCopy(t *testing.T, vm *VM) {
	t.Helper()
	out, errOut, code, err := vm.Run(ctxFor(t, time.Minute), "timeout 20 ndkxdp daemon -dev eth0 -zero-copy required -socket /run/ndkxdp-zc.sock")
	if err != nil {
		t.Fatal(err)
	}
	if code == 0 || code == 124 {
		t.Fatalf("the daemon bound copy mode, but -zero-copy required was not refused (exit %d):\n%s%s", code, out, errOut)
	}
	_, refusal, ok := strings.Cut(strings.TrimSpace(errOut), "bind (zero-copy mode requested): ")
	if !ok {
		t.Fatalf("-zero-copy required: exit %d without the bind's error:\n%s", code, errOut)
	}
	t.Logf("zero-copy: the kernel refuses an XDP_ZEROCOPY bind on virtio_net: %s", refusal)
}
