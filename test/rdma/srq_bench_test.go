package rdma

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// srqBench is 64 QP pairs on the veth pair whose receiving ends take their
// receives from one SRQ (srq set) or have receive queues of their own.
type srqBench struct {
	x, y  *host
	xqps  []*ndk.QP
	yqps  []*ndk.QP
	srq   *ndk.SRQ
	src   *region
	dst   *region
	ctxs  []any
	depth int
}

const srqBenchQPs, srqBenchDepth = 64, 4096

func newSRQBench(b *testing.B, x, y *host, shared bool) *srqBench {
	s := &srqBench{x: x, y: y, depth: srqBenchDepth}
	if shared {
		var err error
		if s.srq, err = y.PD.CreateSRQ(srqBenchDepth, 1, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	for i := range srqBenchQPs {
		cx := ndk.QPConfig{ReceiveQueueDepth: 1, InitiatorQueueDepth: 256, MaxInitiatorRequestSGE: 1}
		cy := ndk.QPConfig{InitiatorQueueDepth: 1, SRQ: s.srq}
		if !shared {
			cy.ReceiveQueueDepth, cy.MaxReceiveRequestSGE = srqBenchDepth/srqBenchQPs, 1
		}
		qa, qb := x.qpWith(i, cx), y.qpWith(i, cy)
		connect(b, x, y, qa, qb, ndk.ConnectOptions{})
		s.xqps, s.yqps = append(s.xqps, qa), append(s.yqps, qb)
	}
	s.src = x.region(benchMsg, 0)
	s.dst = y.region(benchMsg*srqBenchDepth, ndk.MRFlagAllowLocalWrite)
	for i := range srqBenchDepth {
		s.ctxs = append(s.ctxs, i)
		if err := s.post(i); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func (s *srqBench) post(slot int) error {
	sgl := s.dst.sgl(slot*benchMsg, benchMsg)
	if s.srq != nil {
		return s.srq.Receive(s.ctxs[slot], sgl)
	}
	return s.yqps[slot/(srqBenchDepth/srqBenchQPs)].Receive(s.ctxs[slot], sgl)
}

// rate sends n silent 64-byte SENDs round robin over the QPs, at most
// window unreceived (below every receive queue's depth, so no RNR NAK
// paces either mode), reposting each receive as it completes, from one
// goroutine; it returns receives per second.
func (s *srqBench) rate(b *testing.B, n, window int) float64 {
	sgl := s.src.sgl(0, benchMsg)
	rs := make([]ndk.Result, 64)
	sent, got := 0, 0
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for got < n {
		for sent < n && sent-got < window {
			err := s.xqps[sent%len(s.xqps)].Send(nil, sgl, ndk.OpFlagSilentSuccess)
			if errors.Is(err, ndk.ErrInsufficientResources) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			sent++
		}
		k := s.y.RCQ.GetResults(rs)
		for _, r := range rs[:k] {
			if r.Status != ndk.StatusSuccess {
				b.Fatalf("receive %+v", r)
			}
			if err := s.post(r.RequestContext.(int)); err != nil {
				b.Fatal(err)
			}
		}
		got += k
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d receives after 60s", got, n)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkSRQReceiveRate compares, in one run on the veth pair, the
// 64-byte receive rate of 64 QPs taking their receives from one SRQ with
// that of 64 QPs with a receive queue each (goal: srq/rq >= 0.9). Each
// iteration runs 20 pairs of short rounds; the medians are reported.
//
//	go test -run x -bench SRQReceiveRate -benchtime 3x ./test/rdma/
func BenchmarkSRQReceiveRate(b *testing.B) {
	x, y := newHosts(b, setup{cqDepth: 1 << 16})
	modes := []*srqBench{newSRQBench(b, x, y, false), newSRQBench(b, x, y, true)}
	// Short rounds in pairs, alternating which mode goes first: the load
	// other processes put on the machine changes between pairs far more
	// than within one, so each pair's ratio compares like with like, and
	// the median pair is reported.
	const msgs = 5000
	var rates [2][]float64
	var ratios []float64
	for b.Loop() {
		for k := range 20 {
			var r [2]float64
			for j := range 2 {
				i := (j + k) % 2
				m := modes[i]
				r[i] = m.rate(b, msgs, srqBenchDepth/2)
				rates[i] = append(rates[i], r[i])
			}
			ratios = append(ratios, r[1]/r[0])
		}
	}
	b.ReportMetric(median(rates[0]), "rq-msg/s")
	b.ReportMetric(median(rates[1]), "srq-msg/s")
	b.ReportMetric(median(ratios), "srq/rq")
}

// median returns the middle value of xs (sorting it).
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
