package ops_test

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// TestStatus: ndkxdp status counts this process as the one client, with
// its QP and its connection, and does not count itself.
func TestStatus(t *testing.T) {
	bd := newBed(t)
	var s daemon.Status
	runJSON(t, &s, "status", "-daemon", bd.sock)
	if s.Interface != bd.pair.A.Link || s.PID == 0 || s.Started.IsZero() {
		t.Errorf("status names interface %q, pid %d, start %v", s.Interface, s.PID, s.Started)
	}
	if s.Clients != 1 || s.Served != 1 || s.QPs != 1 || s.Connections != 1 {
		t.Errorf("status: clients %d served %d qps %d connections %d; want 1 1 1 1", s.Clients, s.Served, s.QPs, s.Connections)
	}
	if len(s.Sessions) != 1 || s.Sessions[0].PID != int32(os.Getpid()) || s.Sessions[0].QPs != 1 || s.Sessions[0].Connections != 1 {
		t.Errorf("status sessions %+v; want this process (pid %d) with 1 QP, 1 connection", s.Sessions, os.Getpid())
	}
	if s.Metrics != "" {
		t.Errorf("metrics served at %q without -metrics", s.Metrics)
	}
	if s.Version == "" {
		t.Error("status gives no version")
	}
	out := string(run(t, "status", "-daemon", bd.sock))
	for _, want := range []string{"daemon on " + bd.pair.A.Link + ": running", "version " + s.Version + "\n", "clients 1 (served 1), qps 1, connections 1", "client pid " + itoa(os.Getpid())} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	// No daemon: an error naming the socket.
	cmd := runFail(t, "status", "-daemon", bd.sock+".none")
	if !strings.Contains(cmd, "no daemon answers at "+bd.sock+".none") {
		t.Errorf("status without a daemon says %q", cmd)
	}
}

// TestInfo: ndkxdp info describes the interface as the harness built it
// and the limits the client's adapter got in its hello.
func TestInfo(t *testing.T) {
	bd := newBed(t)
	h := bd.pair.A
	var x daemon.Info
	runJSON(t, &x, "info", "-daemon", bd.sock)
	if x.Interface != h.Link || x.Ifindex != h.Ifindex || x.MAC != h.MAC.String() || x.MTU != h.MTU {
		t.Errorf("info: %s ifindex %d mac %s mtu %d; want %s %d %s %d", x.Interface, x.Ifindex, x.MAC, x.MTU, h.Link, h.Ifindex, h.MAC, h.MTU)
	}
	if x.Driver != "veth" {
		t.Errorf("driver %q, want veth", x.Driver)
	}
	if x.ActivePathMTU != bd.a.PathMTU() || x.MaxPathMTU != 4096 || x.Address != h.IPv4.String() {
		t.Errorf("active_mtu %d max %d address %s; want %d 4096 %s", x.ActivePathMTU, x.MaxPathMTU, x.Address, bd.a.PathMTU(), h.IPv4)
	}
	if x.XDPMode != "driver" && x.XDPMode != "generic" {
		t.Errorf("xdp mode %q", x.XDPMode)
	}
	if len(x.Queues) != max(h.Queues, 1) {
		t.Errorf("%d queues, the interface has %d", len(x.Queues), h.Queues)
	}
	// veth has no zero-copy AF_XDP: the kernel says so in its features,
	// and each queue says the zero-copy bind was refused for it.
	if !strings.Contains(x.XDPFeatures, "basic") || strings.Contains(x.XDPFeatures, "xsk-zerocopy") {
		t.Errorf("xdp features %q, want basic without xsk-zerocopy", x.XDPFeatures)
	}
	// The kernel reports xdp_zc_max_segs only for a device with
	// xsk-zerocopy: veth has none, and info shows none.
	if x.XDPZCMaxSegs != 0 {
		t.Errorf("veth: xdp_zc_max_segs %d, want none reported", x.XDPZCMaxSegs)
	}
	for _, q := range x.Queues {
		if q.Bind != "copy" {
			t.Errorf("queue %d bound %q, want copy", q.Queue, q.Bind)
		}
		if !strings.Contains(q.BindReason, "zero-copy bind refused") || !strings.Contains(q.BindReason, "operation not supported") || !strings.Contains(q.BindReason, "lack xsk-zerocopy") {
			t.Errorf("queue %d: bind reason %q, want the EOPNOTSUPP refusal and the missing xsk-zerocopy", q.Queue, q.BindReason)
		}
	}
	if out := string(run(t, "info", "-daemon", bd.sock)); !strings.Contains(out, "xdp_features:") || !strings.Contains(out, "copy: zero-copy bind refused") {
		t.Errorf("info's text lacks the XDP features or the queues' bind reasons:\n%s", out)
	}
	gids := map[string]string{}
	for _, g := range x.GIDs {
		gids[g.Address] = g.GID
	}
	v4 := netip.AddrFrom16(h.IPv4.As16()).As16()
	if got, want := gids[h.IPv4.String()], hexGID(v4); got != want {
		t.Errorf("GID of %s: %q, want %q (IPv4-mapped)", h.IPv4, got, want)
	}
	if got, want := gids[h.IPv6.String()], hexGID(h.IPv6.As16()); got != want {
		t.Errorf("GID of %s: %q, want %q", h.IPv6, got, want)
	}
	// The daemon's adapter's limits: the client's, where a client through
	// the daemon has the feature at all (it lacks SRQs, windows, FRMRs).
	if !x.Served || x.Limits == nil {
		t.Fatalf("served %v, limits %+v", x.Served, x.Limits)
	}
	l, c := *x.Limits, bd.a.Info()
	if l.AdapterFlags&c.AdapterFlags != c.AdapterFlags {
		t.Errorf("daemon's flags %v lack some of the client's %v", l.AdapterFlags, c.AdapterFlags)
	}
	l.AdapterFlags = c.AdapterFlags
	if c.MaxSRQDepth == 0 {
		l.MaxSRQDepth = 0
	}
	if c.MaxWindowSize == 0 {
		l.MaxWindowSize = 0
	}
	if c.FRMRPageCount == 0 {
		l.FRMRPageCount = 0
	}
	if !reflect.DeepEqual(l, c) {
		t.Errorf("limits %+v; the client's adapter has %+v", l, c)
	}
	if x.Versions.Protocol != 3 || x.Versions.NDK != "2.1" || x.Versions.Kernel == "" || x.Versions.Daemon == "" {
		t.Errorf("versions %+v", x.Versions)
	}
	text := string(run(t, "info", "-daemon", bd.sock))
	for _, want := range []string{"hca_id:\tndkxdp_" + h.Link, "active_mtu:", "GID[0]:", "queue 0", "copy"} {
		if !strings.Contains(text, want) {
			t.Errorf("info output lacks %q:\n%s", want, text)
		}
	}
}

// TestInfoWithoutDaemon: info -dev on an interface no daemon serves (B,
// where an in-process adapter runs) says so and describes what the kernel
// knows: driver, MTUs, GIDs, the attached program's mode, unbound queues,
// no limits.
func TestInfoWithoutDaemon(t *testing.T) {
	bd := newBed(t)
	h := bd.pair.B
	cmd := exec.Command("nsenter", "--net=/var/run/netns/"+h.Name, binary(t), "info", "-dev", h.Link, "-j")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("info -dev %s: %v\n%s", h.Link, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "no daemon serves "+h.Link) {
		t.Errorf("info does not say no daemon serves %s: %q", h.Link, stderr.String())
	}
	var x daemon.Info
	if err := json.Unmarshal(out, &x); err != nil {
		t.Fatal(err)
	}
	if x.Served || x.Limits != nil || x.Interface != h.Link || x.MTU != h.MTU || x.Driver != "veth" || x.ActivePathMTU != bd.b.Adapter.PathMTU() || x.Address != h.IPv4.String() {
		t.Errorf("info %+v", x)
	}
	if x.XDPMode != "driver" && x.XDPMode != "generic" {
		t.Errorf("B's attached program in mode %q", x.XDPMode)
	}
	if len(x.Queues) == 0 || x.Queues[0].Bind != "unbound" {
		t.Errorf("queues %+v", x.Queues)
	}
	if len(x.GIDs) == 0 || x.GIDs[0].GID != hexGID(netip.AddrFrom16(h.IPv4.As16()).As16()) {
		t.Errorf("GIDs %+v", x.GIDs)
	}
}

// TestStatsAndQP: after WRITEs, ndkxdp stats and ndkxdp qp agree with
// the frames B's adapter captured (what A sent, what A received), with
// the steering program's redirects, and with the transfers made.
func TestStatsAndQP(t *testing.T) {
	bd := newBed(t)
	const n = 20
	bd.writes(t, n)
	bd.quiet(t)

	var s daemon.Stats
	runJSON(t, &s, "stats", "-daemon", bd.sock)
	fromA, fromB := bd.captured(t)
	if got := s.Adapter["frames_out"]; got != fromA {
		t.Errorf("stats: adapter frames_out %d, B captured %d frames from A", got, fromA)
	}
	if got := s.Adapter["frames_in"]; got != fromB {
		t.Errorf("stats: adapter frames_in %d, B captured %d frames from B", got, fromB)
	}
	var in, out uint64
	for _, e := range s.Engines {
		in += e.Engine["frames_in"]
		out += e.Engine["frames_out"]
		if k := e.Socket; k.RxDropped != 0 || k.RxRingFull != 0 || k.TxInvalid != 0 {
			t.Errorf("queue %d socket %+v: drops on an idle veth", e.Queue, k)
		}
	}
	if in != s.Adapter["frames_in"] || out != s.Adapter["frames_out"] {
		t.Errorf("engines sum to %d in, %d out; adapter says %d, %d", in, out, s.Adapter["frames_in"], s.Adapter["frames_out"])
	}
	if s.Verdicts["redirect"] != s.Adapter["frames_in"] {
		t.Errorf("XDP redirected %d frames, the engines received %d", s.Verdicts["redirect"], s.Adapter["frames_in"])
	}
	for _, k := range []string{"duplicates", "out_of_seq", "rnr_sent", "rnr_received", "retransmits", "timeouts", "cnps", "retry_exceeded", "local_access_errors", "remote_access_errors"} {
		if _, ok := s.Adapter[k]; !ok {
			t.Errorf("stats lack the counter %s", k)
		}
	}
	if s.CM["sent_req"] != 1 || s.CM["received_rep"] != 1 || s.CM["sent_rtu"] != 1 {
		t.Errorf("cm counters %v: want one REQ and one RTU sent, one REP received", s.CM)
	}

	var qps []daemon.QP
	runJSON(t, &qps, "qp", "-daemon", bd.sock)
	if len(qps) != 1 {
		t.Fatalf("qp lists %d QPs, want 1: %+v", len(qps), qps)
	}
	q := qps[0]
	if q.QPN != bd.qp.QPN() || q.State != "connected" || q.PeerAddr != bd.pair.B.IPv4.String() || q.PeerQPN != bd.peer.QPN() {
		t.Errorf("qp %+v; want QPN %d connected to %s QPN %d", q, bd.qp.QPN(), bd.pair.B.IPv4, bd.peer.QPN())
	}
	if q.PID != int32(os.Getpid()) || q.PathMTU != bd.a.PathMTU() {
		t.Errorf("qp owned by pid %d path MTU %d; want %d, %d", q.PID, q.PathMTU, os.Getpid(), bd.a.PathMTU())
	}
	if want := n * bd.packetsPerWrite(); q.FramesOut != want || q.Retransmits != 0 {
		t.Errorf("qp sent %d frames with %d retransmissions; %d WRITEs of 4 KiB are %d packets", q.FramesOut, q.Retransmits, n, want)
	}
	if q.FramesIn == 0 || q.FramesIn > n*bd.packetsPerWrite() {
		t.Errorf("qp received %d ACKs for %d packets", q.FramesIn, n*bd.packetsPerWrite())
	}
	if q.Outstanding != 0 || q.SendPSN != q.UnackedPSN {
		t.Errorf("qp idle but outstanding %d, sq_psn %d, unacked %d", q.Outstanding, q.SendPSN, q.UnackedPSN)
	}
	if len(s.QPs) != 1 || s.QPs[0].FramesOut != q.FramesOut {
		t.Errorf("stats QPs %+v disagree with qp %+v", s.QPs, q)
	}

	text := string(run(t, "stats", "-daemon", bd.sock))
	for _, want := range []string{"link " + bd.pair.A.Link + " ", "frames_out " + itoa(int(fromA)), "xsk rx_dropped 0", "fill_ring_empty", "tx_invalid_descs 0", "redirect "} {
		if !strings.Contains(text, want) {
			t.Errorf("stats output lacks %q:\n%s", want, text)
		}
	}
	text = string(run(t, "qp", "-daemon", bd.sock))
	if q.Type != "RC" {
		t.Errorf("qp type %q, want RC", q.Type)
	}
	for _, want := range []string{"lqpn " + itoa(int(q.QPN)), "type RC state connected", "peer " + bd.pair.B.IPv4.String() + " rqpn " + itoa(int(q.PeerQPN)), "pid " + itoa(os.Getpid())} {
		if !strings.Contains(text, want) {
			t.Errorf("qp output lacks %q:\n%s", want, text)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// runFail runs `ndkxdp args...`, which must fail, and returns its
// standard error.
func runFail(t *testing.T, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(binary(t), args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("ndkxdp %s succeeded", strings.Join(args, " "))
	}
	return stderr.String()
}

func hexGID(b [16]byte) string {
	const hex = "0123456789abcdef"
	var s strings.Builder
	for i := range 16 {
		if i > 0 && i%2 == 0 {
			s.WriteByte(':')
		}
		s.WriteByte(hex[b[i]>>4])
		s.WriteByte(hex[b[i]&15])
	}
	return s.String()
}
