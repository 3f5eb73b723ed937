package daemon_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// refusedWith checks that m is a refusal with status st whose text names
// what.
func refusedWith(t *testing.T, m *proto.Message, st ndk.Status, what string) {
	t.Helper()
	if ndk.Status(m.Status) != st || !strings.Contains(m.Msg, what) {
		t.Fatalf("got status %#x %q, want %v naming %q", m.Status, m.Msg, st, what)
	}
}

func (bd *bed) status(t *testing.T) daemon.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var st daemon.Status
	if err := daemon.Query(ctx, bd.sock, daemon.OpAdminStatus, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestQuotaPerSession: each per-session quota refuses the object past it
// with STATUS_QUOTA_EXCEEDED naming the quota, counts the refusal, and
// gives the room back when an object closes (the control: the same
// request then succeeds).
func TestQuotaPerSession(t *testing.T) {
	bd := newBedWith(t, daemon.Config{Quotas: daemon.Quotas{PerSession: daemon.Limits{CQs: 2, Tokens: 2, Mappings: 4}}}, 0o600)
	r := dialRaw(t, bd.sock) // the session segment: one mapping
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})

	c1, _ := r.ok(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})
	r.ok(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})
	m, _ := r.call(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})
	refusedWith(t, m, ndk.StatusQuotaExceeded, "per_session.cqs")
	r.ok(&proto.Request{Op: proto.OpCloseCQ, H: c1.H})
	r.ok(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})

	// Three mappings held (session, two CQs): one arena fits, the next
	// does not.
	arena := func(id uint32) *proto.Message {
		seg, err := shm.NewSegment("quota-test", 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer seg.Close()
		m, _ := r.call(&proto.Request{Op: proto.OpArena, Arena: id, Size: 4096}, seg.FD())
		return m
	}
	if m := arena(1); m.Status != 0 {
		t.Fatalf("arena within the mappings quota: %#x %s", m.Status, m.Msg)
	}
	refusedWith(t, arena(2), ndk.StatusQuotaExceeded, "per_session.mappings")

	// Tokens: two MWs take both; an MR or a third window is refused.
	w1, _ := r.ok(&proto.Request{Op: proto.OpCreateMW, PD: pd.H})
	r.ok(&proto.Request{Op: proto.OpCreateMW, PD: pd.H})
	m, _ = r.call(&proto.Request{Op: proto.OpRegister, PD: pd.H, Arena: 1, Off: 0, Len: 4096, VA: 1 << 40})
	refusedWith(t, m, ndk.StatusQuotaExceeded, "per_session.tokens")
	r.ok(&proto.Request{Op: proto.OpCloseMW, H: w1.H})
	r.ok(&proto.Request{Op: proto.OpRegister, PD: pd.H, Arena: 1, Off: 0, Len: 4096, VA: 1 << 40})

	st := bd.status(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var stats daemon.Stats
	if err := daemon.Query(ctx, bd.sock, daemon.OpAdminStats, &stats); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]uint64{"cqs": 1, "mappings": 1, "tokens": 1, "qps": 0} {
		if st.QuotaExceeded[q] != want || stats.Daemon["quota_exceeded_"+q] != want {
			t.Errorf("quota %s exceeded: status %d, stats %d, want %d", q, st.QuotaExceeded[q], stats.Daemon["quota_exceeded_"+q], want)
		}
	}
}

// TestQuotaPerUIDAcrossSessions: a user's sessions share its quota, and a
// session that ends gives its share back.
func TestQuotaPerUIDAcrossSessions(t *testing.T) {
	bd := newBedWith(t, daemon.Config{Quotas: daemon.Quotas{SessionsPerUID: 2, PerUID: daemon.Limits{CQs: 3}}}, 0o600)
	a, b := dialRaw(t, bd.sock), dialRaw(t, bd.sock)
	a.ok(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})
	a.ok(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})
	b.ok(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})
	m, _ := b.call(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})
	refusedWith(t, m, ndk.StatusQuotaExceeded, "per_uid.cqs")

	// A third session of the same user is refused at its first request.
	c, m := helloOn(t, bd.sock)
	c.Close()
	refusedWith(t, m, ndk.StatusQuotaExceeded, "sessions_per_uid")

	// Control: once a's session ends, its CQs and its session are free.
	a.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, _ = b.call(&proto.Request{Op: proto.OpCreateCQ, Depth: 8})
		if m.Status == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's CQs not given back after its session ended: %#x %s", m.Status, m.Msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
	dialRaw(t, bd.sock)
}

// helloOn dials sock and says hello, returning the reply whatever it is.
func helloOn(t *testing.T, sock string) (*net.UnixConn, *proto.Message) {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	return c, helloConn(t, c)
}

func helloConn(t *testing.T, c *net.UnixConn) *proto.Message {
	t.Helper()
	b, _ := json.Marshal(&proto.Request{ID: 1, Op: proto.OpHello, Version: proto.Version})
	if err := shm.SendFDs(c, b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, proto.MaxMessage)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, fds, err := shm.RecvFDs(c, buf, shm.MaxFDs)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil || n == 0 {
		t.Fatalf("hello: no reply (%v)", err)
	}
	var m proto.Message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// dialAs connects to sock from a thread whose effective uid and gid are
// uid and gid (SO_PEERCRED reports the connecting thread's), then gives
// the thread its credentials back. A thread that cannot get them back
// stays locked, and the runtime ends it with the goroutine.
func dialAs(t *testing.T, sock string, uid, gid int) *net.UnixConn {
	t.Helper()
	type result struct {
		c   *net.UnixConn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Thread-only credential changes: the raw system calls, not
		// syscall.Setresuid, which changes every thread of the process.
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
			runtime.UnlockOSThread()
			done <- result{err: e}
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			done <- result{err: e} // the thread keeps a changed gid: let it die
			return
		}
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		_, _, e1 := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0))
		_, _, e2 := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), 0, ^uintptr(0))
		if e1 == 0 && e2 == 0 {
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("dial as uid %d gid %d: %v", uid, gid, r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

// TestAllowList: with an allow list, a peer whose uid and groups are not
// on it is refused at its first request with STATUS_ACCESS_DENIED and a
// text naming the list; a listed uid, or a member of a listed group, is
// served; root is always served.
func TestAllowList(t *testing.T) {
	bd := newBedWith(t, daemon.Config{Allow: daemon.Allow{UIDs: []uint32{65534}, GIDs: []uint32{64000}}}, 0o666)
	// The socket is reachable for every user: the allow list decides.
	for d := filepath.Dir(bd.sock); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := helloConn(t, dialAs(t, bd.sock, 64001, 64001))
	refusedWith(t, m, ndk.StatusAccessDenied, "allow list")
	for _, who := range []struct{ uid, gid int }{{65534, 65534}, {64001, 64000}, {0, 0}} {
		if m := helloConn(t, dialAs(t, bd.sock, who.uid, who.gid)); m.Status != 0 {
			t.Errorf("uid %d gid %d: refused %#x %s", who.uid, who.gid, m.Status, m.Msg)
		}
	}
	if st := bd.status(t); st.Refused != 1 {
		t.Errorf("refused = %d, want 1", st.Refused)
	}
}
