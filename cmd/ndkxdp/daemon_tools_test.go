package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/demo"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// serveDaemonOn runs ndkxdp's daemon (ndk/daemon, in process) on h's veth
// end and returns its socket; the test's end stops it.
func serveDaemonOn(t *testing.T, h *harness.Host) string {
	t.Helper()
	var a *ndk.Adapter
	if err := h.Do(func() error {
		var err error
		a, err = ndk.Open(h.Link, ndk.Options{})
		return err
	}); err != nil {
		t.Fatalf("open the daemon's adapter: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "ndkxdp.sock")
	ln, err := daemon.Listen(sock, 0o600, -1)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	srv := daemon.New(a, daemon.Config{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	return sock
}

// resultRow returns the fields of the row under perftest's result header
// (the line holding column), failing the test without one.
func resultRow(t *testing.T, out, column string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, column) && i+1 < len(lines) {
			return strings.Fields(lines[i+1])
		}
	}
	t.Fatalf("no %q result in:\n%s", column, out)
	return nil
}

// TestToolsThroughDaemon runs `ndkxdp rping` and `ndkxdp perf` with
// -daemon against a daemon on A's veth end, the peer attached to B's with
// -dev: rping's client validates every pong (also as a process without
// any capability), perf's server listens
// through the daemon (write_bw), its client connects through it
// (send_lat), and each report's result row holds the run's size and
// iterations and a positive figure.
func TestToolsThroughDaemon(t *testing.T) {
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	sock := serveDaemonOn(t, p.A)
	srvB := p.B.IPv4.String()
	t.Run("rping", func(t *testing.T) {
		cout, _ := runIn(t, p.B, []string{"rping", "-s", "-a", srvB, "-C", "10", "-S", "100", "-dev", p.B.Link},
			p.A, []string{"rping", "-c", "-a", srvB, "-C", "10", "-S", "100", "-V", "-v", "-daemon", sock})
		if n := strings.Count(cout, "ping data: rdma-ping-"); n != 10 {
			t.Fatalf("client printed %d validated pings, want 10:\n%s", n, cout)
		}
	})
	t.Run("rping without capabilities", func(t *testing.T) {
		// The client is a process with no capability at all: the daemon
		// has what attaching takes.
		setpriv := testenv.RequireTool(t, "setpriv")
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var sout, serr bytes.Buffer
		srvDone := make(chan error, 1)
		go func() {
			srvDone <- p.B.Do(func() error {
				return run(ctx, []string{"rping", "-s", "-a", srvB, "-p", "7175", "-C", "5", "-dev", p.B.Link}, &sout, &serr)
			})
		}()
		time.Sleep(300 * time.Millisecond)
		cli := exec.CommandContext(ctx, setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
			exe, "rping", "-c", "-a", srvB, "-p", "7175", "-C", "5", "-V", "-daemon", sock)
		cli.Env = append(os.Environ(), "NDKXDP_TEST_MAIN=1")
		out, cliErr := cli.CombinedOutput()
		if cliErr != nil {
			cancel()
		}
		srvErr := <-srvDone
		if cliErr != nil || srvErr != nil || !strings.Contains(string(out), "rping: 5 pings") {
			t.Fatalf("client without capabilities: %v\n%s\nserver: %v\n%s%s", cliErr, out, srvErr, sout.String(), serr.String())
		}
	})
	t.Run("write_bw", func(t *testing.T) {
		// The server listens through the daemon on A's address.
		cout, sout := runIn(t, p.A, []string{"perf", "write_bw", "-n", "200", "-s", "4096", "-daemon", sock},
			p.B, []string{"perf", "write_bw", "-n", "200", "-s", "4096", p.A.IPv4.String(), "-dev", p.B.Link})
		for _, out := range []string{cout, sout} {
			row := resultRow(t, out, "BW average[")
			if len(row) != 5 || row[0] != "4096" || row[1] != "200" {
				t.Fatalf("write_bw row %q, want 4096 bytes, 200 iterations:\n%s", row, out)
			}
			if bw, err := strconv.ParseFloat(row[3], 64); err != nil || bw <= 0 {
				t.Errorf("write_bw average %q, want a positive bandwidth", row[3])
			}
		}
	})
	t.Run("send_bw_q3", func(t *testing.T) {
		// -q 3 through the daemon: three data QPs of one client, each
		// with its buffer in the daemon's memory, polled together.
		cout, sout := runIn(t, p.A, []string{"perf", "send_bw", "-q", "3", "-n", "100", "-s", "4096", "-daemon", sock},
			p.B, []string{"perf", "send_bw", "-q", "3", "-n", "100", "-s", "4096", p.A.IPv4.String(), "-dev", p.B.Link})
		for _, out := range []string{cout, sout} {
			row := resultRow(t, out, "BW average[")
			if len(row) != 5 || row[0] != "4096" || row[1] != "300" {
				t.Fatalf("send_bw -q 3 row %q, want 4096 bytes, 3 x 100 iterations:\n%s", row, out)
			}
		}
	})
	t.Run("write_bw_write_with_imm", func(t *testing.T) {
		// The server, through the daemon, counts its receives, which the
		// client's WRITEs with immediate complete.
		cout, sout := runIn(t, p.A, []string{"perf", "write_bw", "-n", "100", "-s", "4096", "--write_with_imm", "-daemon", sock},
			p.B, []string{"perf", "write_bw", "-n", "100", "-s", "4096", "--write_with_imm", p.A.IPv4.String(), "-dev", p.B.Link})
		for _, out := range []string{cout, sout} {
			if row := resultRow(t, out, "BW average["); len(row) != 5 || row[0] != "4096" || row[1] != "100" {
				t.Fatalf("write_bw --write_with_imm row %q, want 4096 bytes, 100 iterations:\n%s", row, out)
			}
			if !strings.Contains(out, "RDMA WRITE with immediate") {
				t.Fatalf("the side does not say it writes with immediate:\n%s", out)
			}
		}
	})
	t.Run("send_bw_use_srq", func(t *testing.T) {
		// The server receives through an SRQ of the daemon's.
		cout, sout := runIn(t, p.A, []string{"perf", "send_bw", "-n", "100", "-s", "4096", "--use-srq", "-daemon", sock},
			p.B, []string{"perf", "send_bw", "-n", "100", "-s", "4096", p.A.IPv4.String(), "-dev", p.B.Link})
		if !strings.Contains(sout, "receives through a shared receive queue") {
			t.Fatalf("the server does not say it receives through an SRQ:\n%s", sout)
		}
		for _, out := range []string{cout, sout} {
			if row := resultRow(t, out, "BW average["); len(row) != 5 || row[0] != "4096" || row[1] != "100" {
				t.Fatalf("send_bw row %q, want 4096 bytes, 100 iterations:\n%s", row, out)
			}
		}
	})
	t.Run("send_bw_bidirectional", func(t *testing.T) {
		// -b through the daemon: its client's data QP receives while its
		// SENDs are outstanding (verbs.ConnParams.Unordered).
		cout, sout := runIn(t, p.A, []string{"perf", "send_bw", "-b", "-n", "300", "-s", "4096", "-daemon", sock},
			p.B, []string{"perf", "send_bw", "-b", "-n", "300", "-s", "4096", p.A.IPv4.String(), "-dev", p.B.Link})
		c, s := resultRow(t, cout, "BW average["), resultRow(t, sout, "BW average[")
		if len(c) != 5 || c[0] != "4096" || c[1] != "300" || strings.Join(c, " ") != strings.Join(s, " ") {
			t.Fatalf("send_bw -b rows %q and %q, want 4096 bytes, 300 iterations, the same sum:\n%s\n%s", c, s, cout, sout)
		}
	})
	t.Run("write_bw_and_send_lat_over_tcp", func(t *testing.T) {
		// perftest without -R: the daemon's QP connected out of band,
		// its next hop found in the daemon's namespace, as server and as
		// client.
		cout, sout := runIn(t, p.A, []string{"perf", "write_bw", "-comm", "tcp", "-n", "200", "-s", "4096", "-daemon", sock},
			p.B, []string{"perf", "write_bw", "-comm", "tcp", "-n", "200", "-s", "4096", p.A.IPv4.String(), "-dev", p.B.Link})
		for _, out := range []string{cout, sout} {
			if row := resultRow(t, out, "BW average["); len(row) != 5 || row[0] != "4096" || row[1] != "200" {
				t.Fatalf("write_bw -comm tcp row %q, want 4096 bytes, 200 iterations:\n%s", row, out)
			}
		}
		cout, _ = runIn(t, p.B, []string{"perf", "send_lat", "-n", "200", "-s", "64", "-comm", "tcp", "-dev", p.B.Link},
			p.A, []string{"perf", "send_lat", "-n", "200", "-s", "64", "-comm", "tcp", srvB, "-daemon", sock})
		if row := resultRow(t, cout, "t_typical["); len(row) < 5 || row[0] != "64" || row[1] != "200" {
			t.Fatalf("send_lat -comm tcp row %q, want 64 bytes, 200 iterations:\n%s", row, cout)
		}
	})
	t.Run("rstream", func(t *testing.T) {
		// The rsocket server through the daemon: the REQ's private data
		// read before the accept, its buffers in the daemon's memory
		// written by the peer's WRITEs with immediate; and the client
		// through it too.
		test := []string{"-T", "v", "-I", "3", "-C", "20", "-S", "70000"}
		cout, sout := runIn(t, p.A, append([]string{"rstream", "-daemon", sock}, test...),
			p.B, append([]string{"rstream", "-s", p.A.IPv4.String(), "-dev", p.B.Link}, test...))
		cout2, sout2 := runIn(t, p.B, append([]string{"rstream", "-p", "7472", "-dev", p.B.Link}, test...),
			p.A, append([]string{"rstream", "-p", "7472", "-s", srvB, "-daemon", sock}, test...))
		for _, out := range []string{cout, sout, cout2, sout2} {
			m := rstreamLine.FindAllStringSubmatch(out, -1)
			if len(m) != 1 || strings.Join(m[0][1:], " ") != "custom 68k 20 3 8m" {
				t.Fatalf("rstream printed:\n%s", out)
			}
		}
	})
	t.Run("send_lat", func(t *testing.T) {
		cout, _ := runIn(t, p.B, []string{"perf", "send_lat", "-n", "200", "-s", "64", "-dev", p.B.Link},
			p.A, []string{"perf", "send_lat", "-n", "200", "-s", "64", srvB, "-daemon", sock})
		row := resultRow(t, cout, "t_typical[")
		if len(row) < 5 || row[0] != "64" || row[1] != "200" {
			t.Fatalf("send_lat row %q, want 64 bytes, 200 iterations:\n%s", row, cout)
		}
		if lat, err := strconv.ParseFloat(row[4], 64); err != nil || lat <= 0 {
			t.Errorf("send_lat t_typical %q, want a positive time", row[4])
		}
	})
}

// clientPIDs returns the client processes the demo's phase lines name.
func clientPIDs(t *testing.T, out string) []int {
	t.Helper()
	var pids []int
	for _, l := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(l, ", from client process ")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSuffix(rest, "..."))
		if err != nil {
			t.Fatalf("phase line %q: %v", l, err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// checkGone fails the test for each process in pids still running.
func checkGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			t.Errorf("client process %d still there (%v)", pid, err)
		}
	}
}

// TestDemoThroughDaemons runs `ndkxdp demo -daemon`: each of the four
// phases runs, its contents verified, in a client process of its own (four
// distinct processes, none this one, all ended), and the report is the
// in-process demo's, the daemons' frames counted on both ends.
func TestDemoThroughDaemons(t *testing.T) {
	testenv.RequireRoot(t)
	var out, errOut bytes.Buffer
	// A demo killed with SIGKILL left its socket directory; this one
	// removes it. -capture works through the daemons too.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-1", demo.DirPrefix, dead.Process.Pid))
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(stale)
	pcap := filepath.Join(t.TempDir(), "demo.pcap")
	err := run(context.Background(), []string{"demo", "-daemon", "-messages", "2000", "-rdma-ops", "50",
		"-pings", "200", "-capture", pcap}, &out, &errOut)
	if err != nil {
		t.Fatalf("demo -daemon: %v\n%s%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{"daemons: ", "report:", "SEND      2000 x 64", "WRITE       50 x 65536", "READ        50 x 65536",
		"RTT p50", "p99.9", "(200 round trips)", "0 bad ICRC", "connections: 4 set up", "namespaces removed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo -daemon output lacks %q:\n%s", want, out.String())
		}
	}
	pids := clientPIDs(t, out.String())
	seen := map[int]bool{os.Getpid(): true}
	for _, pid := range pids {
		if seen[pid] {
			t.Errorf("client process %d ran twice or is the demo", pid)
		}
		seen[pid] = true
	}
	if len(pids) != 4 {
		t.Errorf("phases ran in %d client processes (%v), want 4:\n%s", len(pids), pids, out.String())
	}
	checkGone(t, pids)
	if framesOut(t, out.String()) == 0 {
		t.Errorf("the daemons sent no frames:\n%s", out.String())
	}
	if fi, err := os.Stat(pcap); err != nil || fi.Size() <= 24 || !strings.Contains(out.String(), "capture: "+pcap) {
		t.Errorf("demo -daemon -capture wrote no frames (%v):\n%s", err, out.String())
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a killed demo's socket directory %s is still there: %v", stale, err)
	}
}

// TestDemoDaemonEndsWhenInterrupted sends SIGINT, then SIGTERM, to `ndkxdp
// demo -daemon` while a client process runs its SEND phase: the demo exits
// promptly with 130 or 143, names the phase, and leaves neither the client
// process nor a namespace behind.
func TestDemoDaemonEndsWhenInterrupted(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		cmd := command(t, "demo", "-daemon", "-messages", "5000000")
		stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(stdout.String(), "from client process") {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				<-done
				t.Fatalf("no phase running after 20 s:\n%s%s", stdout.String(), stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		sent := time.Now()
		if err := cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("demo -daemon still running 20 s after %v:\n%s%s", tc.sig, stdout.String(), stderr.String())
		}
		took := time.Since(sent)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != tc.want {
			t.Errorf("%v: %v, want exit status %d\n%s", tc.sig, err, tc.want, stderr.String())
		}
		if !strings.Contains(stderr.String(), "interrupted during SEND") {
			t.Errorf("%v: stderr does not name the SEND phase:\n%s", tc.sig, stderr.String())
		}
		if took > 5*time.Second {
			t.Errorf("%v: exit took %v, want under 5 s", tc.sig, took)
		}
		checkGone(t, clientPIDs(t, stdout.String()))
		if left := leftNamespaces(cmd.Process.Pid); len(left) > 0 {
			t.Errorf("%v: namespaces left behind: %v", tc.sig, left)
		}
		t.Logf("%v: exit after %v: %s", tc.sig, took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	}
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDaemonSocketNobodyServes: a -daemon socket no daemon listens on (one
// left behind by a daemon that was killed) fails the tools with a message
// that says no daemon answers there, and exit status 1.
func TestDaemonSocketNobodyServes(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "stale.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: sock})
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"rping", "-c", "-a", "198.18.0.2", "-daemon", sock},
		{"perf", "send_lat", "198.18.0.2", "-daemon", sock},
	} {
		var out, errOut, status bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if code := exitStatus(err, &status); code != 1 || !strings.Contains(status.String(), "no daemon answers at "+sock) {
			t.Errorf("ndkxdp %q: exit %d, %q; want exit 1 saying no daemon answers", args, code, status.String())
		}
	}
}
