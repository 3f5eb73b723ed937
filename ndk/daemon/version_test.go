package daemon_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"golang.org/x/sys/unix"
)

// TestHelloOfAnotherVersion: the daemon refuses a hello of another
// protocol version with STATUS_NDIS_BAD_VERSION and the message naming
// both versions (proto.VersionMismatch), gives the client nothing, and
// serves a hello of its own version on the same connection.
func TestHelloOfAnotherVersion(t *testing.T) {
	bd := newBed(t)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: bd.sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &raw{t: t, c: c}
	for _, v := range []int{proto.Version - 1, proto.Version + 1, 0} {
		m, fds := r.call(&proto.Request{Op: proto.OpHello, Version: v})
		for _, fd := range fds {
			unix.Close(fd)
		}
		want := fmt.Sprintf("client speaks protocol version %d, daemon %d", v, proto.Version)
		if ndk.Status(m.Status) != ndk.StatusNDISBadVersion || !strings.Contains(m.Msg, want) || len(fds) != 0 {
			t.Fatalf("hello of version %d: status %#x %q, %d descriptors; want NDIS_STATUS_BAD_VERSION naming %q, none", v, m.Status, m.Msg, len(fds), want)
		}
	}
	m, fds := r.call(&proto.Request{Op: proto.OpHello, Version: proto.Version})
	for _, fd := range fds {
		unix.Close(fd)
	}
	if m.Status != 0 || m.Version != proto.Version || len(fds) != 2 {
		t.Fatalf("hello of version %d after the refusals: %+v, %d descriptors", proto.Version, m, len(fds))
	}
}
