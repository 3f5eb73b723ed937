package cm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestPassiveAckTimeoutFromREQ: the passive side's QP takes its ACK
// timeout from the REQ's LocalAckTimeout, whatever the active side put
// there. The interop peers differ: Debian 12's kernel (6.1) still has
// rdma_cm's RoCE packet lifetime 18 and sends 19; Debian 13's (6.12) has
// 16 and sends 17 for rping; perftest 25.01 sets its ACK timeout option
// to 14, which rdma_cm turns into packet lifetime 13 and the REQ into 16
// (cm_ack_timeout with rxe's ACK delay 15). test/interop's live REQ cases
// pin those values per peer.
func TestPassiveAckTimeoutFromREQ(t *testing.T) {
	for _, tc := range []struct {
		name      string
		plt, want uint8
	}{
		{"Debian 12 rdma_cm", 18, 19},
		{"Debian 13 rdma_cm", 16, 17},
		{"perftest 25.01 ACK timeout 14", 13, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The active side has the peer's packet lifetime; the passive
			// side's own (10) would give 11, so only the REQ can give want.
			pa, pb := cm.DefaultParams(), cm.DefaultParams()
			pa.PacketLifeTime, pb.PacketLifeTime = tc.plt, 10
			clk := cmtest.NewClock()
			link := cmtest.NewLink(clk, cmtest.Faults{})
			a, err := cm.New(cm.Config{Transport: link.A, Clock: clk, CAGUID: link.A.GUID(), Params: pa, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			b, err := cm.New(cm.Config{Transport: link.B, Clock: clk, CAGUID: link.B.GUID(), Params: pb, Seed: 2})
			if err != nil {
				t.Fatal(err)
			}
			link.A.Attach(a)
			link.B.Attach(b)
			t.Cleanup(func() { a.Close(); b.Close() })
			p := &pair{t: t, clk: clk, link: link, a: a, b: b}
			ls := listen(t, p.b, netip.AddrPortFrom(ipB, 7174))
			qpA, qpB := cmtest.NewQP(0x11, 0x1000), cmtest.NewQP(0x2c, 0x2000)
			var connected, accepted result
			active := p.a.NewConnector()
			if err := active.Connect(qpA, p.pathAB(), netip.AddrPort{}, netip.AddrPortFrom(ipB, 7174), cm.ConnectParams{}, connected.done); err != nil {
				t.Fatal(err)
			}
			p.clk.RunUntil(func() bool { return ls.count() == 1 }, time.Minute)
			passive := ls.conn(0)
			if passive == nil {
				t.Fatal("no connect event")
			}
			if err := passive.Accept(qpB, cm.AcceptParams{}, nil, accepted.done); err != nil {
				t.Fatal(err)
			}
			p.clk.RunUntil(connected.called, time.Minute)
			if n, err := connected.get(); n != 1 || err != nil {
				t.Fatalf("connect completed %d times: %v", n, err)
			}
			rb := qpB.Remote()
			if got := rb.AckTimeout; got != tc.want {
				t.Errorf("passive QP's ACK timeout %d, want the REQ's %d", got, tc.want)
			}
			if got, want := rb.AckTimeoutDuration(), 4096*time.Nanosecond<<tc.want; got != want {
				t.Errorf("passive QP's ACK timeout %v, want %v", got, want)
			}
			if p.link.A.Sent(rocev2.AttrREQ) != 1 {
				t.Errorf("%d REQs", p.link.A.Sent(rocev2.AttrREQ))
			}
		})
	}
}
