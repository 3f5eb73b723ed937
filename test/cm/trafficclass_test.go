package cm

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestTrafficClassFollowsTheREQ: a REQ carries its adapter's traffic
// class (DSCP and ECN as the IP TOS byte), as rdma_cm's carries its id's
// TOS, and the passive side's frames on the connection carry the REQ's,
// as a Linux passive side's do (it builds its QP's address from the
// REQ's path). A REQ that asks for 0 leaves the passive side its own.
// A's adapter sends DSCP 26 with ECT(0) (TOS 0x6a); B's nothing.
func TestTrafficClassFollowsTheREQ(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		var ab, bb bytes.Buffer
		var mu sync.Mutex
		def := ndk.TrafficClass{DSCP: 26, ECN: ndk.ECT0}
		tos := rocev2.TOS(26, rocev2.ECT0)
		p, a, b := pair(t, m, harness.Config{StaticNeighbours: true},
			ndk.Options{TrafficClass: def, Capture: &lockedWriter{w: &ab, mu: &mu}},
			ndk.Options{Capture: &lockedWriter{w: &bb, mu: &mu}})
		// A connects to B: B's frames take the REQ's class.
		srvB := serve(t, b, netip.AddrPortFrom(p.B.IPv4, 7000), nil)
		clA := dial(t, a, netip.AddrPortFrom(p.B.IPv4, 7000), nil)
		scB := srvB.next(t)
		exchange(t, a, b, clA.qp, scB.rb, []byte("A to B"))
		exchange(t, b, a, scB.qp, clA.rb, []byte("B to A"))
		// B connects to A: its REQ asks for 0, and A keeps its own class.
		srvA := serve(t, a, netip.AddrPortFrom(p.A.IPv4, 7001), nil)
		clB := dial(t, b, netip.AddrPortFrom(p.A.IPv4, 7001), nil)
		scA := srvA.next(t)
		exchange(t, b, a, clB.qp, scA.rb, []byte("B to A again"))
		exchange(t, a, b, scA.qp, clB.rb, []byte("A to B again"))
		a.Close() // flush the captures
		b.Close()

		mu.Lock()
		defer mu.Unlock()
		reqs := map[netip.Addr][]uint8{}   // each side's REQs' traffic classes
		data := map[uint32]map[uint8]int{} // destination QP: TOS seen
		for _, capture := range [][]byte{ab.Bytes(), bb.Bytes()} {
			f, err := pcapfile.Decode(capture)
			if err != nil {
				t.Fatal(err)
			}
			var frames [][]byte
			for _, pk := range f.Packets {
				frames = append(frames, pk.Data)
			}
			for _, g := range decodeMADs(t, frames) {
				if req, ok := g.mad.Message.(*rocev2.CMReq); ok {
					reqs[g.pkt.IP.Src] = append(reqs[g.pkt.IP.Src], req.Primary.TrafficClass)
				}
			}
			for _, fr := range frames {
				var pkt rocev2.Packet
				if rocev2.Parse(fr, &pkt) != nil || pkt.BTH.DestQP == rocev2.GSIQP {
					continue
				}
				if data[pkt.BTH.DestQP] == nil {
					data[pkt.BTH.DestQP] = map[uint8]int{}
				}
				data[pkt.BTH.DestQP][pkt.IP.TOS]++
			}
		}
		if r := reqs[p.A.IPv4]; len(r) == 0 || r[0] != tos {
			t.Errorf("A's REQs carried traffic classes %#x, want %#x", r, tos)
		}
		if r := reqs[p.B.IPv4]; len(r) == 0 || r[0] != 0 {
			t.Errorf("B's REQs carried traffic classes %#x, want 0", r)
		}
		for _, c := range []struct {
			what string
			qpn  uint32
			want uint8
		}{
			{"A's frames to B's passive QP", scB.qp.QPN(), tos},
			{"B's passive frames to A's QP (the REQ's class)", clA.qp.QPN(), tos},
			{"B's active frames to A's passive QP", scA.qp.QPN(), 0},
			{"A's passive frames to B's QP (its own class)", clB.qp.QPN(), tos},
		} {
			seen := data[c.qpn]
			if len(seen) != 1 || seen[c.want] == 0 {
				t.Errorf("%s (QP %#x) carried TOS %v, want only %#x", c.what, c.qpn, seen, c.want)
			}
		}
	})
}
