package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/demo"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestMain lets a test run the command as a process of its own (to send
// it signals and read its exit status): with NDKXDP_TEST_MAIN=1 the test
// binary is ndkxdp.
func TestMain(m *testing.M) {
	if job, ok := os.LookupEnv(demo.ClientEnv); ok {
		os.Exit(demo.RunClient(job, os.Stdin, os.Stdout, os.Stderr)) // demo -daemon's client process
	}
	if os.Getenv("NDKXDP_TEST_MAIN") == "1" {
		os.Exit(mainStatus(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestBadInvocations: every bad command line is refused with exit status
// 2 and a message naming the flag, before anything is printed on stdout
// or touched (-dev lo would be attached to otherwise).
func TestBadInvocations(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, ""},
		{[]string{"bogus"}, "unknown command"},
		{[]string{"demo", "-messages", "0"}, "-messages 0"},
		{[]string{"demo", "-xdp-mode", "fast"}, "-xdp-mode"},
		{[]string{"demo", "-dev", "eth0"}, "-dev eth0: give -peer ADDR"},
		{[]string{"demo", "-peer", "198.18.0.1"}, "-peer needs -dev IF"},
		{[]string{"demo", "-serve"}, "-serve needs -dev IF"},
		{[]string{"demo", "-queues", "0"}, `-queues "0"`},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1", "-serve"}, "give one of -peer and -serve"},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1", "-peer-kind", "ib"}, `-peer-kind "ib": want ndkxdp, rping or perftest`},
		{[]string{"demo", "-dev", "lo", "-serve", "-peer-kind", "rping"}, "-peer-kind names what serves at -peer"},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1", "-peer-kind", "perftest", "-pings", "3"}, "ping-pong's ib_send_lat runs at least 5 iterations, not 3"},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1", "-peer-kind", "perftest", "-rdma-size", "9000000"}, "WRITE's ib_write_bw moves at most 8388608 bytes"},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1", "-count", "2"}, "-count is how many demos -serve serves"},
		{[]string{"demo", "-dev", "lo", "-serve", "-count", "-1"}, "-count -1"},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1", "-mtu", "9000"}, "-mtu sets the embedded veth pair's MTU"},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1:0"}, "-peer 198.18.0.1:0: want ADDR, ADDR:PORT"},
		{[]string{"demo", "-dev", "no-such-if0", "-peer", "198.18.0.1"}, "-dev no-such-if0: no such network interface"},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1", "-daemon", "/dev/null"}, "-daemon /dev/null: not a unix socket"},
		{[]string{"demo", "-dev=lo", "-serve", "-daemon", "/nonexistent.sock"}, "-daemon /nonexistent.sock: no daemon socket there"},
		{[]string{"demo", "-dev", "lo", "-serve", "-daemon", "/dev/null", "-queues", "2"}, "give them to `ndkxdp daemon`"},
		{[]string{"demo", "-dev", "lo", "-serve", "-daemon", "/dev/null", "-polling", "busy"}, "-polling sets how the daemon's engines poll"},
		{[]string{"demo", "-dev", "lo", "-serve", "-zero-copy", "maybe"}, "-zero-copy"},
		{[]string{"demo", "-dev", "lo", "-serve", "-busy-poll", "5s"}, "-busy-poll"},
		{[]string{"demo", "-dev", "lo", "-peer", "198.18.0.1", "-capture", "x.pcap", "-daemon", "/dev/null"}, "-capture needs -dev without -daemon"},
		{[]string{"demo", "-mtu", "0"}, "-mtu 0: must be in [1280, 9000]"},
		{[]string{"demo", "-mtu", "500"}, "IPv6, which needs 1280"},
		{[]string{"demo", "-mtu", "70000"}, "-mtu 70000"},
		{[]string{"rping", "-s", "-dev", "x", "-queues", "0"}, `-queues "0"`},
		{[]string{"rping", "-s", "-dev", "x", "-busy-poll", "5s"}, "-busy-poll"},
		{[]string{"perf", "send_bw", "-dev", "x", "-zero-copy", "maybe"}, "-zero-copy"},
		{[]string{"perf", "send_bw", "-dev", "x", "-xdp-mode", "fast"}, "-xdp-mode"},
		{[]string{"perf", "send_bw", "-daemon", "/nonexistent.sock", "-queues", "2"}, "give them to `ndkxdp daemon`"},
		{[]string{"demo", "extra"}, "unexpected arguments"},
		{[]string{"perf"}, "test name or baseline"},
		{[]string{"perf", "baseline", "-duration", "-1s"}, "-duration -1s"},
		{[]string{"perf", "baseline", "-mtu", "1000"}, "-mtu 1000"},
		{[]string{"perf", "baseline", "extra"}, "unexpected arguments"},
		{[]string{"counters"}, "-dev is required"},
		{[]string{"counters", "-dev", "lo", "extra"}, "unexpected arguments"},
		{[]string{"version", "extra"}, "unexpected arguments"},
		{[]string{"rping", "-s", "-S", "10", "-dev", "lo"}, "invalid size 10"},
		{[]string{"rping", "-s", "-dev", "lo", "extra"}, "unexpected arguments"},
		{[]string{"perf", "send_bw", "-s", "-1", "-dev", "lo"}, "size -1"},
		{[]string{"perf", "send_bw", "-dev", "no-such-if0"}, "no such network interface"},
		{[]string{"rping", "-s", "-dev", "no-such-if0"}, "ENODEV"},
		{[]string{"rping", "-c", "-a", "198.18.0.2", "-daemon", "/nonexistent/ndkxdp.sock"}, "-daemon /nonexistent/ndkxdp.sock: no daemon socket there"},
		{[]string{"perf", "write_bw", "-daemon", "unix:///nonexistent/ndkxdp.sock"}, "start one with `ndkxdp daemon"},
		{[]string{"perf", "write_bw", "-daemon", "/dev/null"}, "not a unix socket"},
		{[]string{"rping", "-s", "-dev", "lo", "-daemon", "/dev/null"}, "give one of -dev and -daemon"},
		{[]string{"perf", "send_lat", "-capture", "x.pcap", "-daemon", "/dev/null"}, "-capture needs -dev"},
		{[]string{"perf", "write_bw", "-use-srq", "-dev", "lo"}, "--use-srq is for send tests"},
		{[]string{"perf", "write_bw", "-D", "0", "-dev", "lo"}, "-D 0"},
		{[]string{"perf", "write_bw", "--duration", "-3", "-dev", "lo"}, "-D -3"},
		{[]string{"perf", "write_bw", "-a", "-D", "2", "-dev", "lo"}, "-D with -a"},
		{[]string{"perf", "atomic_bw", "-a", "-dev", "lo"}, "-a with atomics"},
		{[]string{"perf", "send_lat", "-spin", "0s", "-dev", "lo"}, "-spin 0s"},
		{[]string{"perf", "send_lat", "-spin", "2s", "-dev", "lo"}, "-spin 2s: want a duration above 0 and at most 1s"},
		{[]string{"perf", "send_lat", "-spin", "50us", "-polling", "busy", "-dev", "lo"}, "-spin 50µs: is for adaptive polling"},
		{[]string{"daemon", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"daemon", "-dev", "lo", "extra"}, "unexpected arguments"},
		{[]string{"daemon", "-dev", "lo", "-queues", "x"}, `queues "x": want all or 1-64`},
		{[]string{"daemon", "-dev", "lo", "-xdp-mode", "fast"}, "fast"},
		{[]string{"soak", "extra"}, "unexpected arguments"},
		{[]string{"soak", "-loss", "2"}, "-loss must be in [0, 0.5]"},
		// rping's usage after its error is whole, not shortened as a log.
		{[]string{"rping", "-c", "-dev", "lo"}, "a client needs -a ADDR\nusage: ndkxdp rping -s|-c -a ADDR [-p PORT]"},
		{[]string{"rping", "-s", "-a", "198.18.0.1"}, "-dev or -daemon is required\nusage: ndkxdp rping -s|-c -a ADDR [-p PORT] [-C count] [-S size] [-v] [-V] [-P] [-I ADDR] [-t TOS] [-capture FILE] -dev IFNAME\n       ndkxdp rping"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		var status bytes.Buffer
		if code := exitStatus(err, &status); code != 2 || !strings.Contains(status.String(), tc.want) || out.Len() != 0 {
			t.Errorf("ndkxdp %q: exit %d, stderr %q, stdout %q; want exit 2 naming %q and nothing on stdout", tc.args, code, status.String(), out.String(), tc.want)
		}
	}
}

// TestHelpExitsZero: -h of the top level and of every subcommand prints
// the usage on stdout and exits 0; a test's -h says that no ADDR means
// server.
func TestHelpExitsZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "commands:"},
		{[]string{"demo", "-h"}, "-mtu"},
		{[]string{"demo", "-dev", "x", "-h"}, "-peer-kind"},
		{[]string{"perf", "-h"}, "perf baseline"},
		{[]string{"perf", "baseline", "-h"}, "-duration"},
		{[]string{"perf", "send_bw", "-h"}, "Without ADDR it is the server"},
		{[]string{"perf", "read_lat", "-dev", "x", "-h"}, "Without ADDR it is the server"},
		{[]string{"perf", "tcp_lat", "-h"}, "Without ADDR it is the server"},
		{[]string{"rping", "-h"}, "-capture"},
		{[]string{"counters", "-h"}, "-dev"},
		{[]string{"version", "-h"}, "VCS revision"},
		{[]string{"help", "demo"}, "-peer-kind"},
		{[]string{"help", "rping"}, "-capture"},
		{[]string{"soak", "-h"}, "RSS, heap and"},
		{[]string{"daemon", "-h"}, "nsenter --net="},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if code := exitStatus(err, &errOut); code != 0 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("ndkxdp %q: exit %d, stdout %q; want exit 0 and %q", tc.args, code, out.String(), tc.want)
		}
	}
}

// TestVersion: version prints the module version and VCS revision from
// the build information, the Go version and the kernel's features.
func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/ndkxdp/ndkxdp", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}
	got := buildText(bi, true)
	for _, want := range []string{"ndkxdp v0.3.0", "revision: 0123abcd (modified)", "go: go1.26.8 linux/"} {
		if !strings.Contains(got, want) {
			t.Errorf("buildText lacks %q:\n%s", want, got)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ndkxdp ", "revision: ", "go: go1.", "kernel: ", "XDP programs: ", "AF_XDP sockets: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestErrorsInLinuxTerms: the message a person reads names the failure
// as Linux does (errno) with what to do, and carries no NTSTATUS, while
// the error itself still matches ndk's sentinels.
func TestErrorsInLinuxTerms(t *testing.T) {
	cause := &ndk.Error{Status: ndk.StatusHostUnreachable, Op: "connect", Detail: "cm: resolve path: no MAC for 198.18.0.9 on ndk0 (NTSTATUS 0xc000023d HOST_UNREACHABLE)"}
	err := fmt.Errorf("rping: connect to port 7174: connect to 198.18.0.9:7174: %w", cause)
	msg := describe(err)
	for _, bad := range []string{"STATUS_", "NTSTATUS", "0xc000023d", "ndk: ", "cm: "} {
		if strings.Contains(msg, bad) {
			t.Errorf("message %q contains %q", msg, bad)
		}
	}
	for _, want := range []string{"no MAC for 198.18.0.9 on ndk0", "(EHOSTUNREACH)", "check the address"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if !errors.Is(err, ndk.ErrHostUnreachable) {
		t.Error("the error lost its NDKPI status")
	}
	verifier := &ndk.Error{Status: ndk.StatusNDISAdapterNotReady, Op: "open", Detail: "ndk0",
		Err: fmt.Errorf("load: verifier rejected the program: %w:\n\t0: r6 = r1\n\t1: r1 = *(u32 *)(r6 +4)\n\t56: r9 += r7\n\tpointer arithmetic prohibited for !root\n\tprocessed 79 insns", unix.EPERM)}
	msg = describe(verifier)
	if !strings.Contains(msg, "(EPERM)") || strings.Contains(msg, "ENODEV") || strings.Contains(msg, "r6 = r1") || !strings.Contains(msg, "prohibited for !root") {
		t.Errorf("a refused system call: %q, want its errno, not the status's, and the log's last lines only", msg)
	}
	if got := describe(errors.New("rping: accept: accept: context deadline exceeded")); got != "rping: accept: context deadline exceeded" {
		t.Errorf("repeated step: %q", got)
	}
	to := stepTimedOut(expired(t), fmt.Errorf("rping: accept: %w", context.DeadlineExceeded), 2*time.Second, "accept")
	if got := describe(to); got != "gave up after -timeout 2s during accept (ETIMEDOUT)" || !errors.Is(to, context.DeadlineExceeded) {
		t.Errorf("timeout: %q", got)
	}
}

func expired(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	t.Cleanup(cancel)
	<-ctx.Done()
	return ctx
}

// TestDemoRuns runs the README's main job in miniature and checks its
// report, and that every frame it captured is a valid RoCEv2 frame.
func TestDemoRuns(t *testing.T) {
	testenv.RequireRoot(t)
	for _, mtu := range []string{"1500", "9000"} {
		capture := filepath.Join(t.TempDir(), "demo.pcap")
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"demo", "-mtu", mtu, "-messages", "2000", "-rdma-ops", "50",
			"-pings", "200", "-capture", capture}, &out, &errOut)
		if err != nil {
			t.Fatalf("demo -mtu %s: %v\n%s%s", mtu, err, out.String(), errOut.String())
		}
		for _, want := range []string{"report:", "SEND      2000 x 64", "WRITE       50 x 65536", "READ        50 x 65536",
			"RTT p50", "p99.9", "max", "0 bad ICRC", "namespaces removed"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("demo -mtu %s output lacks %q:\n%s", mtu, want, out.String())
			}
		}
		f, err := pcapfile.ReadFile(capture)
		if err != nil {
			t.Fatal(err)
		}
		// Each frame once, as its sender sent it: as many as both hosts
		// sent.
		if sent := framesOut(t, out.String()); len(f.Packets) != sent {
			t.Errorf("demo -mtu %s: capture holds %d frames, the hosts sent %d", mtu, len(f.Packets), sent)
		}
		ops := map[rocev2.Opcode]int{}
		var p rocev2.Packet
		for _, pkt := range f.Packets {
			if err := rocev2.Parse(pkt.Data, &p); err != nil {
				t.Fatalf("captured frame %d: %v", pkt.Index, err)
			}
			ops[p.BTH.Opcode]++
		}
		for _, op := range []rocev2.Opcode{rocev2.RCSendOnly, rocev2.RCWriteFirst, rocev2.RCWriteLast, rocev2.RCReadRequest, rocev2.RCReadResponseLast, rocev2.RCAck, rocev2.UDSendOnly} {
			if ops[op] == 0 {
				t.Errorf("demo -mtu %s: capture holds no %v frame (%d frames: %v)", mtu, op, len(f.Packets), ops)
			}
		}
		checkWithTshark(t, capture)
	}
}

// checkWithTshark decodes the demo's capture with Wireshark's RoCE
// dissector: every frame is InfiniBand over UDP 4791, each of the demo's
// four connections shows its REQ, REP, RTU, DREQ and DREP, and no frame is
// malformed. The one exception is Wireshark guessing the payload of a
// SEND as an EtherType frame (the demo's messages start with a sequence
// number) and failing to parse that guess: the RoCE headers still decode.
func checkWithTshark(t *testing.T, capture string) {
	t.Helper()
	tshark := testenv.RequireTool(t, "tshark")
	out, err := exec.Command(tshark, "-r", capture, "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t",
		"-e", "frame.number", "-e", "frame.protocols", "-e", "_ws.malformed", "-e", "infiniband.mad.attributeid").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	cm := map[string]int{}
	frames := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 4 {
			t.Fatalf("tshark line %q", line)
		}
		frames++
		if !strings.Contains(f[1], "udp:infiniband") {
			t.Errorf("frame %s decodes as %s", f[0], f[1])
		}
		if f[2] != "" && (f[3] != "" || !strings.Contains(f[1], "infiniband:ethertype")) {
			t.Errorf("frame %s is malformed: %s (%s)", f[0], f[2], f[1])
		}
		if f[3] != "" {
			cm[f[3]]++
		}
	}
	for _, attr := range []string{"0x0010", "0x0013", "0x0014", "0x0015", "0x0016"} {
		if cm[attr] < 4 {
			t.Errorf("tshark finds %d CM MADs of attribute %s in %d frames, want at least 4 (%v)", cm[attr], attr, frames, cm)
		}
	}
}

// framesOut sums the "N frames out" of the demo's per-host lines.
func framesOut(t *testing.T, report string) int {
	t.Helper()
	sum, hosts := 0, 0
	for _, line := range strings.Split(report, "\n") {
		if _, rest, ok := strings.Cut(line, ": "); ok && strings.Contains(rest, " frames out, ") {
			n, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatalf("report line %q: %v", line, err)
			}
			sum += n
			hosts++
		}
	}
	if hosts != 2 {
		t.Fatalf("report names %d hosts' frames, want 2:\n%s", hosts, report)
	}
	return sum
}

// TestEveryCommandHasHelp: each command of the table is in the usage
// text, and `help CMD` prints its flags on stdout and exits 0.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands {
		if c.name == "help" {
			continue
		}
		if !strings.Contains(usage(), "\n  "+c.name+" ") {
			t.Errorf("usage does not list %s:\n%s", c.name, usage())
		}
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"help", c.name}, &out, &errOut)
		if code := exitStatus(err, &errOut); code != 0 || !strings.Contains(out.String(), "usage: ndkxdp "+c.name) {
			t.Errorf("ndkxdp help %s: exit %d, stdout %q", c.name, code, out.String())
		}
	}
}

// TestAddresses: -a takes host names, and a server's -a must be an
// address of -dev (EADDRNOTAVAIL otherwise, as rdma_bind_addr).
func TestAddresses(t *testing.T) {
	a, err := cmdline.LookupAddr(context.Background(), "-a", "localhost")
	if err != nil || !a.IsLoopback() {
		t.Errorf("lookupAddr(localhost) = %v, %v", a, err)
	}
	if _, err := cmdline.LookupAddr(context.Background(), "-a", "not a host!"); err == nil {
		t.Error("an invalid host name was accepted")
	}
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"rping", "-s", "-a", "198.18.99.99", "-dev", "lo"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "EADDRNOTAVAIL") || !strings.Contains(err.Error(), "not an address of lo") {
		t.Errorf("rping -s -a 198.18.99.99 -dev lo: %v", err)
	}
	if err := checkLocalAddr("lo", netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("127.0.0.1 on lo refused: %v", err)
	}
}
