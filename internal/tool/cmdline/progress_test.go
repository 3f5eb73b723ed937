package cmdline

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestProgressOnlyOnATerminal: to a pipe progress writes nothing; to a
// terminal (a pseudo-terminal here) it writes a line it rewrites, and
// clears it when stopped.
func TestProgressOnlyOnATerminal(t *testing.T) {
	a := new(ndk.Adapter) // no engines: zero frames
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop := Progress(w, "perf x", a)
	time.Sleep(700 * time.Millisecond)
	stop()
	w.Close()
	var b bytes.Buffer
	b.ReadFrom(r)
	if b.Len() != 0 {
		t.Errorf("progress wrote %q to a pipe", b.String())
	}

	master, slave := openPTY(t)
	stop = Progress(slave, "perf x", a)
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 256)
		n, _ := master.Read(buf)
		got <- string(buf[:n])
	}()
	select {
	case s := <-got:
		if !strings.Contains(s, "perf x: ") || !strings.Contains(s, "0 frames sent, 0 received") || !strings.HasPrefix(s, "\r\033[K") {
			t.Errorf("progress on a terminal: %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Error("no progress on a terminal in 5 s")
	}
	stop()
	stop()
}

// openPTY opens a pseudo-terminal pair (posix_openpt, unlockpt, ptsname).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	master = os.NewFile(uintptr(fd), "ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}
