package ndk

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
)

// BenchmarkFloodRatio measures the well-behaved stream of the flood tests
// (64-byte SENDs from P to V, 4 in flight) without and with a flood of V,
// in alternating rounds of one run so that the machine's noise falls on
// both; each iteration is one pair of rounds. ratio is the flooded message
// rate over the unloaded one (issue 13's goal: >= 0.5). The flood costs
// no CPU of its own: V's port hands V's engine prebuilt frames, half of
// every receive batch, so what the stream loses is what V's processing of
// the flood costs it, the worst case of a flood at line rate.
func BenchmarkFloodRatio(b *testing.B) {
	for _, c := range []struct {
		name  string
		start func(b *testing.B, bed *floodBed) (stop func())
	}{
		{"reads", func(b *testing.B, bed *floodBed) func() { bed.readFlood(b); return func() {} }},
		{"connect-requests", func(b *testing.B, bed *floodBed) func() {
			return bed.reqFlood(b, netip.AddrPortFrom(pipeIPA, 7802))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			bed := newFloodBed(b, cm.Params{}, Options{})
			stop := c.start(b, bed)
			defer stop()
			const n = 500
			b.ResetTimer()
			r, base, loaded := bed.ratio(b, b.N, n, func() { bed.fp.on.Store(true) }, func() { bed.fp.on.Store(false) })
			b.StopTimer()
			b.ReportMetric(r, "ratio")
			b.ReportMetric(float64(base/time.Nanosecond), "ns/msg-unloaded")
			b.ReportMetric(float64(loaded/time.Nanosecond), "ns/msg-flooded")
		})
	}
}
