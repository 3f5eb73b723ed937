package rdma

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// reportJSONEnv names the file BenchmarkReport writes its JSON to.
const reportJSONEnv = "NDKXDP_BENCH_JSON"

// benchReport is everything BenchmarkReport measured, as its JSON.
type benchReport struct {
	Time       time.Time
	Kernel     string
	Cores      int // runtime.NumCPU: the CPUs this process may use
	GOMAXPROCS int
	Polling    string // ndkxdp's engines: adaptive or busy
	MTU        int    // of the RTT, rate and CPU cost pair

	// In process, both hosts in the test process, as in
	// BenchmarkRDMAvsBaseline: 64 B SEND ping-pong and message rate.
	RTT  map[string]latencyJSON // contender -> round trip
	Rate map[string]float64     // contender -> messages/s

	// Each side a process of its own.
	CPU  []costRow
	Idle idleRow
	Bulk []bulkRow

	// Ratios are ndkxdp's figures over the baselines' of the same run.
	Ratios map[string]float64
}

type latencyJSON struct {
	N                   int
	P50NS, P99NS, MaxNS int64
}

func latJSON(l baseline.Latency) latencyJSON {
	return latencyJSON{N: l.N, P50NS: l.P50.Nanoseconds(), P99NS: l.P99.Nanoseconds(), MaxNS: l.Max.Nanoseconds()}
}

// BenchmarkReport is the one report of ndkxdp against its baselines, in
// one run: the 64 B SEND round trip (p50, p99) and message rate in
// process; the CPU cost of 64 B messages and of an idle adapter, each
// side a process (BenchmarkCPUCost); and 64 KiB WRITE and READ bulk at MTU 4096
// and 9000 over 1 and 4 queues (BenchmarkBulk). It prints one table,
// headed by the machine's core count and GOMAXPROCS, writes the same as
// JSON to the file NDKXDP_BENCH_JSON names (if set), and reports the
// ratios as metrics. Run it with -benchtime 1x; it takes about a minute.
func BenchmarkReport(b *testing.B) {
	for b.Loop() {
		r := measureReport(b)
		fmt.Print(r.table())
		if path := os.Getenv(reportJSONEnv); path != "" {
			out, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		for k, v := range r.Ratios {
			b.ReportMetric(v, k)
		}
	}
}

func measureReport(b *testing.B) *benchReport {
	r := &benchReport{Time: time.Now().UTC(), Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Polling: "adaptive", MTU: benchMTU, RTT: map[string]latencyJSON{}, Rate: map[string]float64{}, Ratios: map[string]float64{}}
	if os.Getenv("NDKXDP_BENCH_POLL") == "busy" {
		r.Polling = "busy"
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		r.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	p := harness.New(b, harness.Config{MTU: benchMTU, StaticNeighbours: true})
	frame := rdmaFrame(benchMsg)
	xdpRate, err := baseline.XDPRate(p, frame, benchWindow)
	if err != nil {
		b.Fatal(err)
	}
	udpRate, err := baseline.UDPRate(p, frame, benchWindow)
	if err != nil {
		b.Fatal(err)
	}
	pings := map[string]func(*harness.Pair, int, int, time.Duration) (baseline.Latency, error){
		"raw AF_XDP": baseline.XDPPingPong, "Go UDP": baseline.UDPPingPong, "Go TCP": baseline.TCPPingPong}
	for _, name := range []string{"raw AF_XDP", "Go UDP", "Go TCP"} {
		l, err := pings[name](p, frame, benchPings, 5*benchWindow)
		if err != nil {
			b.Fatalf("%s ping-pong: %v", name, err)
		}
		r.RTT[name] = latJSON(l)
	}
	f := measureRDMA(b, p)
	r.RTT["ndkxdp"] = latJSON(f.rtt)
	r.Rate["ndkxdp"], r.Rate["raw AF_XDP"], r.Rate["Go UDP"] = f.sendRate, xdpRate.PerSecond(), udpRate.PerSecond()

	r.CPU = measureCost(b, p)
	r.Idle = measureIdle(b, p)
	for _, mtu := range []int{4096, benchMTU} {
		for _, q := range []int{1, 4} {
			r.Bulk = append(r.Bulk, measureBulk(b, mtu, q)...)
		}
	}

	ratio := func(name string, x, y float64) {
		if y != 0 {
			r.Ratios[name] = x / y
		}
	}
	nd := r.RTT["ndkxdp"]
	ratio("rtt-p50/xdp", float64(nd.P50NS), float64(r.RTT["raw AF_XDP"].P50NS))
	ratio("rtt-p50/tcp", float64(nd.P50NS), float64(r.RTT["Go TCP"].P50NS))
	ratio("rtt-p99/p50", float64(nd.P99NS), float64(nd.P50NS))
	ratio("send-rate/xdp", r.Rate["ndkxdp"], r.Rate["raw AF_XDP"])
	ndc, ndn := findCost(r.CPU, "ndkxdp"), findCost(r.CPU, notifyName)
	for _, c := range r.CPU {
		k, ok := baselineKeys[c.Name]
		if !ok {
			continue
		}
		ratio("rx-cpu-per-msg/"+k, ndc.RxCPUPerM, c.RxCPUPerM)
		ratio("tx-cpu-per-msg/"+k, ndc.TxCPUPerM, c.TxCPUPerM)
		ratio("notify-rx-cpu-per-msg/"+k, ndn.RxCPUPerM, c.RxCPUPerM)
	}
	r.Ratios["idle-%core"] = max(r.Idle.CorePctA, r.Idle.CorePctB)
	for k, v := range bulkMetrics(r.Bulk) {
		r.Ratios[k] = v
	}
	return r
}

func (r *benchReport) table() string {
	var t strings.Builder
	fmt.Fprintf(&t, "ndkxdp report %s: %d cores, GOMAXPROCS %d, kernel %s, %s polling, veth\n",
		r.Time.Format(time.RFC3339), r.Cores, r.GOMAXPROCS, r.Kernel, r.Polling)
	fmt.Fprintf(&t, "in process, MTU %d, %d-byte frames (a 64 B RC SEND):\n", r.MTU, rdmaFrame(benchMsg))
	fmt.Fprintf(&t, "%-12s %12s %12s %12s\n", "", "RTT p50", "RTT p99", "msg/s")
	for _, name := range []string{"ndkxdp", "raw AF_XDP", "Go UDP", "Go TCP"} {
		l := r.RTT[name]
		rate := "-"
		if v, ok := r.Rate[name]; ok {
			rate = fmt.Sprintf("%.0f", v)
		}
		fmt.Fprintf(&t, "%-12s %12v %12v %12s\n", name, time.Duration(l.P50NS), time.Duration(l.P99NS), rate)
	}
	t.WriteString(costTable(r.CPU, r.Idle))
	t.WriteString(bulkTable(r.Bulk))
	fmt.Fprintf(&t, "ratios (ndkxdp / baseline, same run):\n")
	keys := make([]string, 0, len(r.Ratios))
	for k := range r.Ratios {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&t, "  %-36s %8.3f\n", k, r.Ratios[k])
	}
	return t.String()
}
