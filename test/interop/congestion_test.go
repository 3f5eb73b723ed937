package interop

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// ccOptions turn on both halves of DCQCN, with ECT(0) on every frame.
var ccOptions = ndk.Options{
	Congestion:   ndk.CongestionOptions{Mode: ndk.CongestionOn},
	TrafficClass: ndk.TrafficClass{ECN: ndk.ECT0},
}

// TestInteropCongestion runs a representative share of the cases against
// rxe, which ignores ECN and CNPs, with congestion control on (DCQCN,
// ECT(0) frames): rping both ways, perftest's WRITE and READ bandwidth and
// SEND and READ latency at 64 KiB both ways, the loss cases (loss-driven
// pacing and DCQCN together), and CE marks on rxe's frames, which ndkxdp
// answers with CNPs; every frame ndkxdp sent, CNPs included, must verify
// and decode in tshark.
func TestInteropCongestion(t *testing.T) {
	vm := sharedVM(t)
	p := attachWith(t, vm, ccOptions)
	t.Logf("ndkxdp on %s with congestion control on (DCQCN, ECT(0)) <-> rxe0 at %v", vm.Host.Tap, vm.Guest.IPv4)
	t.Run("rping", func(t *testing.T) { testRping(t, p, fullSet.rpingSizes) })
	t.Run("perftest", func(t *testing.T) {
		testPerftestOf(t, p, []perfCase{
			{"ib_write_bw", perftest.Write, perftest.BW},
			{"ib_read_bw", perftest.Read, perftest.BW},
			{"ib_send_lat", perftest.Send, perftest.Lat},
			{"ib_read_lat", perftest.Read, perftest.Lat},
		}, []int{65536})
	})
	t.Run("loss", func(t *testing.T) { testLoss(t, p) })
	t.Run("ce_marks", func(t *testing.T) { testCEMarks(t, p) })
	t.Run("frames", func(t *testing.T) {
		p.record(t, nil)
		checkFrames(t, p)
		n := 0
		for _, f := range p.framesNow(t) {
			var pkt rocev2.Packet
			if f.Outgoing && rocev2.Parse(f.Data, &pkt) == nil && pkt.BTH.Opcode == rocev2.CNP {
				n++
			}
		}
		if n == 0 {
			t.Fatal("no CNP among the frames ndkxdp sent: the decode check did not see one")
		}
		t.Logf("%d of them CNPs", n)
	})
	t.Logf("cases against rxe with congestion control on:\n| case | result | rxe's perftest | ndkxdp's perftest |\n|---|---|---|---|\n%s", p.table())
}

// testCEMarks: rxe's ib_write_bw client sends ECT(0) frames (-T 2) and
// netem in the guest marks 2% of them CE; ndkxdp's server, with
// congestion control on, answers with CNPs (counted in cnps_sent) to
// rxe's QP, which ignores them, and every WRITE completes.
func testCEMarks(t *testing.T, p *peer) {
	if err := p.vm.SetCEMarks(ctxFor(t, time.Minute), 2); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.vm.SetLoss(ctxFor(t, time.Minute), 0); err != nil {
			t.Errorf("remove the marking: %v", err)
		}
	}()
	p.capture(t)
	ctx := ctxFor(t, 3*time.Minute)
	prm := perftest.Params{Verb: perftest.Write, Kind: perftest.BW, Size: 65536, Iterations: 100, TxDepth: 4, Port: perfPort, MTU: p.dev.Adapter.PathMTU()}
	before := len(p.framesNow(t))
	sent0 := cnpsSent(p)
	var ours bytes.Buffer
	out := p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
		_, err := perftest.RunServer(ctx, prm, l, &ours)
		return err
	}, fmt.Sprintf("ib_write_bw %s -T 2 %v", guestArgs(prm), HostIPv4))
	t.Logf("rxe client, 2%% of its frames marked CE:\n%s", reportLines(out))
	requireRow(t, "rxe's client", out, out, prm)
	ce, cnps := 0, 0
	for _, f := range p.framesNow(t)[before:] {
		var pkt rocev2.Packet
		if rocev2.Parse(f.Data, &pkt) != nil {
			continue
		}
		switch {
		case !f.Outgoing && rocev2.ECNOf(pkt.IP.TOS) == rocev2.CE:
			ce++
		case f.Outgoing && pkt.BTH.Opcode == rocev2.CNP:
			cnps++
		}
	}
	sent := cnpsSent(p) - sent0
	t.Logf("%d CE-marked frames from rxe, %d CNPs in the capture, cnps_sent %d", ce, cnps, sent)
	switch {
	case ce == 0:
		t.Fatal("no CE-marked frame from rxe arrived: -T 2 did not make its frames ECN-capable, or netem did not mark")
	case cnps == 0 || sent == 0:
		t.Fatalf("ndkxdp sent no CNP for %d CE-marked frames", ce)
	}
}

func cnpsSent(p *peer) (n uint64) {
	for _, s := range p.dev.Adapter.Stats() {
		n += s.CNPsSent
	}
	return n
}
