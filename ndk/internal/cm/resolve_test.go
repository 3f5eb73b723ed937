package cm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestResolvePath resolves the peer of a veth pair inside the pair's
// namespaces, with and without static neighbour entries, and checks the
// unreachable cases.
func TestResolvePath(t *testing.T) {
	for _, static := range []bool{true, false} {
		name := "dynamic"
		if static {
			name = "static"
		}
		t.Run(name, func(t *testing.T) {
			p := harness.New(t, harness.Config{MTU: 9000, StaticNeighbours: static})
			for _, dst := range []netip.Addr{p.B.IPv4, p.B.IPv6} {
				var path cm.PathInfo
				err := p.A.Do(func() error {
					var err error
					path, err = (&cm.Resolver{NeighbourTimeout: 5 * time.Second}).Resolve(netip.Addr{}, dst)
					return err
				})
				if err != nil {
					t.Fatalf("resolve %v: %v", dst, err)
				}
				wantLocal := p.A.IPv4
				if dst.Is6() {
					wantLocal = p.A.IPv6
				}
				if path.LocalIP != wantLocal || path.RemoteIP != dst || !bytes.Equal(path.LocalMAC[:], p.A.MAC) ||
					!bytes.Equal(path.RemoteMAC[:], p.B.MAC) || path.Ifindex != p.A.Ifindex || path.Ifname != p.A.Link || path.MTU != 9000 {
					t.Fatalf("path to %v: %+v (A %s %v, B %v)", dst, path, p.A.Link, p.A.MAC, p.B.MAC)
				}
			}
			// No route: NETWORK_UNREACHABLE. A silent on-link address:
			// HOST_UNREACHABLE after the bounded wait.
			err := p.A.Do(func() error {
				_, err := cm.ResolvePath(netip.MustParseAddr("198.19.200.1"))
				return err
			})
			if !errors.Is(err, ndkpi.ErrNetworkUnreachable) {
				t.Fatalf("off-link address: %v", err)
			}
			silent := netip.AddrFrom4([4]byte{p.B.IPv4.As4()[0], p.B.IPv4.As4()[1], p.B.IPv4.As4()[2], 99})
			start := time.Now()
			err = p.A.Do(func() error {
				_, err := (&cm.Resolver{NeighbourTimeout: 500 * time.Millisecond}).Resolve(netip.Addr{}, silent)
				return err
			})
			if !errors.Is(err, ndkpi.ErrHostUnreachable) || time.Since(start) > 5*time.Second {
				t.Fatalf("silent neighbour %v: %v after %v", silent, err, time.Since(start))
			}
		})
	}
}
