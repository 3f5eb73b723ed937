package congestion

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkIncast runs, on one bed in one run, 2, 4 and 8 flows into the
// receiver with DCQCN on and off, the probe beside them, and reports per
// flow count: goodput as a share of the bottleneck (goodput-N-dcqcn,
// target >= 0.9; goodput-N-off), Jain's index over the flows' bytes
// (jain-N-dcqcn, target >= 0.95; jain-N-off), the probe's p99 round trip
// with DCQCN as a share of no-CC's (p99-N-dcqcn/off, target <= 0.3;
// p99-N-settled-dcqcn/off beside it counts only the probes posted after
// the first windows left the queue, to tell the start's burst from the
// steady state, not as the target) and the bytes sent again likewise
// (resent-N-dcqcn/off, target <= 0.1); and a single flow's share of the
// bottleneck alone with DCQCN (goodput-1, target >= 0.9). Run with -benchtime 1x under the shared lock.
func BenchmarkIncast(b *testing.B) {
	bd := newBed(b, defaultBottleneck)
	const d = 2 * time.Second
	for b.Loop() {
		one := bd.run(b, ccOn, 1, d, false)
		fmt.Printf("1 flow, dcqcn: %v\n", one)
		b.ReportMetric(one.share(bd.bn), "goodput-1")
		for _, n := range []int{2, 4, 8} {
			on := bd.run(b, ccOn, n, d, true)
			off := bd.run(b, ccOff, n, d, true)
			fmt.Printf("%d flows, dcqcn: %v\n%d flows, off:   %v\n", n, on, n, off)
			b.ReportMetric(on.share(bd.bn), fmt.Sprintf("goodput-%d-dcqcn", n))
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
