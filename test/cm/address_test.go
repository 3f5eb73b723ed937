package cm

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestAddressAddedAfterOpen: B's adapter takes RoCEv2 frames only for
// its interface's addresses (the steering program and the engines drop
// the rest), and follows the interface as addresses come and go: an
// address added to B's interface after B opened serves a connection to a
// listener on every address, whose REQ no Listen or Connect call named
// before it arrived.
func TestAddressAddedAfterOpen(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p, a, b := pair(t, m, harness.Config{}, ndk.Options{}, ndk.Options{})
		extra := netip.MustParseAddr("198.18.0.12")
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: extra.AsSlice(), Mask: net.CIDRMask(24, 32)}}
		if err := p.B.Do(func() error {
			l, err := netlink.LinkByName(p.B.Link)
			if err != nil {
				return err
			}
			return netlink.AddrAdd(l, addr)
		}); err != nil {
			t.Fatal(err)
		}
		dst := netip.AddrPortFrom(extra, 4791)
		srv := serve(t, b, netip.AddrPortFrom(netip.IPv4Unspecified(), 4791), []byte("on the new address"))
		// The watcher applies the change shortly after the kernel made it.
		var cl *client
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := tryDialWithin(t, a, dst, 2*time.Second)
			if err == nil {
				cl = c
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("connect to %v, added to B's interface after B opened: %v", dst, err)
			}
		}
		sc := srv.next(t)
		exchange(t, a, b, cl.qp, sc.rb, []byte("to the new address"))
	})
}

// tryDialWithin connects a new QP of x to dst, giving up after d.
func tryDialWithin(t *testing.T, x *host, dst netip.AddrPort, d time.Duration) (*client, error) {
	t.Helper()
	cl := &client{qp: x.qp(), rb: x.buffer(256), disconnected: make(chan struct{})}
	if err := cl.qp.Receive("recv", cl.rb.sgl(256)); err != nil {
		t.Fatal(err)
	}
	var err error
	if cl.c, err = x.Adapter.CreateConnector(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := cl.c.Connect(ctx, cl.qp, netip.AddrPort{}, dst, 4, 4, nil); err != nil {
		return nil, err
	}
	if err := cl.c.CompleteConnect(func() { close(cl.disconnected) }); err != nil {
		return nil, err
	}
	return cl, nil
}
