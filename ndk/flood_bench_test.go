package ndk

import (
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
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

// BenchmarkFloodRTT measures the round trip of a well-behaved QP beside a
// flooded one: P READs 64 bytes of V's memory, one READ at a time, on the
// stream's QP, without and with a flood of V, in alternating rounds of one
// run. rtt-ratio is the flooded median over the unloaded median (issue
// 25's goal: <= 2). "duplicate-reads" is TestFloodOfReads' flood: 16 READs
// of 64 KiB cycled, every one after the first round a duplicate that V
// answers again; "duplicate-atomics" cycles one FETCH_ADD's duplicate;
// "unknown-qp" floods frames V drops as soon as they are parsed, the
// floor: what receiving a flood costs before any duplicate is answered.
func BenchmarkFloodRTT(b *testing.B) {
	for _, c := range []struct {
		name  string
		start func(b *testing.B, bed *floodBed)
	}{
		{"duplicate-reads", func(b *testing.B, bed *floodBed) { bed.readFlood(b) }},
		{"duplicate-atomics", func(b *testing.B, bed *floodBed) { bed.atomicFlood(b) }},
		{"unknown-qp", func(b *testing.B, bed *floodBed) {
			bed.fp.frames = append(bed.fp.frames, bed.floodFrame(b, rocev2.Headers{
				BTH: rocev2.BTHFields{Opcode: rocev2.RCFetchAdd, PSN: 1, PKey: rocev2.DefaultPKey, DestQP: 0x7FFF},
			}, nil))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			bed := newFloodBed(b, cm.Params{}, Options{})
			c.start(b, bed)
			p := bed.pinger(b)
			p.run(b, 200) // warm up
			const n = 300
			var base, loaded []time.Duration
			b.ResetTimer()
			for range b.N {
				base = append(base, p.run(b, n)...)
				bed.fp.on.Store(true)
				loaded = append(loaded, p.run(b, n)...)
				bed.fp.on.Store(false)
			}
			b.StopTimer()
			mb, ml := medianRTT(base), medianRTT(loaded)
			b.ReportMetric(float64(ml)/float64(mb), "rtt-ratio")
			b.ReportMetric(float64(mb/time.Nanosecond), "ns-rtt-unloaded")
			b.ReportMetric(float64(ml/time.Nanosecond), "ns-rtt-flooded")
		})
	}
}

func medianRTT(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// pinger READs 64 bytes of V's memory from P, one at a time.
type pinger struct {
	q       *QP
	icq     *CQ
	sgl     []SGE
	addr    uint64
	token   uint32
	results [4]Result
}

func (b *floodBed) pinger(t testing.TB) *pinger {
	t.Helper()
	mr, err := b.v.pd.RegisterMR(make([]byte, 64), MRFlagAllowRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := b.stream.x.mr.SGE(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	return &pinger{q: b.stream.qx, icq: b.stream.x.icq, sgl: []SGE{sink}, addr: mr.Addr(), token: mr.RemoteToken()}
}

// run times n READs, each posted when the one before completed.
func (p *pinger) run(t testing.TB, n int) []time.Duration {
	rtts := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := p.q.Read(nil, p.sgl, p.addr, p.token, 0); err != nil {
			t.Fatal(err)
		}
		for {
			if k := p.icq.GetResults(p.results[:]); k > 0 {
				if p.results[0].Status != StatusSuccess {
					t.Fatalf("READ completed %+v", p.results[0])
				}
				break
			}
			if time.Since(start) > time.Minute {
				t.Fatal("a READ did not complete for a minute")
			}
			runtime.Gosched()
		}
		rtts = append(rtts, time.Since(start))
	}
	return rtts
}

// atomicFlood connects a QP of V's to F and sets the flood's frames: one
// FETCH_ADD, executed once, then answered again from its responder
// resource as a duplicate every time it comes round.
func (b *floodBed) atomicFlood(t testing.TB) *QP {
	t.Helper()
	region := make([]byte, 64)
	mr, err := b.v.pd.RegisterMR(region, MRFlagAllowRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	fq := b.v.createQP(t)
	const fPSN = 0x100
	if err := fq.ConnectOOB(Endpoint{IP: floodIP, MAC: floodMAC[:], QPN: 0x7778, PSN: fPSN}, ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	b.fp.frames = append(b.fp.frames, b.floodFrame(t, rocev2.Headers{
		BTH:       rocev2.BTHFields{Opcode: rocev2.RCFetchAdd, PSN: fPSN, PKey: rocev2.DefaultPKey, DestQP: fq.QPN(), AckReq: true},
		AtomicETH: rocev2.AtomicETHFields{VA: mr.Addr(), RKey: mr.RemoteToken(), SwapAdd: 1},
	}, nil))
	return fq
}
