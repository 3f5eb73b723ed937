package shm

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// unixPair returns the two ends of a SOCK_SEQPACKET socketpair as
// *net.UnixConn, the way a daemon and an application are connected.
func unixPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fileConn(t, fds[0]), fileConn(t, fds[1])
}

func fileConn(t testing.TB, fd int) *net.UnixConn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "unix")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UnixConn)
}

// openFDs counts this process's open descriptors, to catch leaks.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestSendRecvFDs(t *testing.T) {
	a, b := unixPair(t)
	seg := newTestSegment(t, 4096)
	efd, err := NewEventfd()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)

	if err := SendFDs(a, []byte("hello"), seg.FD(), efd); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, fds, err := RecvFDs(b, buf, 4)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "hello" || len(fds) != 2 {
		t.Fatalf("got %q with %d descriptors, want \"hello\" with 2", buf[:n], len(fds))
	}
	peer, err := MapSegment(fds[0], seg.Size())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peer.Bytes()[0] = 0x5a
	if seg.Bytes()[0] != 0x5a {
		t.Fatal("received segment does not share memory with the sent one")
	}
	flags, err := unix.FcntlInt(uintptr(fds[1]), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("received eventfd: F_GETFD = %#x, %v; want close-on-exec", flags, err)
	}
	unix.Close(fds[1])

	// A message without descriptors is fine too.
	if err := SendFDs(a, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, fds, err := RecvFDs(b, buf, 1); err != nil || n != 1 || len(fds) != 0 {
		t.Fatalf("RecvFDs = %d, %v, %v; want 1 byte and no descriptors", n, fds, err)
	}
}

func TestSendFDsRefuses(t *testing.T) {
	a, _ := unixPair(t)
	if err := SendFDs(a, nil, 0); err == nil {
		t.Error("SendFDs with an empty message succeeded")
	}
	if err := SendFDs(a, []byte("x"), make([]int, MaxFDs+1)...); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("SendFDs with %d descriptors: %v, want a bound error", MaxFDs+1, err)
	}
}

// TestRecvFDsClosesOnError sends messages RecvFDs must refuse and checks
// that none of the descriptors they brought stays open.
func TestRecvFDsClosesOnError(t *testing.T) {
	a, b := unixPair(t)
	efd, err := NewEventfd()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	before := openFDs(t)

	if err := SendFDs(a, []byte("x"), efd, efd, efd); err != nil {
		t.Fatal(err)
	}
	if _, fds, err := RecvFDs(b, make([]byte, 8), 2); err == nil || fds != nil {
		t.Errorf("3 descriptors with a bound of 2: %v, %v; want an error and none", fds, err)
	} else if !strings.Contains(err.Error(), "more than 2") {
		t.Errorf("error %q does not name the bound", err)
	}

	if err := SendFDs(a, []byte("too long"), efd); err != nil {
		t.Fatal(err)
	}
	if _, fds, err := RecvFDs(b, make([]byte, 4), 2); err == nil || fds != nil {
		t.Errorf("8-byte message into 4 bytes: %v, %v; want an error and none", fds, err)
	}

	if got := openFDs(t); got != before {
		t.Errorf("%d descriptors open after refused receives, %d before", got, before)
	}
	if _, _, err := RecvFDs(b, make([]byte, 8), 0); err == nil {
		t.Error("RecvFDs with a bound of 0 succeeded")
	}

	a.Close()
	if _, _, err := RecvFDs(b, make([]byte, 8), 1); !errors.Is(err, io.EOF) {
		t.Errorf("RecvFDs after the peer closed: %v, want io.EOF", err)
	}
}
