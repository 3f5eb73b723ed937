// Package daemonproc runs `ndkxdp daemon` processes for tests: on one
// host of a test's veth pair, with pins of the test's own, dialled when up.
package daemonproc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// Daemon is an `ndkxdp daemon` process serving one host's interface.
type Daemon struct {
	Cmd  *exec.Cmd
	Sock string
	Logs *SyncBuffer
	// Done receives the process's exit once; Wait reads it.
	Done chan error
}

// SyncBuffer is a bytes.Buffer safe for a process's output and a test's
// reads at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// PinRoot returns a bpffs directory of the test's own for a daemon's pins,
// removed when the test ends.
func PinRoot(t testing.TB) string {
	root := fmt.Sprintf("/sys/fs/bpf/ndkxdp-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { os.RemoveAll(root) })
	return root
}

// StartDaemon starts `ndkxdp daemon` on h's interface, serving sock, with
// extra flags; the test's end kills it if it still runs. It runs under
// nsenter, which changes only the network namespace: the daemon must see
// the bpffs where its pins outlive it, which `ip netns exec` would hide
// behind a mount namespace of its own.
func StartDaemon(t testing.TB, h *harness.Host, sock, pinRoot string, extra ...string) *Daemon {
	t.Helper()
	return StartDaemonIn(t, h.Name, h.Link, sock, pinRoot, extra...)
}

// StartDaemonIn is StartDaemon on interface link of the network namespace
// named ns (under /var/run/netns).
func StartDaemonIn(t testing.TB, ns, link, sock, pinRoot string, extra ...string) *Daemon {
	t.Helper()
	args := append([]string{"--net=/var/run/netns/" + ns, testenv.Ndkxdp(t), "daemon", "-dev", link, "-socket", sock, "-pin-root", pinRoot}, extra...)
	cmd := exec.Command("nsenter", args...)
	d := &Daemon{Cmd: cmd, Sock: sock, Logs: &SyncBuffer{}, Done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = d.Logs, d.Logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.Done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-d.Done
		}
	})
	return d
}

// Dial dials the daemon until it answers (at most 15 s), failing the test
// if it exits first.
func (d *Daemon) Dial(t testing.TB) *ndk.Adapter {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a, err := ndk.Dial(ctx, d.Sock)
		cancel()
		if err == nil {
			return a
		}
		select {
		case werr := <-d.Done:
			d.Done <- werr
			t.Fatalf("daemon exited (%v) before serving:\n%s", werr, d.Logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not serving after 15 s (%v):\n%s", err, d.Logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
