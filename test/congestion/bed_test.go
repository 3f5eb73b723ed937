package congestion

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// The bed: host 0 receives, hosts 1 and 2 send, host 3 runs the latency
// probe; the hub's port toward host 0 is the bottleneck.
const (
	recvHost  = 0
	probeHost = 3
	hosts     = 4
	// mtu gives a 4096-byte path MTU: the htb rate counts frames, and
	// with 1024-byte payloads the headers alone would take 6% of it.
	mtu = 9000
	// writeSize and depth: each flow keeps depth WRITEs of writeSize in
	// flight, enough to fill the bottleneck's queue many times over.
	writeSize = 64 << 10
	depth     = 8
	// probeEvery is the probe's gap between its READs.
	probeEvery = 200 * time.Microsecond
	probeSize  = 64
)

// Bottleneck is the hub's egress toward the receiver: an htb class at
// RateMbit whose queue holds LimitBytes, behind the marker
// (marker_test.go), HULL's phantom queue: ECN-capable frames are marked
// by RED (Mark) over a phantom queue draining at Gamma times RateMbit,
// the others dropped by RED (Drop) over the real queue. Gamma 1 with
// Mark the same as Drop is RED with ecn on the real queue.
type Bottleneck struct {
	RateMbit   int
	LimitBytes int
	Gamma      float64
	Mark, Drop red
}

// defaultBottleneck: 300 Mbit/s, which the two senders of a 2-core machine
// exceed several times over; the queue holds 4.5 MB, what 8 flows keep in
// flight with their headers (8 x 512 KiB of payload in 1,024 frames: 4.28
// MB), so that the start's burst, sent before any mark can come back, is
// queued, not dropped. The phantom drains at γ = 0.98 of the port's rate
// and marks by DCQCN's published switch thresholds (Kmin 5 KB, Kmax 200
// KB) with Pmax scaled to the port: 1 (pmax says why). Frames that are not
// ECN-capable are dropped from 256 KB of real queue (7ms) with a
// probability rising to 0.2 at 1 MB, every one beyond.
var defaultBottleneck = Bottleneck{RateMbit: 300, LimitBytes: 4500000, Gamma: 0.98,
	Mark: red{Min: 5000, Max: 200000, MaxP: pmax}, Drop: red{Min: 256000, Max: 1000000, MaxP: 0.2}}

// pmax is the phantom's marking probability at Kmax. DCQCN's 1% is set
// for a 40 Gbit/s port, where a flow sends tens of frames per CNP
// interval (50µs) and 1% of them is a CNP in a fair share of intervals;
// at this port's 9,155 frames a second, 1% is one mark per 11ms, so
// marking began in earnest only past Kmax, where every frame is marked and
// a flow is cut once per frame of its backlog (doc.go). Scaling Pmax by the
// ports' frame rates (about 130) caps it at 1: the marks rise with the
// phantom queue from Kmin to Kmax, as the published law's do at its port.
const pmax = 1

// flowAckTimeout is the flows' local ACK timeout: rdma_cm's for RoCE
// (packet lifetime CMA_IBOE_PACKET_LIFETIME 16, plus one: timeout code
// 17, about 537ms), since the bottleneck's queue holds 120ms, and the
// default 67ms (code 14) would have the flows whose frames wait behind the
// start's burst send their windows again into that queue (go-back-N).
// The probe keeps the default: a probe READ lost in a RED drop is asked
// again after an eighth of it (rc's doc), which is the tail no-CC's p99
// measures.
const flowAckTimeout = 4096 * time.Nanosecond << 17

// bed is the star, its bottleneck shaped and marked.
type bed struct {
	star   *vethpair.Star
	bn     Bottleneck
	marker *marker
}

func newBed(t testing.TB, bn Bottleneck) *bed {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tc")
	s, err := vethpair.NewStar(vethpair.StarConfig{Hosts: hosts, MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	b := &bed{star: s, bn: bn}
	port := s.Ports[recvHost]
	rate := fmt.Sprintf("%dmbit", bn.RateMbit)
	for _, args := range [][]string{
		{"qdisc", "replace", "dev", port, "root", "handle", "1:", "htb", "default", "1"},
		{"class", "add", "dev", port, "parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil", rate, "burst", "16k", "cburst", "16k"},
		{"qdisc", "add", "dev", port, "parent", "1:1", "handle", "10:", "bfifo", "limit", strconv.Itoa(bn.LimitBytes)},
	} {
		if out, err := b.tc(args...); err != nil {
			t.Fatalf("tc %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	err = s.Hub.Do(func() error {
		nl, err := s.Hub.Netlink()
		if err != nil {
			return err
		}
		defer nl.Close()
		l, err := nl.LinkByName(port)
		if err != nil {
			return fmt.Errorf("find %s: %w", port, err)
		}
		b.marker, err = newMarker(l.Attrs().Index, bn.RateMbit*1e6/8, int(bn.Gamma*float64(bn.RateMbit)*1e6/8), bn.Mark, bn.Drop)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.marker.close)
	return b
}

func (b *bed) tc(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.star.Hub.Command(ctx, "tc", args...).CombinedOutput()
}

// qdiscStats are the bottleneck's counts since it was made: bytes the htb
// sent, frames its queue dropped full, frames the marker marked CE and
// dropped.
type qdiscStats struct{ sent, tailDropped, marked, dropped uint64 }

var sentRE = regexp.MustCompile(`Sent (\d+) bytes (\d+) pkt \(dropped (\d+)`)

func (b *bed) stats(t testing.TB) qdiscStats {
	t.Helper()
	out, err := b.tc("-s", "qdisc", "show", "dev", b.star.Ports[recvHost], "parent", "1:1")
	if err != nil {
		t.Fatalf("tc -s qdisc: %v: %s", err, out)
	}
	m := sentRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("tc -s qdisc: no counts in %q", out)
	}
	n := func(b []byte) uint64 { v, _ := strconv.ParseUint(string(b), 10, 64); return v }
	marked, dropped, err := b.marker.counts()
	if err != nil {
		t.Fatal(err)
	}
	return qdiscStats{sent: n(m[1]), tailDropped: n(m[3]), marked: marked, dropped: dropped}
}

// cc is one side of the comparison: DCQCN with ECT(0) frames, or neither
// (what ndkxdp sends by default; loss-driven pacing runs in both).
type cc struct {
	name string
	opts ndk.Options
}

var (
	ccOn = cc{"dcqcn", ndk.Options{TrafficClass: ndk.TrafficClass{ECN: ndk.ECT0},
		Congestion: ndk.CongestionOptions{Mode: ndk.CongestionOn, AIRateMbps: aiRate, HAIRateMbps: haiRate, AlphaTimer: alphaTimer}}}
	ccOff = cc{"off", ndk.Options{}}
)

// aiRate and haiRate are DCQCN's increase steps scaled to the
// bottleneck: a tenth of the hardware's 5 and 50 Mb/s, which are sized
// for links of 10-100 Gb/s and add, per flow, a few percent of 300 Mbit/s
// each 300µs. In runs of 1s with 8 flows, Jain's index was 0.94 with
// those and 0.99 with these, at the same goodput (0.94 of the bottleneck).
const aiRate, haiRate = 0.5, 5

// alphaTimer is DCE_TCP_RTT scaled to the bed's frames. DCQCN's alpha
// counts the periods in which a CNP came, and its period (55µs) is set
// just above the CNP interval (50µs) so that a flow whose every frame is
// marked sees a CNP in every period and is cut by up to half (Zhu et al.,
// SIGCOMM 2015, section 5). Here a flow can have a CNP only per frame it
// sends, and at 8 flows a flow sends one 4 KiB frame every 0.9ms: with
// 55µs periods alpha stayed near 0.07 with every frame marked, each cut
// (3%) no more than the additive increase until the next, and 8 flows
// held the real queue at 0.7-0.8 MB.
const alphaTimer = 550 * time.Microsecond

// figures are one run's.
type figures struct {
	goodputMbps float64 // payload bytes the flows completed, over the run
	// settledMbps counts only what completed after settle, over the rest
	// of the run: the steady state without the start's burst.
	settledMbps float64
	perFlow     []float64 // each flow's payload bytes
	probeRTTs   []time.Duration
	probeAt     []time.Duration // when each probe READ was posted, from the start
	queue       []int64         // the real queue in bytes, every queueEvery (marker.realQueue)
	resentBytes float64         // data frames the senders sent beyond the first copy, in payload bytes
	cnpsSent    uint64          // by the receiver
	cnpsIn      uint64          // at the senders
	rateCuts    uint64          // at the senders
	lossCuts    uint64
	q           qdiscStats
	// failed lists the flows (and the probe) whose connection failed.
	failed []string
}

func (f figures) share(bn Bottleneck) float64 { return f.goodputMbps / float64(bn.RateMbit) }

func (f figures) settledShare(bn Bottleneck) float64 { return f.settledMbps / float64(bn.RateMbit) }

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything.
func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

// settle is how long the first windows take to leave the bottleneck: 8
// flows' 4.28 MB, sent before any mark can come back, take 114ms at 300
// Mbit/s.
const settle = 200 * time.Millisecond

// queueEvery is how often a run samples the real queue.
const queueEvery = 5 * time.Millisecond

// settledRTTs are the probe's round trips posted after settle.
func (f figures) settledRTTs() []time.Duration {
	var ds []time.Duration
	for i, at := range f.probeAt {
		if at >= settle {
			ds = append(ds, f.probeRTTs[i])
		}
	}
	return ds
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(0.99*float64(len(s))))-1)]
}

// run opens ndkxdp on every host with c, runs flows WRITE flows into the
// receiver (split between hosts 1 and 2) for d, with the probe's READs
// beside them if probe, then drains and closes the adapters.
func (b *bed) run(t testing.TB, c cc, flows int, d time.Duration, probe bool) figures {
	t.Helper()
	before := b.stats(t)
	var hs [hosts]*ndkhost.Host
	for i := range hosts {
		x, err := ndkhost.Open(b.star.Hosts[i], ndkhost.Config{Options: c.opts})
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		hs[i] = x
	}
	recv := hs[recvHost]
	sink, err := recv.Adapter.Memory(writeSize * depth)
	if err != nil {
		t.Fatal(err)
	}
	sinkMR, err := recv.PD.RegisterMR(sink, ndk.MRFlagAllowRemoteWrite|ndk.MRFlagAllowRemoteRead|ndk.MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	qpc := ndk.QPConfig{ReceiveQueueDepth: 16, InitiatorQueueDepth: 64, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}
	connect := func(x *ndkhost.Host, ctx any, opts ndk.ConnectOptions) *ndk.QP {
		t.Helper()
		cfg := qpc
		cfg.ReceiveCQ, cfg.InitiatorCQ, cfg.Context = x.RCQ, x.ICQ, ctx
		q, err := x.PD.CreateQP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ReceiveCQ, cfg.InitiatorCQ = recv.RCQ, recv.ICQ
		r, err := recv.PD.CreateQP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		eq, er := q.LocalEndpoint(), r.LocalEndpoint()
		if err := x.Net.Do(func() error { return q.ConnectOOB(er, opts) }); err != nil {
			t.Fatal(err)
		}
		if err := recv.Net.Do(func() error { return r.ConnectOOB(eq, opts) }); err != nil {
			t.Fatal(err)
		}
		return q
	}
	type sender struct {
		x     *ndkhost.Host
		qps   []*ndk.QP
		ids   []int
		src   []ndk.SGE
		start ndk.EngineStats
	}
	var senders []*sender
	for i := 1; i <= 2; i++ {
		s := &sender{x: hs[i]}
		mem, err := s.x.Adapter.Memory(writeSize)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := s.x.PD.RegisterMR(mem, ndk.MRFlagAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		s.src = []ndk.SGE{{Addr: mr.Addr(), Length: writeSize, Token: mr.LocalToken()}}
		senders = append(senders, s)
	}
	for f := range flows {
		s := senders[f%2]
		s.ids = append(s.ids, f)
		s.qps = append(s.qps, connect(s.x, f, ndk.ConnectOptions{AckTimeout: flowAckTimeout}))
	}
	for _, s := range senders {
		s.start = sum(s.x.Adapter.Stats())
	}
	recvStart := sum(recv.Adapter.Stats())

	fig := figures{perFlow: make([]float64, flows)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	var last time.Time
	var posted [2]int
	var earlyBytes float64
	for k, s := range senders {
		if len(s.qps) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]int, len(s.qps))
			done := make([]float64, len(s.qps))
			dead := make([]bool, len(s.qps))
			rs := make([]ndk.Result, 64)
			deadline := stop.Add(20 * time.Second)
			var early float64 // completed before settle
			settled := false
			for now := time.Now(); ; now = time.Now() {
				busy := false
				for i, q := range s.qps {
					for now.Before(stop) && out[i] < depth && !dead[i] {
						if err := q.Write(i, s.src, sinkMR.Addr(), sinkMR.RemoteToken(), 0); err != nil {
							t.Errorf("write: %v", err)
							return
						}
						out[i]++
						posted[k]++
						busy = true
					}
				}
				n := s.x.ICQ.GetResults(rs)
				for _, r := range rs[:n] {
					i := r.RequestContext.(int)
					out[i]--
					if r.Status != ndk.StatusSuccess {
						// The flow's connection failed (its retries spent);
						// the rest of its WRITEs come back flushed.
						if !dead[i] {
							dead[i] = true
							mu.Lock()
							fig.failed = append(fig.failed, fmt.Sprintf("flow %d: %v", s.ids[i], r.Status))
							mu.Unlock()
						}
						continue
					}
					done[i] += writeSize
				}
				if !settled && now.Sub(start) >= settle {
					settled = true
					for _, x := range done {
						early += x
					}
				}
				if !now.Before(stop) && !slices.ContainsFunc(out, func(n int) bool { return n > 0 }) {
					break
				}
				if now.After(deadline) {
					t.Errorf("flows still had WRITEs outstanding 20s after the run: %v", out)
					return
				}
				if n == 0 && !busy {
					runtime.Gosched()
				}
			}
			mu.Lock()
			for i, id := range s.ids {
				fig.perFlow[id] = done[i]
			}
			earlyBytes += early
			if t := time.Now(); t.After(last) {
				last = t
			}
			mu.Unlock()
		}()
	}
	if probe {
		wg.Add(1)
		px := hs[probeHost]
		q := connect(px, "probe", ndk.ConnectOptions{})
		mem, err := px.Adapter.Memory(probeSize)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := px.PD.RegisterMR(mem, ndk.MRFlagAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		sgl := []ndk.SGE{{Addr: mr.Addr(), Length: probeSize, Token: mr.LocalToken()}}
		go func() {
			defer wg.Done()
			var rs [1]ndk.Result
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := q.Read(nil, sgl, sinkMR.Addr(), sinkMR.RemoteToken(), 0); err != nil {
					t.Errorf("probe: %v", err)
					return
				}
				for px.ICQ.GetResults(rs[:]) == 0 {
					if time.Since(t0) > 10*time.Second {
						t.Error("probe READ unanswered for 10s")
						return
					}
					runtime.Gosched()
				}
				if rs[0].Status != ndk.StatusSuccess {
					mu.Lock()
					fig.failed = append(fig.failed, fmt.Sprintf("probe: %v", rs[0].Status))
					mu.Unlock()
					return
				}
				fig.probeRTTs = append(fig.probeRTTs, time.Since(t0))
				fig.probeAt = append(fig.probeAt, t0.Sub(start))
				time.Sleep(probeEvery)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop) {
			q, err := b.marker.realQueue(b.bn.RateMbit * 1e6 / 8)
			if err != nil {
				t.Error(err)
				return
			}
			fig.queue = append(fig.queue, q)
			time.Sleep(queueEvery)
		}
	}()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var total float64
	for _, x := range fig.perFlow {
		total += x
	}
	fig.goodputMbps = total * 8 / last.Sub(start).Seconds() / 1e6
	fig.settledMbps = (total - earlyBytes) * 8 / last.Sub(start.Add(settle)).Seconds() / 1e6
	pmtu := float64(hs[1].Adapter.PathMTU())
	for k, s := range senders {
		e := sum(s.x.Adapter.Stats())
		first := float64(posted[k]) * math.Ceil(writeSize/pmtu)
		if out := float64(e.FramesOut - s.start.FramesOut); out > first {
			fig.resentBytes += (out - first) * pmtu
		}
		fig.cnpsIn += e.CNPs - s.start.CNPs
		fig.rateCuts += e.RateCuts - s.start.RateCuts
		fig.lossCuts += e.LossCuts - s.start.LossCuts
	}
	fig.cnpsSent = sum(recv.Adapter.Stats()).CNPsSent - recvStart.CNPsSent
	after := b.stats(t)
	fig.q = qdiscStats{sent: after.sent - before.sent, tailDropped: after.tailDropped - before.tailDropped,
		marked: after.marked - before.marked, dropped: after.dropped - before.dropped}
	return fig
}

// sum adds the counters of an adapter's engines that the bed reads.
func sum(es []ndk.EngineStats) ndk.EngineStats {
	var s ndk.EngineStats
	for _, e := range es {
		s.FramesOut += e.FramesOut
		s.CNPs += e.CNPs
		s.CNPsSent += e.CNPsSent
		s.RateCuts += e.RateCuts
		s.LossCuts += e.LossCuts
	}
	return s
}

func (f figures) String() string {
	qs := slices.Clone(f.queue)
	slices.Sort(qs)
	var qmed, q90 int64
	if len(qs) > 0 {
		qmed, q90 = qs[len(qs)/2], qs[len(qs)*9/10]
	}
	return fmt.Sprintf("goodput %.0f Mb/s (%.0f after %v), failed %q, flows %.1f MB, probe p99 %v of %d (%v after %v), queue median %d KB, p90 %d KB, resent %.2f MB, CNPs %d sent %d received, cuts %d DCQCN %d loss, bottleneck %d bytes sent, %d marked, %d dropped early, %d dropped full",
		f.goodputMbps, f.settledMbps, settle, f.failed, mb(f.perFlow), p99(f.probeRTTs), len(f.probeRTTs), p99(f.settledRTTs()), settle, qmed/1000, q90/1000, f.resentBytes/1e6, f.cnpsSent, f.cnpsIn, f.rateCuts, f.lossCuts, f.q.sent, f.q.marked, f.q.dropped, f.q.tailDropped)
}

func mb(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Round(x/1e5) / 10
	}
	return out
}

// TestBed_MarksNotifiesCuts checks the bed's mechanics with DCQCN on: two
// flows into the receiver overfill the bottleneck, its phantom queue
// marks their ECT(0) frames CE, the receiver answers with CNPs, the
// senders receive them and cut their rates, and every byte arrives.
func TestBed_MarksNotifiesCuts(t *testing.T) {
	b := newBed(t, defaultBottleneck)
	f := b.run(t, ccOn, 2, 500*time.Millisecond, false)
	t.Log(f)
	switch {
	case f.q.marked == 0:
		t.Fatal("the bottleneck marked nothing CE: it was not congested, or the frames were not ECN-capable")
	case f.cnpsSent == 0:
		t.Fatal("the receiver sent no CNP for CE-marked frames")
	case f.cnpsIn == 0:
		t.Fatal("the senders received no CNP")
	case f.rateCuts == 0:
		t.Fatal("the senders made no DCQCN rate cut")
	case len(f.failed) > 0:
		t.Fatalf("connections failed: %v", f.failed)
	case f.perFlow[0] == 0 || f.perFlow[1] == 0:
		t.Fatalf("a flow moved nothing: %v", f.perFlow)
	}
	// The rate the htb lets through bounds what the flows moved.
	if f.goodputMbps > 1.05*float64(b.bn.RateMbit) {
		t.Fatalf("goodput %.0f Mb/s through a %d Mbit/s bottleneck: the shaper is not in the path", f.goodputMbps, b.bn.RateMbit)
	}
}

// TestBed_OffMarksNothing: with congestion control off the frames are not
// ECN-capable, so the bottleneck drops instead of marking and no CNP is
// sent; loss-driven pacing is what backs the senders off.
func TestBed_OffMarksNothing(t *testing.T) {
	b := newBed(t, defaultBottleneck)
	f := b.run(t, ccOff, 2, 300*time.Millisecond, false)
	t.Log(f)
	if f.q.marked != 0 || f.cnpsSent != 0 || f.rateCuts != 0 {
		t.Fatalf("CC off: %d marked, %d CNPs, %d DCQCN cuts; want none", f.q.marked, f.cnpsSent, f.rateCuts)
	}
	if f.q.dropped+f.q.tailDropped == 0 {
		t.Fatal("the bottleneck dropped nothing: it was not congested")
	}
}
