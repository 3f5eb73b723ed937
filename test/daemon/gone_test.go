package daemon_test

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestClientLearnsDaemonGone: a client whose daemon dies (SIGKILL) or
// stops (SIGTERM) learns it within a second, from the socket's hangup:
// an armed CQ's callback fires with STATUS_CONNECTION_RESET, the
// connector's disconnect callback fires, and every later call (Arm, a
// post, a control call) fails with ErrConnectionReset naming the socket.
func TestClientLearnsDaemonGone(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			p := harness.New(t, harness.Config{})
			b, err := ndkhost.Open(p.B, ndkhost.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			bd := &bed{pair: p, b: b}
			sock := filepath.Join(t.TempDir(), "d.sock")
			d := startDaemon(t, p, sock, pinRoot(t))
			a := dialWhenUp(t, d, sock)
			defer a.Close()
			resets := make(chan struct{}, 2)
			c := clientNotified(t, a, func(s ndk.Status) {
				if s == ndk.StatusConnectionReset {
					resets <- struct{}{}
				}
			})
			disc := make(chan struct{}, 1)
			bd.connectNotified(t, c, 7301, func() { disc <- struct{}{} })
			if err := c.rcq.Arm(ndk.CQNotifyAny); err != nil {
				t.Fatal(err)
			}
			if a.Err() != nil {
				t.Fatalf("Err before the daemon went: %v", a.Err())
			}

			_ = d.Cmd.Process.Signal(sig)
			select {
			case <-d.Done:
			case <-time.After(15 * time.Second):
				t.Fatalf("daemon still running after %v:\n%s", sig, d.Logs)
			}
			gone := time.Now()
			select {
			case <-resets:
			case <-time.After(time.Second):
				t.Fatal("the armed CQ's callback did not fire within 1 s of the daemon's exit")
			}
			select {
			case <-disc:
			case <-time.After(time.Second):
				t.Fatal("the connector's disconnect did not fire within 1 s of the daemon's exit")
			}
			t.Logf("learnt in %v", time.Since(gone))
			select {
			case <-a.Gone():
			default:
				t.Error("Gone not closed after the disconnects fired")
			}
			err = a.Err()
			if !errors.Is(err, ndk.ErrConnectionReset) || !strings.Contains(err.Error(), "daemon "+sock+" went away") {
				t.Fatalf("Err = %v, want STATUS_CONNECTION_RESET naming %s", err, sock)
			}
			if err := c.rcq.Arm(ndk.CQNotifyAny); !errors.Is(err, ndk.ErrConnectionReset) {
				t.Errorf("Arm after the daemon went: %v, want ErrConnectionReset", err)
			}
			s, _ := c.mr.SGE(0, 64)
			if err := c.qp.Send(nil, []ndk.SGE{s}, 0); !errors.Is(err, ndk.ErrConnectionReset) {
				t.Errorf("Send after the daemon went: %v, want ErrConnectionReset", err)
			}
			if _, err := a.CreatePD(); !errors.Is(err, ndk.ErrConnectionReset) {
				t.Errorf("CreatePD after the daemon went: %v, want ErrConnectionReset", err)
			}
		})
	}
}
