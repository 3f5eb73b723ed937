package rdma

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// hogLimit bounds the hogs' lives, whatever the benchmark does.
const hogLimit = 2 * time.Minute

// hogRound is one measurement of ndkxdp and of the raw AF_XDP reference:
// the 64 B SEND rate and ping-pong of BenchmarkRDMAvsBaseline.
type hogRound struct {
	xdpRate, rdmaRate       float64
	xdpRTT, tcpRTT, rdmaRTT baseline.Latency
}

// BenchmarkUnderHog measures how much ndkxdp and the raw AF_XDP reference
// slow down beside a CPU hog on every core: the 64 B SEND rate and the
// ping-pong, each first on the quiet machine and then with one busy-loop
// process per CPU running beside them (sh `while :; do :; done`, as
// nice as the benchmark). Each contender's degradation is its loaded
// figure against its quiet one (rate: quiet/loaded; RTT p50:
// loaded/quiet), and the report is ndkxdp's degradation over the
// reference's, which issue 27 wants at 3 or less. The raw ping-pong
// sleeps in poll(2) between frames, and on a quiet VM each of its
// wake-ups finds a halted vCPU (rc's doc, "Polling"), so its round trip
// is faster beside the hogs, which keep every vCPU running; Go TCP's
// ping-pong is the second RTT reference. Run it with -benchtime
// 1x, under the shared lock on a shared machine; BenchmarkRDMAvsBaseline's
// environment settings (benchSetups) apply.
func BenchmarkUnderHog(b *testing.B) {
	p := harness.New(b, harness.Config{MTU: benchMTU, StaticNeighbours: true})
	frame := rdmaFrame(benchMsg)
	for b.Loop() {
		quiet := measureHogRound(b, p, frame)
		stop := startHogs(b, runtime.NumCPU())
		loaded := measureHogRound(b, p, frame)
		stop()

		deg := func(q, l float64) float64 { return q / l }
		xdpRateDeg, rdmaRateDeg := deg(quiet.xdpRate, loaded.xdpRate), deg(quiet.rdmaRate, loaded.rdmaRate)
		xdpRTTDeg := deg(float64(loaded.xdpRTT.P50), float64(quiet.xdpRTT.P50))
		tcpRTTDeg := deg(float64(loaded.tcpRTT.P50), float64(quiet.tcpRTT.P50))
		rdmaRTTDeg := deg(float64(loaded.rdmaRTT.P50), float64(quiet.rdmaRTT.P50))
		var t strings.Builder
		fmt.Fprintf(&t, "beside %d CPU hogs (one busy loop per CPU), GOMAXPROCS %d, veth MTU %d, %d-byte frames\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), benchMTU, frame)
		fmt.Fprintf(&t, "%-24s %14s %14s %12s\n", "", "quiet", "loaded", "degradation")
		fmt.Fprintf(&t, "%-24s %14.0f %14.0f %12.2f\n", "raw AF_XDP msg/s", quiet.xdpRate, loaded.xdpRate, xdpRateDeg)
		fmt.Fprintf(&t, "%-24s %14.0f %14.0f %12.2f\n", "ndkxdp msg/s", quiet.rdmaRate, loaded.rdmaRate, rdmaRateDeg)
		fmt.Fprintf(&t, "%-24s %14v %14v %12.2f\n", "raw AF_XDP RTT p50", quiet.xdpRTT.P50, loaded.xdpRTT.P50, xdpRTTDeg)
		fmt.Fprintf(&t, "%-24s %14v %14v %12.2f\n", "Go TCP RTT p50", quiet.tcpRTT.P50, loaded.tcpRTT.P50, tcpRTTDeg)
		fmt.Fprintf(&t, "%-24s %14v %14v %12.2f\n", "ndkxdp RTT p50", quiet.rdmaRTT.P50, loaded.rdmaRTT.P50, rdmaRTTDeg)
		fmt.Fprintf(&t, "%-24s %14v %14v\n", "raw AF_XDP RTT p99", quiet.xdpRTT.P99, loaded.xdpRTT.P99)
		fmt.Fprintf(&t, "%-24s %14v %14v\n", "ndkxdp RTT p99", quiet.rdmaRTT.P99, loaded.rdmaRTT.P99)
		fmt.Fprintf(&t, "ndkxdp's degradation over the reference's: rate %.2f, RTT p50 %.2f (Go TCP's: %.2f) (target <= 3)\n", rdmaRateDeg/xdpRateDeg, rdmaRTTDeg/xdpRTTDeg, rdmaRTTDeg/tcpRTTDeg)
		fmt.Print(t.String())
		b.ReportMetric(rdmaRateDeg/xdpRateDeg, "rate-degradation/xdp")
		b.ReportMetric(rdmaRTTDeg/xdpRTTDeg, "rtt-degradation/xdp")
		b.ReportMetric(rdmaRTTDeg/tcpRTTDeg, "rtt-degradation/tcp")
		b.ReportMetric(rdmaRateDeg, "rate-degradation")
		b.ReportMetric(rdmaRTTDeg, "rtt-degradation")
	}
}

// measureHogRound measures the reference, then ndkxdp opened afresh on
// both hosts of p.
func measureHogRound(b *testing.B, p *harness.Pair, frame int) hogRound {
	var r hogRound
	rate, err := baseline.XDPRate(p, frame, benchWindow)
	if err != nil {
		b.Fatal(err)
	}
	r.xdpRate = rate.PerSecond()
	if r.xdpRTT, err = baseline.XDPPingPong(p, frame, benchPings, 5*benchWindow); err != nil {
		b.Fatal(err)
	}
	if r.tcpRTT, err = baseline.TCPPingPong(p, frame, benchPings, 5*benchWindow); err != nil {
		b.Fatal(err)
	}
	sa, sb := benchSetups(b)
	x := openHost(b, p.A, sa, nil)
	y := openHost(b, p.B, sb, nil)
	defer x.Close()
	defer y.Close()
	if r.rdmaRate, err = sendRate(x, y); err != nil {
		b.Fatal(err)
	}
	x.freshCQs()
	y.freshCQs()
	if r.rdmaRTT, err = pingPong(x, y); err != nil {
		b.Fatal(err)
	}
	return r
}

// startHogs starts n busy-loop processes, each ended by its PID when the
// returned stop runs, and by hogLimit at the latest.
func startHogs(b *testing.B, n int) (stop func()) {
	ctx, cancel := context.WithTimeout(context.Background(), hogLimit)
	var cmds []*exec.Cmd
	for range n {
		c := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			cancel()
			b.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	time.Sleep(100 * time.Millisecond) // the hogs are running
	return func() {
		cancel()
		for _, c := range cmds {
			_ = c.Wait()
		}
	}
}
