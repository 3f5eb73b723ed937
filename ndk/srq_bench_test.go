package ndk

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkSRQReceiveRate compares, in one run, the 64-byte receive rate
// of 64 QPs taking their receives from one SRQ with that of the same 64
// QPs each with a receive queue of its own, over the in-memory pipe (the
// engines and the API as on a veth pair, without the kernel's copy). The
// goal is srq/rq >= 0.9: a shared ring must not cost the receive path.
// Each iteration runs 20 pairs of short rounds; the medians are reported.
//
//	go test -run x -bench SRQReceiveRate -benchtime 5x ./ndk/
func BenchmarkSRQReceiveRate(b *testing.B) {
	const qps, depth, msg, window, msgs = 64, 1024, 64, 512, 2000
	srq := newSRQSides(b, qps, depth, msg, true)
	rq := newSRQSides(b, qps, depth, msg, false)
	// Short rounds in pairs, alternating which mode goes first: the load
	// other processes put on the machine changes between pairs far more
	// than within one, so each pair's ratio compares like with like, and
	// the median pair is reported.
	var rates [2][]float64
	var ratios []float64
	for b.Loop() {
		for k := range 20 {
			var r [2]float64
			for j := range 2 {
				i := (j + k) % 2
				m := []*srqSides{rq, srq}[i]
				r[i] = m.receiveRate(b, msgs, window)
				rates[i] = append(rates[i], r[i])
			}
			ratios = append(ratios, r[1]/r[0])
		}
	}
	b.ReportMetric(median(rates[0]), "rq-msg/s")
	b.ReportMetric(median(rates[1]), "srq-msg/s")
	b.ReportMetric(median(ratios), "srq/rq")
}

// receiveRate sends n 64-byte SENDs round robin over the QPs, at most
// window unreceived at once (below every receive queue's depth, so no RNR
// NAK paces either mode), reposting each receive as it completes, and
// returns receives per second.
func (s *srqSides) receiveRate(b *testing.B, n, window int) float64 {
	b.Helper()
	depth := len(s.recv) / s.msg
	perQP := depth / len(s.yqps)
	if !s.primed { // reposting keeps every receive posted between rounds
		s.primed = true
		for i := range depth {
			if err := s.post(i, i/perQP); err != nil {
				b.Fatal(err)
			}
		}
	}
	src := make([]byte, s.msg)
	smr, err := s.x.pd.RegisterMR(src, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = smr.Deregister() }()
	sgl := []SGE{{}}
	sgl[0], _ = smr.SGE(0, s.msg)
	var rs [64]Result
	var is [64]Result
	sent, got := 0, 0
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for got < n {
		for sent < n && sent-got < window {
			if err := s.xqps[sent%len(s.xqps)].Send(nil, sgl, OpFlagSilentSuccess); err != nil {
				break // initiator queue full: wait for ACKs
			}
			sent++
		}
		k := s.y.rcq.GetResults(rs[:])
		for _, r := range rs[:k] {
			if r.Status != StatusSuccess {
				b.Fatalf("receive %+v", r)
			}
			slot := r.RequestContext.(int)
			if err := s.post(slot, slot/perQP); err != nil {
				b.Fatal(err)
			}
		}
		got += k
		s.x.icq.GetResults(is[:]) // failures only (SILENT_SUCCESS)
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d receives after 60s", got, n)
		}
	}
	// Let the last sends' ACKs in before the other mode's round.
	for s.x.icq.GetResults(is[:]) > 0 {
	}
	return float64(n) / time.Since(start).Seconds()
}

// median returns the middle value of xs (sorting it).
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
