package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// Seed 004 on the veth pair: a SendAndInvalidate with a token the
// receiver cannot invalidate makes the receiver's provider abort the
// connection: both requests fail, the receiver's CM sends a DREQ, and
// both consumers' disconnect callbacks fire.
func TestSeedInvalidTokenAbortsConnection(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p, a, b := pair(t, m, harness.Config{}, ndk.Options{}, ndk.Options{})
		dst := netip.AddrPortFrom(p.B.IPv4, 4791)
		srv := serve(t, b, dst, nil)
		cl := dial(t, a, dst, nil)
		sc := srv.next(t)
		if err := cl.qp.SendAndInvalidate("bad", cl.rb.sgl(8), 0, 0xdeadbeef); err != nil {
			t.Fatal(err)
		}
		if r := waitCQ(t, b.RCQ, "recv", 5*time.Second); r.Status == ndk.StatusSuccess {
			t.Fatalf("receive of an invalid token succeeded: %+v", r)
		}
		if r := waitCQ(t, a.ICQ, "bad", 5*time.Second); r.Status == ndk.StatusSuccess {
			t.Fatalf("send with an invalid token succeeded: %+v", r)
		}
		closed(t, "the receiver's disconnect event", sc.disconnected, 5*time.Second)
		closed(t, "the sender's disconnect event", cl.disconnected, 5*time.Second)
		if n := b.Adapter.CMStats().Sent[rocev2.AttrDREQ]; n == 0 {
			t.Fatal("the receiver sent no DREQ: the CM connection was not torn down")
		}
		if cl.qp.Connected() || sc.qp.Connected() {
			t.Fatal("a QP is still connected")
		}
	})
}
