package e2e

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestWrongDestinationDroppedOnTheWire: B's program knows B's MAC and
// IPv4 address (loader.SetLocal). A sends B's QP RoCEv2 frames over the
// veth pair through AF_XDP with another host's IP (v4 or v6) or MAC as
// destination: the veth delivers them to B's XDP program all the same,
// which drops and counts each, so B's socket never sees them. The
// control, the same frame to B's own addresses, arrives byte for byte.
func TestWrongDestinationDroppedOnTheWire(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := harness.New(t, harness.Config{})
			a, b := openPair(t, p, m.mode, false)
			if err := b.XDP.SetLocal([6]byte(p.B.MAC), p.B.IPv4); err != nil {
				t.Fatal(err)
			}
			readdress := func(dstMAC rocev2.MAC, dst netip.Addr, src netip.Addr) []byte {
				f := roceFrame(t, p.A, p.B, testQPN, 1, pattern(64, 5))
				var pkt rocev2.Packet
				if err := rocev2.Parse(f, &pkt); err != nil {
					t.Fatal(err)
				}
				h := pkt.Headers
				h.Eth.Dst = dstMAC
				h.IP = rocev2.NewIPFields(src, dst)
				payload := bytes.Clone(pkt.Payload)
				out := make([]byte, h.FrameLen(len(payload)))
				if _, err := h.Encode(out, payload); err != nil {
					t.Fatal(err)
				}
				return out
			}
			bMAC := rocev2.MAC(p.B.MAC)
			for _, c := range []struct {
				name   string
				frame  []byte
				reason loader.Reason
			}{
				{"ipv4 to another host", readdress(bMAC, netip.MustParseAddr("198.18.0.9"), p.A.IPv4), loader.ReasonDropWrongDstIP},
				{"ipv6 to b's own but unlisted address", readdress(bMAC, p.B.IPv6, p.A.IPv6), loader.ReasonDropWrongDstIP},
				{"ipv6 to another host", readdress(bMAC, netip.MustParseAddr("2001:2::9"), p.A.IPv6), loader.ReasonDropWrongDstIP},
				{"another host's mac", readdress(rocev2.MAC{0x02, 0, 0, 0, 0, 0x99}, p.B.IPv4, p.A.IPv4), loader.ReasonDropWrongDstMAC},
				{"broadcast mac", readdress(rocev2.MAC{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, p.B.IPv4, p.A.IPv4), loader.ReasonDropWrongDstMAC},
			} {
				before, err := b.XDP.Counters()
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Send(c.frame); err != nil {
					t.Fatalf("%s: send: %v", c.name, err)
				}
				if got, _, err := b.Receive(200 * time.Millisecond); err == nil {
					t.Errorf("%s: delivered to B's socket: % x", c.name, got)
				}
				after, err := b.XDP.Counters()
				if err != nil {
					t.Fatal(err)
				}
				if after[c.reason] != before[c.reason]+1 {
					t.Errorf("%s: %s rose by %d, want 1\n%s", c.name, c.reason, after[c.reason]-before[c.reason], after.String())
				}
			}
			want := readdress(bMAC, p.B.IPv4, p.A.IPv4)
			if err := a.Send(want); err != nil {
				t.Fatal(err)
			}
			got, _, err := b.Receive(2 * time.Second)
			if err != nil {
				t.Fatalf("control, the frame to B's own addresses: %v", err)
			}
			if len(got) < len(want) || !bytes.Equal(got[:len(want)], want) {
				t.Fatalf("control frame differs\n got %x\nwant %x", got, want)
			}
		})
	}
}
