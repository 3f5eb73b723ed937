package daemon

import (
	"encoding/json"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// The containment of panics, class by class: whatever input makes a
// session's handling panic (a missing check, which the hostile tests and
// fuzzers hunt), the panic ends that session, counted under "panic", and
// the goroutine it ran on (the engine's, for the relay) goes on. Each
// test provokes the panic by giving the handling state no correct
// session has.

// socketPair returns the daemon's end and the client's end of a
// connected SOCK_SEQPACKET pair.
func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// closedSoon checks that the client's end sees the daemon close it.
func closedSoon(t *testing.T, c *net.UnixConn) {
	t.Helper()
	buf := make([]byte, proto.MaxMessage)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, _, _, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("session not closed after its panic")
			}
			return
		}
	}
}

// testRelay is a relay over a fresh session segment, outside any engine.
func testRelay(t *testing.T) (*relay, *Server, *net.UnixConn) {
	t.Helper()
	srv := New(nil, Config{})
	dc, cc := socketPair(t)
	ss := newSession(srv, dc, &unix.Ucred{Pid: int32(os.Getpid())})
	seg, err := shm.NewSegment("contain-test", proto.SessionSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seg.Close() })
	r := &relay{ss: ss, seg: seg}
	for i := range r.writes {
		r.writes[i] = seg.Word64(8 * i)
	}
	for i := range r.post {
		r.post[i] = seg.Word64(proto.PostBitmap + 8*i)
		r.arm[i] = seg.Word64(proto.ArmBitmap + 8*i)
	}
	ss.relay = r
	return r, srv, cc
}

func TestPanicContained(t *testing.T) {
	for _, c := range []struct {
		name string
		// arrange gives the relay state whose handling panics: a QP
		// without its rings (the bitmap and record classes), a CQ
		// without its ring (the shared page class).
		arrange func(r *relay)
		run     func(r *relay)
	}{
		{"post bitmap and ring records", func(r *relay) {
			r.slots = []*sQP{{}}
			r.post[0].Store(1)
		}, func(r *relay) { r.Poll() }},
		{"CQ words in the pass", func(r *relay) { r.cqs = []*sCQ{{}} }, func(r *relay) { r.Poll() }},
		{"CQ words before a sleep", func(r *relay) { r.cqs = []*sCQ{{}} }, func(r *relay) { r.Idle() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, srv, cc := testRelay(t)
			c.arrange(r)
			c.run(r) // a panic that escaped would end the test binary
			if !r.stopped {
				t.Fatal("the relay still serves the session that panicked")
			}
			if n := r.Poll(); n != 0 {
				t.Fatalf("a stopped relay's pass moved %d", n)
			}
			closedSoon(t, cc)
			if got := srv.ended.snapshot()["panic"]; got != 1 {
				t.Fatalf("sessions ended for a panic: %d, want 1", got)
			}
		})
	}
}

// TestPanicContainedControl: a control message whose handling panics (a
// hello on a daemon without an adapter) ends that session alone.
func TestPanicContainedControl(t *testing.T) {
	srv := New(nil, Config{})
	dc, cc := socketPair(t)
	ss := newSession(srv, dc, &unix.Ucred{Pid: int32(os.Getpid())})
	if err := srv.book.openSession(0); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); ss.serve() }()
	b, _ := json.Marshal(&proto.Request{ID: 1, Op: proto.OpHello, Version: proto.Version})
	if _, err := cc.Write(b); err != nil {
		t.Fatal(err)
	}
	closedSoon(t, cc)
	<-done
	if got := srv.ended.snapshot()["panic"]; got != 1 {
		t.Fatalf("sessions ended for a panic: %d, want 1", got)
	}
}
