package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/test/daemonproc"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// exitsWith waits for a daemon that must refuse to start and returns its
// output.
func exitsWith(t *testing.T, d *daemonproc.Daemon, code int) string {
	t.Helper()
	select {
	case err := <-d.Done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != code {
			t.Fatalf("daemon exited with %v, want status %d:\n%s", err, code, d.Logs)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("daemon still running after 15 s, want it refused:\n%s", d.Logs)
	}
	return d.Logs.String()
}

// TestSecondDaemonChangesNothing: a second daemon on an interface a daemon
// serves (on another socket, or the same) refuses, naming the running
// daemon's PID and socket, and leaves it as it was: its pins, its socket,
// its clients' traffic, and the SIGKILL takeover.
func TestSecondDaemonChangesNothing(t *testing.T) {
	p := harness.New(t, harness.Config{})
	b, err := ndkhost.Open(p.B, ndkhost.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bd := &bed{pair: p, b: b}
	sock := filepath.Join(t.TempDir(), "d.sock")
	root := pinRoot(t)
	d := startDaemon(t, p, sock, root)
	a := dialWhenUp(t, d, sock)
	defer a.Close()
	c := clientOf(t, a)
	pr := bd.connect(t, c, 7501)
	writeOnce(t, c, pr, 1)
	pins := filepath.Join(pinDir(t, p.A, root), "link")

	for _, second := range []string{filepath.Join(t.TempDir(), "other.sock"), sock} {
		d2 := startDaemon(t, p, second, root)
		out := exitsWith(t, d2, 1)
		t.Logf("%s", out)
		want := fmt.Sprintf("already served by ndkxdp daemon pid %d at %s", d.Cmd.Process.Pid, sock)
		if !strings.Contains(out, want) {
			t.Errorf("second daemon on %s says:\n%s\nwant %q", second, out, want)
		}
		if _, err := os.Stat(pins); err != nil {
			t.Fatalf("the running daemon's pins after a second daemon: %v", err)
		}
		if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("the running daemon's socket after a second daemon: %v", err)
		}
		writeOnce(t, c, pr, 2)
	}
	// A tool that would attach in process is sent to the daemon.
	tool := exec.Command("nsenter", "--net=/var/run/netns/"+p.A.Name, testenv.Ndkxdp(t), "rping", "-s", "-C", "1", "-timeout", "10s", "-dev", p.A.Link)
	out, err := tool.CombinedOutput()
	want := fmt.Sprintf("%s is served by ndkxdp daemon pid %d (EBUSY): run through it with -daemon %s", p.A.Link, d.Cmd.Process.Pid, sock)
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("rping -dev on the daemon's interface: %v\n%s\nwant %q", err, out, want)
	}
	writeOnce(t, c, pr, 4)

	// The takeover still works: kill the first, a new one takes its pins.
	a.Close()
	_ = d.Cmd.Process.Signal(syscall.SIGKILL)
	<-d.Done
	d3 := startDaemon(t, p, sock, root, "-log-format", "json")
	a3 := dialWhenUp(t, d3, sock)
	defer a3.Close()
	c3 := clientOf(t, a3)
	writeOnce(t, c3, bd.connect(t, c3, 7502), 3)
}

// TestPinsPerNamespace: daemons for interfaces of the same name in two
// network namespaces, with one pin root, both serve, pinned apart.
func TestPinsPerNamespace(t *testing.T) {
	p1 := harness.New(t, harness.Config{})
	p2 := harness.New(t, harness.Config{})
	if p1.A.Link != p2.A.Link {
		t.Fatalf("the pairs' interfaces are %s and %s: the test needs one name", p1.A.Link, p2.A.Link)
	}
	root := pinRoot(t)
	var dirs []string
	for i, p := range []*harness.Pair{p1, p2} {
		sock := filepath.Join(t.TempDir(), fmt.Sprintf("d%d.sock", i))
		d := daemonproc.StartDaemon(t, p.A, sock, root)
		d.Dial(t).Close()
		dir := pinDir(t, p.A, root)
		if _, err := os.Stat(filepath.Join(dir, "link")); err != nil {
			t.Fatalf("daemon %d's pins: %v\n%s", i, err, d.Logs)
		}
		dirs = append(dirs, dir)
	}
	if dirs[0] == dirs[1] {
		t.Fatalf("both namespaces pin at %s", dirs[0])
	}
}

// TestStalePinsCleared: a daemon killed with SIGKILL whose interface is
// then deleted leaves pins; the next daemon (here for another namespace's
// interface of that name) clears them with a log line and serves.
func TestStalePinsCleared(t *testing.T) {
	p1 := harness.New(t, harness.Config{})
	p2 := harness.New(t, harness.Config{})
	root := pinRoot(t)
	d := daemonproc.StartDaemon(t, p1.A, filepath.Join(t.TempDir(), "d1.sock"), root)
	d.Dial(t).Close()
	stale := pinDir(t, p1.A, root)
	_ = d.Cmd.Process.Signal(syscall.SIGKILL)
	<-d.Done
	if err := p1.A.Do(func() error {
		l, err := netlink.LinkByName(p1.A.Link)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(stale, "link")); err != nil {
		t.Fatalf("the killed daemon left no pins to clear: %v", err)
	}
	d2 := daemonproc.StartDaemon(t, p2.A, filepath.Join(t.TempDir(), "d2.sock"), root)
	d2.Dial(t).Close()
	if !strings.Contains(d2.Logs.String(), "cleared the pins of an interface that no longer exists") || !strings.Contains(d2.Logs.String(), stale) {
		t.Errorf("the next daemon's log does not name the stale pins %s:\n%s", stale, d2.Logs)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale pins left: %v", err)
	}
}

// TestDaemonUnderIPNetnsExec: `ip netns exec` gives the daemon a /sys of
// its own, where pins would end with the daemon; it refuses, naming
// nsenter, and attaches nothing.
func TestDaemonUnderIPNetnsExec(t *testing.T) {
	p := harness.New(t, harness.Config{})
	ip := testenv.RequireTool(t, "ip")
	sock := filepath.Join(t.TempDir(), "d.sock")
	root := pinRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ip, "netns", "exec", p.A.Name, testenv.Ndkxdp(t), "daemon", "-dev", p.A.Link, "-socket", sock, "-pin-root", root)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("daemon under ip netns exec: %v, want exit 1:\n%s", err, out)
	}
	t.Logf("%s", out)
	if !strings.Contains(string(out), "ip netns exec") || !strings.Contains(string(out), "nsenter --net=") {
		t.Errorf("refusal does not give the reason and nsenter:\n%s", out)
	}
	if xdpAttached(t, p.A) {
		t.Error("the refused daemon left XDP attached")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused daemon left its socket: %v", err)
	}
}
