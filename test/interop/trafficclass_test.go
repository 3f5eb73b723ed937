package interop

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// reqTOS is the IP TOS rxe's client asks for in testREQTrafficClass: DSCP
// 26 (AF31) with ECT(0).
var reqTOS = rocev2.TOS(26, rocev2.ECT0)

// testREQTrafficClass: rxe's ib_write_bw client with -T sets its rdma_cm
// id's TOS, which its REQ's primary path carries and its frames too;
// ndkxdp's server, whose adapter sends TOS 0 by default, answers on that
// connection with the REQ's class, as a Linux passive side does (its QP's
// address comes from the REQ's path).
func testREQTrafficClass(t *testing.T, p *peer) {
	p.capture(t)
	before := len(p.framesNow(t))
	prm := perfCase{"ib_write_bw", perftest.Write, perftest.BW}.params(4096)
	prm.MTU = p.dev.Adapter.PathMTU()
	var ours bytes.Buffer
	ctx := ctxFor(t, 90*time.Second)
	out := p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
		_, err := perftest.RunServer(ctx, prm, l, &ours)
		return err
	}, fmt.Sprintf("ib_write_bw %s -T %d %v", guestArgs(prm), reqTOS, HostIPv4))
	requireRow(t, "rxe's client", out, out, prm)
	asked := map[uint32]uint8{} // rxe's QP: its REQ's traffic class
	mine := map[uint32]map[uint8]int{}
	theirs := map[uint8]int{}
	for _, f := range p.framesNow(t)[before:] {
		var pkt rocev2.Packet
		if rocev2.Parse(f.Data, &pkt) != nil {
			continue
		}
		if pkt.BTH.DestQP == rocev2.GSIQP {
			if mad, err := rocev2.DecodeMAD(pkt.Payload); err == nil && !f.Outgoing {
				if req, ok := mad.Message.(*rocev2.CMReq); ok {
					asked[req.LocalQPN] = req.Primary.TrafficClass
				}
			}
			continue
		}
		if !f.Outgoing {
			theirs[pkt.IP.TOS]++
			continue
		}
		if mine[pkt.BTH.DestQP] == nil {
			mine[pkt.BTH.DestQP] = map[uint8]int{}
		}
		mine[pkt.BTH.DestQP][pkt.IP.TOS]++
	}
	t.Logf("rxe's REQs (its QP: traffic class) %#x; its frames carried TOS %v, ours (by rxe's QP) %v", asked, theirs, mine)
	// perftest sets -T's TOS on the data connection's id only: the
	// control connection's REQ asks for 0, and our adapter's own class
	// (0) stays there.
	data := 0
	for qpn, tos := range asked {
		if tos == reqTOS {
			data++
		} else if tos != 0 {
			t.Errorf("rxe's QP %#x: REQ asked for traffic class %#x, want 0 or -T's %#x", qpn, tos, reqTOS)
		}
		if seen := mine[qpn]; len(seen) != 1 || seen[tos] == 0 {
			t.Errorf("our frames to rxe's QP %#x carried TOS %v, want only its REQ's %#x", qpn, seen, tos)
		}
	}
	if data != 1 {
		t.Errorf("%d of rxe's REQs asked for -T's %#x, want the data connection's", data, reqTOS)
	}
}
