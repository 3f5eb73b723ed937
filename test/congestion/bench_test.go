package congestion

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkIncast runs, on one bed per bottleneck law in one run, 2, 4
// and 8 flows into the receiver with DCQCN on and off, the probe beside
// them, and reports per flow count: goodput as a share of the bottleneck
// (goodput-N-dcqcn, target >= 0.9; goodput-N-off), Jain's index over the
// flows' bytes (jain-N-dcqcn, target >= 0.95; jain-N-off), the probe's
// p99 round trip with DCQCN as a share of no-CC's (p99-N-dcqcn/off,
// target <= 0.3; p99-N-settled-dcqcn/off beside it counts only the probes
// posted after the first windows left the queue, to tell the start's
// burst from the steady state, not as the target) and the bytes sent
// again likewise (resent-N-dcqcn/off, target <= 0.1); and a single flow's
// share of the bottleneck alone with DCQCN (goodput-1, target >= 0.9).
// Beside the goodputs, goodput-N-settled(-dcqcn) counts only what
// completed after the first windows left the queue (settle): the steady
// state, to tell the start's loss from it, not as the target.
// The laws (aqms) are sub-benchmarks: the phantom queue is the bed's, and
// RED on the real queue shows what the phantom buys, the probe's tail
// (doc.go has both measured). Run with -benchtime 1x under the shared
// lock; -bench Incast/phantom runs one.
func BenchmarkIncast(b *testing.B) {
	for _, q := range aqms {
		b.Run(q.name, func(b *testing.B) { incast(b, q) })
	}
}

// aqm is a bottleneck law and the DCQCN settings measured with it.
type aqm struct {
	name string
	bn   Bottleneck
	on   cc
}

// aqms: HULL's phantom queue (the bed's default, alpha period scaled to
// the bed's frames), and RED with ecn on the real queue at the hardware's
// alpha period (55µs), as sch_red would mark.
var aqms = []aqm{
	{"phantom", defaultBottleneck, ccOn},
	{"red", redBottleneck, ccOnHardwareAlpha},
}

// redBottleneck marks ECN-capable frames as it drops the others: RED over
// the real queue from 256 KB to 1 MB (probability 0.2), every frame beyond.
var redBottleneck = Bottleneck{RateMbit: defaultBottleneck.RateMbit, LimitBytes: defaultBottleneck.LimitBytes, Gamma: 1,
	Mark: defaultBottleneck.Drop, Drop: defaultBottleneck.Drop}

// ccOnHardwareAlpha is ccOn with DCQCN's own alpha period.
var ccOnHardwareAlpha = func() cc {
	c := ccOn
	c.opts.Congestion.AlphaTimer = 0
	return c
}()

func incast(b *testing.B, q aqm) {
	bd := newBed(b, q.bn)
	const d = 2 * time.Second
	for b.Loop() {
		one := bd.run(b, q.on, 1, d, false)
		fmt.Printf("%s: 1 flow, dcqcn: %v\n", q.name, one)
		b.ReportMetric(one.share(bd.bn), "goodput-1")
		b.ReportMetric(one.settledShare(bd.bn), "goodput-1-settled")
		for _, n := range []int{2, 4, 8} {
			on := bd.run(b, q.on, n, d, true)
			off := bd.run(b, ccOff, n, d, true)
			fmt.Printf("%s: %d flows, dcqcn: %v\n%s: %d flows, off:   %v\n", q.name, n, on, q.name, n, off)
			b.ReportMetric(on.share(bd.bn), fmt.Sprintf("goodput-%d-dcqcn", n))
			b.ReportMetric(on.settledShare(bd.bn), fmt.Sprintf("goodput-%d-settled-dcqcn", n))
			b.ReportMetric(off.share(bd.bn), fmt.Sprintf("goodput-%d-off", n))
			b.ReportMetric(jain(on.perFlow), fmt.Sprintf("jain-%d-dcqcn", n))
			b.ReportMetric(jain(off.perFlow), fmt.Sprintf("jain-%d-off", n))
			b.ReportMetric(ratio(float64(p99(on.probeRTTs)), float64(p99(off.probeRTTs))), fmt.Sprintf("p99-%d-dcqcn/off", n))
			b.ReportMetric(ratio(float64(p99(on.settledRTTs())), float64(p99(off.settledRTTs()))), fmt.Sprintf("p99-%d-settled-dcqcn/off", n))
			b.ReportMetric(ratio(on.resentBytes, off.resentBytes), fmt.Sprintf("resent-%d-dcqcn/off", n))
		}
	}
}

// ratio is a/b, and 0 where both are 0 (nothing resent either way).
func ratio(a, b float64) float64 {
	if b == 0 {
		if a == 0 {
			return 0
		}
		return a / 1e-9
	}
	return a / b
}
