package daemon_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// TestUnknownOp: an operation the daemon has no handler for is answered
// with one clear error, before the hello and after it, and the session
// goes on.
func TestUnknownOp(t *testing.T) {
	bd := newBed(t)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: bd.sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	early := &raw{t: t, c: c}
	r := dialRaw(t, bd.sock)
	for _, tc := range []struct {
		name string
		r    *raw
		op   string
	}{
		{"before hello", early, "teleport"},
		{"after hello", r, "teleport"},
		{"operator", r, "admin_teleport"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, fds := tc.r.call(&proto.Request{Op: tc.op})
			if len(fds) != 0 {
				t.Errorf("%d descriptors with the error", len(fds))
			}
			if ndk.Status(m.Status) != ndk.StatusInvalidDeviceRequest || !strings.Contains(m.Msg, `no such request "`+tc.op+`"`) {
				t.Fatalf("status %#x %q, want STATUS_INVALID_DEVICE_REQUEST, no such request %q", m.Status, m.Msg, tc.op)
			}
		})
	}
	// A known op before the hello is refused as such.
	if m, _ := early.call(&proto.Request{Op: proto.OpCreatePD}); ndk.Status(m.Status) != ndk.StatusInvalidDeviceRequest || m.Msg != "hello first" {
		t.Errorf("create_pd before hello: %#x %q", m.Status, m.Msg)
	}
	r.ok(&proto.Request{Op: proto.OpCreatePD})
}

// TestMalformedRequestBody: a request whose fields do not decode as its
// operation's (a string for a depth) ends the session, as garbage does;
// the daemon serves on.
func TestMalformedRequestBody(t *testing.T) {
	bd := newBed(t)
	r1 := dialRaw(t, bd.sock)
	r2 := dialRaw(t, bd.sock)
	if _, err := r2.c.Write([]byte(`{"id":9,"op":"create_cq","Depth":"deep"}`)); err != nil {
		t.Fatal(err)
	}
	_ = r2.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, proto.MaxMessage)
	if n, err := r2.c.Read(buf); err == nil && n > 0 {
		t.Fatalf("answered %s, want the session ended", buf[:n])
	}
	if n := bd.endedFor(t, "protocol"); n != 1 {
		t.Errorf("%d sessions ended for the protocol, want 1", n)
	}
	r1.ok(&proto.Request{Op: proto.OpCreatePD})
	bd.healthy(t)
}
