package rdma

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// Benchmark parameters: a 64-byte SEND, a 64 KiB WRITE, one-second
// windows, 20000 ping-pongs at most (each side also stops after 5 s).
const (
	benchMsg    = 64
	benchWrite  = 64 << 10
	benchWindow = time.Second
	benchPings  = 20000
	benchMTU    = 9000
)

// rdmaFrame is the Ethernet frame (without FCS) of a SEND_ONLY carrying n
// bytes over IPv4: what the baselines' frame sizes are compared with.
func rdmaFrame(n int) int {
	return rocev2.EthernetLen + rocev2.IPv4Len + rocev2.UDPLen + rocev2.BTHLen + n + rocev2.PadCount(n) + rocev2.ICRCLen
}

type figures struct {
	sendRate  float64 // messages/s
	rtt       baseline.Latency
	writeGbps float64
}

// BenchmarkRDMAvsBaseline measures, in one run on one veth pair (MTU
// 9000): raw AF_XDP, Go UDP and Go TCP (internal/tool/baseline), then
// ndkxdp on both ends: the 64 B SEND message rate, the 64 B SEND
// ping-pong and the 64 KiB WRITE bandwidth. It prints a table and reports
// each ratio as a metric. Run it with -benchtime 1x: one iteration
// measures everything. The environment sets polling and engine CPUs
// (benchSetups).
func BenchmarkRDMAvsBaseline(b *testing.B) {
	p := harness.New(b, harness.Config{MTU: benchMTU, StaticNeighbours: true})
	frame := rdmaFrame(benchMsg)
	for b.Loop() {
		var base struct {
			xdpRate, udpRate, tcpBW baseline.Rate
			xdpRTT, udpRTT, tcpRTT  baseline.Latency
		}
		var err error
		if base.xdpRate, err = baseline.XDPRate(p, frame, benchWindow); err != nil {
			b.Fatal(err)
		}
		if base.udpRate, err = baseline.UDPRate(p, frame, benchWindow); err != nil {
			b.Fatal(err)
		}
		if base.tcpBW, err = baseline.TCPRate(p, benchWrite, benchWindow); err != nil {
			b.Fatal(err)
		}
		if base.xdpRTT, err = baseline.XDPPingPong(p, frame, benchPings, 5*benchWindow); err != nil {
			b.Fatal(err)
		}
		if base.udpRTT, err = baseline.UDPPingPong(p, frame, benchPings, 5*benchWindow); err != nil {
			b.Fatal(err)
		}
		if base.tcpRTT, err = baseline.TCPPingPong(p, frame, benchPings, 5*benchWindow); err != nil {
			b.Fatal(err)
		}
		f := measureRDMA(b, p)

		ratio := func(x, y float64) float64 { return x / y }
		sendVsXDP := ratio(f.sendRate, base.xdpRate.PerSecond())
		sendVsUDP := ratio(f.sendRate, base.udpRate.PerSecond())
		rttVsXDP := ratio(float64(f.rtt.P50), float64(base.xdpRTT.P50))
		rttVsTCP := ratio(float64(f.rtt.P50), float64(base.tcpRTT.P50))
		writeVsTCP := ratio(f.writeGbps, base.tcpBW.Gbps())

		var t strings.Builder
		fmt.Fprintf(&t, "veth pair, MTU %d, %d-byte frames (a 64 B RC SEND), 64 KiB WRITE, %v windows\n", benchMTU, frame, benchWindow)
		fmt.Fprintf(&t, "%-28s %14s %14s %14s\n", "", "ndkxdp", "reference", "ratio")
		fmt.Fprintf(&t, "%-28s %14.0f %14.0f %14.2f  (target >= 0.50)\n", "msg/s vs raw AF_XDP", f.sendRate, base.xdpRate.PerSecond(), sendVsXDP)
		fmt.Fprintf(&t, "%-28s %14.0f %14.0f %14.2f  (target > 1)\n", "msg/s vs Go UDP", f.sendRate, base.udpRate.PerSecond(), sendVsUDP)
		fmt.Fprintf(&t, "%-28s %14v %14v %14.2f  (target <= 2)\n", "RTT p50 vs AF_XDP", f.rtt.P50, base.xdpRTT.P50, rttVsXDP)
		fmt.Fprintf(&t, "%-28s %14v %14v %14.2f  (target < 1)\n", "RTT p50 vs Go TCP", f.rtt.P50, base.tcpRTT.P50, rttVsTCP)
		fmt.Fprintf(&t, "%-28s %14v %14v\n", "RTT p99 (AF_XDP)", f.rtt.P99, base.xdpRTT.P99)
		fmt.Fprintf(&t, "%-28s %14v %14v\n", "RTT p50/p99 (UDP)", base.udpRTT.P50, base.udpRTT.P99)
		fmt.Fprintf(&t, "%-28s %14v %14v\n", "RTT p99 (TCP)", f.rtt.P99, base.tcpRTT.P99)
		fmt.Fprintf(&t, "%-28s %14d %14d  (of %d; a run ends at %v)\n", "round trips (AF_XDP)", f.rtt.N, base.xdpRTT.N, benchPings, 5*benchWindow)
		fmt.Fprintf(&t, "%-28s %14.2f %14.2f %14.2f  (target >= 0.70)\n", "WRITE Gbit/s vs Go TCP", f.writeGbps, base.tcpBW.Gbps(), writeVsTCP)
		// The table goes to stdout: benchmark logs are cut to a few lines.
		fmt.Print(t.String())

		b.ReportMetric(f.sendRate, "send-msg/s")
		b.ReportMetric(sendVsXDP, "send/xdp-rate")
		b.ReportMetric(sendVsUDP, "send/udp-rate")
		b.ReportMetric(float64(f.rtt.P50.Nanoseconds()), "rtt-p50-ns")
		b.ReportMetric(float64(f.rtt.P99.Nanoseconds()), "rtt-p99-ns")
		b.ReportMetric(rttVsXDP, "rtt/xdp-rtt")
		b.ReportMetric(rttVsTCP, "rtt/tcp-rtt")
		b.ReportMetric(f.writeGbps, "write-Gbit/s")
		b.ReportMetric(writeVsTCP, "write/tcp-bw")
	}
}

// measureRDMA opens ndkxdp on both hosts of p and measures it.
func measureRDMA(b *testing.B, p *harness.Pair) figures {
	sa, sb := benchSetups(b)
	x := openHost(b, p.A, sa, nil)
	y := openHost(b, p.B, sb, nil)
	defer x.Close()
	defer y.Close()
	var f figures
	var err error
	// Each measurement gets fresh CQs: the previous one's QPs complete
	// their cancelled receives into the old ones as they close.
	x.freshCQs()
	y.freshCQs()
	if f.sendRate, err = sendRate(x, y); err != nil {
		b.Fatal(err)
	}
	x.freshCQs()
	y.freshCQs()
	if f.rtt, err = pingPong(x, y); err != nil {
		b.Fatal(err)
	}
	x.freshCQs()
	y.freshCQs()
	if f.writeGbps, err = writeBandwidth(x, y); err != nil {
		b.Fatal(err)
	}
	return f
}

// benchPolling is the polling mode NDKXDP_BENCH_POLL names: busy or
// progress (ndk.PollBusy, ndk.PollProgress), else the default.
func benchPolling() ndk.PollingMode {
	switch os.Getenv("NDKXDP_BENCH_POLL") {
	case "busy":
		return ndk.PollBusy
	case "progress":
		return ndk.PollProgress
	}
	return ndk.PollAuto
}

// benchSetups are the two hosts' settings from the environment:
// NDKXDP_BENCH_POLL=busy or progress (ndk.PollBusy, ndk.PollProgress), and
// NDKXDP_BENCH_ENGINE_CPUS="0;1", which pins host A's engines to CPU 0 and
// host B's to CPU 1 (ndk.Options.EngineCPUs, lists as taskset -c's).
func benchSetups(b *testing.B) (sa, sb setup) {
	var s setup
	s.opts.Polling = benchPolling()
	sa, sb = s, s
	if v := os.Getenv("NDKXDP_BENCH_ENGINE_CPUS"); v != "" {
		la, lb, _ := strings.Cut(v, ";")
		var err error
		if sa.opts.EngineCPUs, err = cmdline.CPUList(la); err != nil {
			b.Fatal(err)
		}
		if sb.opts.EngineCPUs, err = cmdline.CPUList(lb); err != nil {
			b.Fatal(err)
		}
	}
	return sa, sb
}

func (x *host) freshCQs() {
	x.t.Helper()
	if err := x.NewCQs(); err != nil {
		x.t.Fatal(err)
	}
}

// sendRate streams silent 64-byte SENDs from x to y, y re-posting each
// receive as it completes, and returns the receives per second over one
// window after a short warm-up.
func sendRate(x, y *host) (float64, error) {
	// A deep receive queue absorbs the receiver goroutine's scheduling
	// hiccups, which would otherwise cost RNR NAK round trips.
	c := defaultQP
	c.ReceiveQueueDepth = 4096
	qa, qb := x.qpWith("a", c), y.qpWith("b", c)
	connect(x.t, x, y, qa, qb, ndk.ConnectOptions{})
	defer qa.Close()
	defer qb.Close()
	src := x.region(benchMsg, 0)
	dst := y.region(benchMsg*c.ReceiveQueueDepth, ndk.MRFlagAllowLocalWrite)
	for i := 0; i < c.ReceiveQueueDepth; i++ {
		if err := qb.Receive(i, dst.sgl(i*benchMsg, benchMsg)); err != nil {
			return 0, err
		}
	}
	var stop atomic.Bool
	var counting atomic.Bool
	var received atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { // receiver
		defer wg.Done()
		rs := make([]ndk.Result, 64)
		for !stop.Load() {
			n := y.RCQ.GetResults(rs)
			for _, r := range rs[:n] {
				if r.Status != ndk.StatusSuccess {
					errs <- fmt.Errorf("receive: %v", r.Status)
					return
				}
				i := r.RequestContext.(int)
				if err := qb.Receive(i, dst.sgl(i*benchMsg, benchMsg)); err != nil {
					errs <- err
					return
				}
			}
			if counting.Load() {
				received.Add(uint64(n))
			}
			if n == 0 {
				runtime.Gosched()
			}
		}
	}()
	go func() { // sender
		defer wg.Done()
		sgl := src.sgl(0, benchMsg)
		for !stop.Load() {
			err := qa.Send(nil, sgl, ndk.OpFlagSilentSuccess)
			if errors.Is(err, ndk.ErrInsufficientResources) {
				runtime.Gosched()
				continue
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	counting.Store(true)
	start := time.Now()
	time.Sleep(benchWindow)
	n := received.Load()
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	st := x.Adapter.Stats()[0]
	fmt.Printf("send rate: %d RNR NAKs received, %d retransmission rounds\n", st.RNRReceived, st.Retransmits)
	return float64(n) / elapsed.Seconds(), nil
}

// pingPong bounces a 64-byte SEND between x and y and returns the round
// trips seen by x.
func pingPong(x, y *host) (baseline.Latency, error) {
	qa, qb := x.pairWith(y, ndk.ConnectOptions{})
	defer qa.Close()
	defer qb.Close()
	sa, ra := x.region(benchMsg, 0), x.region(benchMsg, ndk.MRFlagAllowLocalWrite)
	sb, rb := y.region(benchMsg, 0), y.region(benchMsg, ndk.MRFlagAllowLocalWrite)
	if err := qa.Receive(nil, ra.sgl(0, benchMsg)); err != nil {
		return baseline.Latency{}, err
	}
	if err := qb.Receive(nil, rb.sgl(0, benchMsg)); err != nil {
		return baseline.Latency{}, err
	}
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() { // y echoes
		var r [1]ndk.Result
		ssgl, rsgl := sb.sgl(0, benchMsg), rb.sgl(0, benchMsg)
		for !stop.Load() {
			if y.RCQ.GetResults(r[:]) == 0 {
				runtime.Gosched()
				continue
			}
			if err := qb.Receive(nil, rsgl); err != nil {
				done <- err
				return
			}
			if err := qb.Send(nil, ssgl, ndk.OpFlagSilentSuccess); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	samples := make([]time.Duration, 0, benchPings)
	var r [1]ndk.Result
	ssgl, rsgl := sa.sgl(0, benchMsg), ra.sgl(0, benchMsg)
	deadline := time.Now().Add(5 * benchWindow)
	var err error
	for i := 0; i < benchPings+100 && time.Now().Before(deadline); i++ {
		t0 := time.Now()
		if err = qa.Send(nil, ssgl, ndk.OpFlagSilentSuccess); err != nil {
			break
		}
		// As the raw reference does: the deadline ends the run between
		// round trips, with the samples it has; only a reply missing
		// for 5s is an error. A slow run is the figures' to show, and a
		// wait cut at the deadline read as a lost reply.
		limit := t0.Add(5 * time.Second)
		for x.RCQ.GetResults(r[:]) == 0 {
			if time.Now().After(limit) {
				err = fmt.Errorf("ping-pong: round trip %d had no reply in 5s", i)
				break
			}
			runtime.Gosched()
		}
		if err != nil {
			break
		}
		rtt := time.Since(t0)
		if err = qa.Receive(nil, rsgl); err != nil {
			break
		}
		if i >= 100 { // warm-up
			samples = append(samples, rtt)
		}
	}
	stop.Store(true)
	if e := <-done; err == nil {
		err = e
	}
	if err == nil && len(samples) == 0 {
		err = errors.New("ping-pong: no round trip after the warm-up before the deadline")
	}
	return baseline.Summarize(samples), err
}

// writeBandwidth streams 64 KiB WRITEs from x to y for one window and
// returns the completed bytes per second, in Gbit/s.
func writeBandwidth(x, y *host) (float64, error) {
	qa, qb := x.pairWith(y, ndk.ConnectOptions{})
	defer qa.Close()
	defer qb.Close()
	src := x.region(benchWrite, 0)
	dst := y.region(benchWrite, ndk.MRFlagAllowRemoteWrite)
	sgl := src.sgl(0, benchWrite)
	rs := make([]ndk.Result, 64)
	var done uint64
	var counted uint64
	warm := time.Now().Add(100 * time.Millisecond)
	var start time.Time
	end := warm.Add(benchWindow)
	for now := time.Now(); now.Before(end); now = time.Now() {
		if start.IsZero() && now.After(warm) {
			start, counted = now, done
		}
		err := qa.Write(nil, sgl, dst.mr.Addr(), dst.mr.RemoteToken(), 0)
		if err != nil && !errors.Is(err, ndk.ErrInsufficientResources) {
			return 0, err
		}
		n := x.ICQ.GetResults(rs)
		for _, r := range rs[:n] {
			if r.Status != ndk.StatusSuccess {
				return 0, fmt.Errorf("write: %v", r.Status)
			}
		}
		done += uint64(n)
		if err != nil && n == 0 {
			runtime.Gosched()
		}
	}
	elapsed := time.Since(start)
	sa, sb := x.Adapter.Stats()[0], y.Adapter.Stats()[0]
	fmt.Printf("write: %d retransmission rounds, %d ACK timeouts, %d sequence NAKs sent, %d frames out of sequence\n",
		sa.Retransmits, sa.Timeouts, sb.NAKsSent, sb.OutOfSeq)
	return float64((done-counted)*benchWrite*8) / elapsed.Seconds() / 1e9, nil
}

// BenchmarkQueuesCrossed measures what forwarding between engines costs
// (ndk.Options.Queues): in one run, the 64 B SEND ping-pong between two
// adapters of two queues each, once with the QP pair on matching queues
// and once on crossed queues, where each end's arrival engine forwards
// every frame to the owner. It reports crossed/aligned for the p50 and p99
// round trip. Run it with -benchtime 1x.
func BenchmarkQueuesCrossed(b *testing.B) {
	p := harness.New(b, harness.Config{MTU: benchMTU, Queues: 2, StaticNeighbours: true})
	s := setup{opts: ndk.Options{Queues: 2}}
	x, y := openHost(b, p.A, s, nil), openHost(b, p.B, s, nil)
	made := [2]int{} // QPs created on x and y: both assign round-robin
	forwarded := func() (n uint64) {
		for _, h := range []*host{x, y} {
			for _, st := range h.Adapter.Stats() {
				n += st.ForwardedOut
			}
		}
		return n
	}
	run := func(crossed bool) baseline.Latency {
		want := 0
		if crossed {
			want = 1
		}
		for (made[1]-made[0]+2)%2 != want {
			y.qp("skew")
			made[1]++
		}
		before := forwarded()
		l, err := pingPong(x, y)
		if err != nil {
			b.Fatal(err)
		}
		made[0]++
		made[1]++
		if n := forwarded() - before; (n > 0) != crossed {
			b.Fatalf("crossed %v: %d frames forwarded", crossed, n)
		}
		return l
	}
	for b.Loop() {
		aligned, crossed := run(false), run(true)
		fmt.Printf("64 B SEND ping-pong, two queues: aligned p50 %v p99 %v, crossed p50 %v p99 %v\n", aligned.P50, aligned.P99, crossed.P50, crossed.P99)
		b.ReportMetric(float64(crossed.P50)/float64(aligned.P50), "crossed/aligned-p50")
		b.ReportMetric(float64(crossed.P99)/float64(aligned.P99), "crossed/aligned-p99")
	}
}
