package ops_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/test/daemonproc"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// tool is an ndkxdp command running as a process of its own, ended by
// the test's cleanup if it still runs.
type tool struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan error
}

func startTool(t *testing.T, netns string, args ...string) *tool {
	t.Helper()
	name, argv := binary(t), args
	if netns != "" {
		name, argv = "nsenter", append([]string{"--net=/var/run/netns/" + netns, binary(t)}, args...)
	}
	tl := &tool{cmd: exec.Command(name, argv...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
	tl.cmd.Stdout, tl.cmd.Stderr = tl.stdout, tl.stderr
	if err := tl.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { tl.done <- tl.cmd.Wait() }()
	t.Cleanup(func() {
		if tl.cmd.ProcessState == nil {
			_ = tl.cmd.Process.Kill()
			<-tl.done
		}
	})
	return tl
}

// exited waits up to d for the tool's exit and returns its status.
func (tl *tool) exited(t *testing.T, d time.Duration, what string) int {
	t.Helper()
	select {
	case err := <-tl.done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return tl.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("%s: still running after %v\nstdout:\n%s\nstderr:\n%s", what, d, tl.stdout, tl.stderr)
	}
	return 0
}

// TestToolsEndWhenTheirDaemonGoes: a tool running through a daemon exits
// non-zero at once when the daemon goes, saying so: an rping client
// mid-run (-C 0) when the daemon is killed, an rping server waiting for
// its client when the daemon is stopped.
func TestToolsEndWhenTheirDaemonGoes(t *testing.T) {
	p := harness.New(t, harness.Config{})
	srvB := p.B.IPv4.String()
	t.Run("client, SIGKILL", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "d.sock")
		d := daemonproc.StartDaemon(t, p.A, sock, daemonproc.PinRoot(t))
		d.Dial(t).Close()
		startTool(t, p.B.Name, "rping", "-s", "-a", srvB, "-p", "7401", "-C", "0", "-dev", p.B.Link)
		cli := startTool(t, "", "rping", "-c", "-a", srvB, "-p", "7401", "-C", "0", "-v", "-daemon", sock)
		deadline := time.Now().Add(15 * time.Second)
		for strings.Count(cli.stdout.String(), "ping data") < 10 {
			if time.Now().After(deadline) {
				t.Fatalf("no pings after 15 s\nstdout:\n%s\nstderr:\n%s", cli.stdout, cli.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = d.Cmd.Process.Signal(syscall.SIGKILL)
		<-d.Done
		if code := cli.exited(t, 3*time.Second, "rping client after its daemon's SIGKILL"); code != 1 {
			t.Errorf("exit status %d, want 1", code)
		}
		t.Logf("client:\n%s", cli.stderr)
		if !strings.Contains(cli.stderr.String(), "daemon "+sock+" went away") {
			t.Errorf("stderr does not say the daemon went away:\n%s", cli.stderr)
		}
	})
	t.Run("perf client, SIGKILL", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "d.sock")
		d := daemonproc.StartDaemon(t, p.A, sock, daemonproc.PinRoot(t))
		d.Dial(t).Close()
		startTool(t, p.B.Name, "perf", "send_bw", "-D", "30", "-p", "7403", "-dev", p.B.Link)
		time.Sleep(300 * time.Millisecond) // listening
		cli := startTool(t, "", "perf", "send_bw", "-D", "30", "-p", "7403", "-daemon", sock, srvB)
		time.Sleep(2 * time.Second) // mid-run
		_ = d.Cmd.Process.Signal(syscall.SIGKILL)
		<-d.Done
		if code := cli.exited(t, 3*time.Second, "perf client after its daemon's SIGKILL"); code != 1 {
			t.Errorf("exit status %d, want 1\n%s", code, cli.stderr)
		}
		if !strings.Contains(cli.stderr.String(), "daemon "+sock+" went away") {
			t.Errorf("stderr does not say the daemon went away:\n%s", cli.stderr)
		}
	})
	t.Run("server, SIGTERM", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "d.sock")
		d := daemonproc.StartDaemon(t, p.A, sock, daemonproc.PinRoot(t))
		d.Dial(t).Close()
		srv := startTool(t, "", "rping", "-s", "-p", "7402", "-C", "0", "-daemon", sock)
		time.Sleep(500 * time.Millisecond) // listening
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
		<-d.Done
		if code := srv.exited(t, 3*time.Second, "rping server after its daemon's SIGTERM"); code != 1 {
			t.Errorf("exit status %d, want 1", code)
		}
		t.Logf("server:\n%s", srv.stderr)
		if !strings.Contains(srv.stderr.String(), "daemon "+sock+" went away") {
			t.Errorf("stderr does not say the daemon went away:\n%s", srv.stderr)
		}
	})
}

// TestCountersFindTheDaemonsPins: `ndkxdp counters` in the daemon's
// network namespace finds its pins (under that namespace's directory),
// and after a second daemon was refused they are still there.
func TestCountersFindTheDaemonsPins(t *testing.T) {
	p := harness.New(t, harness.Config{})
	root := daemonproc.PinRoot(t)
	sock := filepath.Join(t.TempDir(), "d.sock")
	d := daemonproc.StartDaemon(t, p.A, sock, root)
	d.Dial(t).Close()
	second := daemonproc.StartDaemon(t, p.A, filepath.Join(t.TempDir(), "d2.sock"), root)
	if err := <-second.Done; err == nil {
		t.Fatalf("a second daemon on %s started:\n%s", p.A.Link, second.Logs)
	}
	out, err := exec.Command("nsenter", "--net=/var/run/netns/"+p.A.Name, binary(t), "counters", "-dev", p.A.Link, "-pin-root", root).CombinedOutput()
	if err != nil || !strings.Contains(string(out), p.A.Link+" (") {
		t.Fatalf("counters beside a daemon: %v\n%s", err, out)
	}
}
