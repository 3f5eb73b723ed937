package rdma

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestMain runs a benchmark's child process (procEnv) instead of the
// tests when the test binary was started as one.
func TestMain(m *testing.M) {
	if spec := os.Getenv(procEnv); spec != "" {
		os.Exit(procMain(spec))
	}
	os.Exit(m.Run())
}

// CPU benchmark parameters: the warm-up before each window, the window,
// and the idle adapter's window.
const (
	cpuWarm       = 300 * time.Millisecond
	cpuWindow     = time.Second
	cpuIdleWindow = 10 * time.Second
	cpuIdleQPs    = 4
)

// costRow is one contender's CPU cost of 64 B messages, each side a
// process of its own.
type costRow struct {
	Name       string
	MsgPerS    float64 // messages the receiver took per second
	RxCPUPerM  float64 // receiver's CPU-seconds per million messages
	TxCPUPerM  float64 // sender's
	RxCPUShare float64 // receiver's CPU-seconds per second (1 = a core)
	TxCPUShare float64
}

// bulkRow is one contender's bulk transfer at one MTU and queue count.
type bulkRow struct {
	Name       string
	Op         string `json:",omitempty"` // ndkxdp's: "WRITE" or "READ"
	MTU        int
	Queues     int
	Frame      int // bytes on the wire per full frame
	Gbps       float64
	RxCPUPerGB float64 // CPU-seconds per GB (1e9 bytes of payload)
	TxCPUPerGB float64
	// Engine is ndkxdp's engine counters over the window, both sides
	// summed.
	Engine *procEngine `json:",omitempty"`
}

// idleRow is what an idle adapter with connected QPs costs.
type idleRow struct {
	QPs                  int
	Seconds              float64
	CorePctA, CorePctB   float64 // CPU-seconds per second, in % of a core
	CPUSecondsA, CPUSecB float64
}

func sides(p *harness.Pair, j procJob) (rx, tx procJob) {
	rx, tx = j, j
	rx.Role, rx.Host, rx.Peer = "rx", *p.B, *p.A
	tx.Role, tx.Host, tx.Peer = "tx", *p.A, *p.B
	return rx, tx
}

// measureCost measures the CPU cost of 64 B messages of ndkxdp (SEND),
// raw AF_XDP, Go UDP and Go TCP on p, in that order, every message the
// same frame size on the wire as a 64 B RC SEND.
func measureCost(tb testing.TB, p *harness.Pair) []costRow {
	frame := rdmaFrame(benchMsg)
	poll := benchPolling()
	jobs := []procJob{
		{Kind: "rdma", Op: "send", Size: benchMsg, Queues: 1, QPs: 1, Polling: poll},
		{Kind: "rdma", Op: "send", Size: benchMsg, Queues: 1, QPs: 1, Polling: poll, Notify: true},
		{Kind: "xdp", Frame: frame, Payload: benchMsg},
		{Kind: "udp", Frame: frame, Payload: benchMsg},
		{Kind: "tcp", Frame: frame, Payload: benchMsg},
	}
	var rows []costRow
	for _, j := range jobs {
		rx, tx := sides(p, j)
		r, t, err := runProcs(rx, tx, cpuWarm, cpuWindow)
		if err != nil {
			tb.Fatalf("%s: %v", j.Kind, err)
		}
		if r.Messages == 0 {
			tb.Fatalf("%s: no message received in the window", j.Kind)
		}
		name := contender(j.Kind)
		if j.Notify {
			name = notifyName
		}
		if r.Engine != nil && t.Engine != nil {
			fmt.Printf("%s engines over the window: receiver: %v; sender: %v; receiver's CQ waits %d\n", name, r.Engine, t.Engine, r.Waits)
		}
		m := float64(r.Messages) / 1e6
		rows = append(rows, costRow{Name: name, MsgPerS: float64(r.Messages) / r.ElapsedS,
			RxCPUPerM: r.CPU() / m, TxCPUPerM: t.CPU() / m,
			RxCPUShare: r.CPU() / r.ElapsedS, TxCPUShare: t.CPU() / t.ElapsedS})
	}
	return rows
}

// measureIdle connects cpuIdleQPs QP pairs between two adapters in
// adaptive mode, each in a process of its own, and measures both over
// cpuIdleWindow with nothing to do.
func measureIdle(tb testing.TB, p *harness.Pair) idleRow {
	rx, tx := sides(p, procJob{Kind: "rdma", Op: "send", Size: benchMsg, Queues: 1, QPs: cpuIdleQPs})
	rx.Role, tx.Role = "idle", "idle"
	a, b, err := runProcs(tx, rx, cpuWarm, cpuIdleWindow)
	if err != nil {
		tb.Fatalf("idle: %v", err)
	}
	return idleRow{QPs: cpuIdleQPs, Seconds: a.ElapsedS,
		CorePctA: 100 * a.CPU() / a.ElapsedS, CorePctB: 100 * b.CPU() / b.ElapsedS,
		CPUSecondsA: a.CPU(), CPUSecB: b.CPU()}
}

// measureBulk moves data from A to B on a fresh pair of the given MTU and
// queue count: ndkxdp's 64 KiB WRITEs from A over one QP per queue, and
// 64 KiB READs by B of A's memory (procReadDepth posted and procReadLimit
// on the wire per QP, as ib_read_bw runs), whose responses flow from A
// to B in the same frames as the WRITEs; raw AF_XDP
// over one socket per queue, each on a thread of its own, with frames of
// the size ndkxdp sends at that MTU (a full path-MTU payload); Go TCP's
// 64 KiB writes on one connection; and on one queue Go UDP with
// datagrams of that frame size. Each side is a process of its own.
func measureBulk(tb testing.TB, mtu, queues int) []bulkRow {
	p := harness.New(tb, harness.Config{MTU: mtu, Queues: queues, StaticNeighbours: true})
	pm, ok := rocev2.MTUForNetdev(mtu)
	if !ok {
		tb.Fatalf("no path MTU fits in %d", mtu)
	}
	frame := rdmaFrame(pm.Bytes())
	poll := benchPolling()
	jobs := []procJob{{Kind: "rdma", Op: "write", Size: benchWrite, Queues: queues, QPs: queues, Polling: poll},
		{Kind: "rdma", Op: "read", Size: benchWrite, Queues: queues, QPs: queues, Polling: poll}}
	jobs = append(jobs, procJob{Kind: "xdp", Frame: frame, Payload: pm.Bytes(), Queues: queues})
	if queues == 1 {
		jobs = append(jobs, procJob{Kind: "udp", Frame: frame, Payload: frame - procUDPHeaders})
	}
	jobs = append(jobs, procJob{Kind: "tcp", Size: benchWrite})
	var rows []bulkRow
	for _, j := range jobs {
		rx, tx := sides(p, j)
		r, t, err := runProcs(rx, tx, cpuWarm, cpuWindow)
		if err != nil {
			tb.Fatalf("%s bulk at MTU %d, %d queues: %v", j.Kind, mtu, queues, err)
		}
		bytes := r.Bytes
		if j.Op == "write" { // the receiving consumer sees no WRITE
			bytes = t.Bytes
		}
		if bytes == 0 {
			tb.Fatalf("%s bulk at MTU %d: nothing moved in the window", j.Kind, mtu)
		}
		gb := float64(bytes) / 1e9
		f := frame
		if j.Kind == "tcp" {
			f = mtu + 14
		}
		rows = append(rows, bulkRow{Name: contender(j.Kind), Op: strings.ToUpper(j.Op), MTU: mtu, Queues: queues, Frame: f,
			Gbps: 8 * gb / t.ElapsedS, RxCPUPerGB: r.CPU() / gb, TxCPUPerGB: t.CPU() / gb})
		if r.Engine != nil && t.Engine != nil {
			e := r.Engine.plus(*t.Engine)
			rows[len(rows)-1].Engine = &e
		}
	}
	return rows
}

// notifyName is the cost row of ndkxdp whose receiver waits for CQ
// notifications when idle (procJob.Notify), beside the polling one.
const notifyName = "ndkxdp notify"

// baselineKeys name the baselines in metrics and ratios.
var baselineKeys = map[string]string{"raw AF_XDP": "xdp", "Go UDP": "udp", "Go TCP": "tcp"}

func contender(kind string) string {
	return map[string]string{"rdma": "ndkxdp", "xdp": "raw AF_XDP", "udp": "Go UDP", "tcp": "Go TCP"}[kind]
}

func findCost(rows []costRow, name string) costRow {
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	return costRow{}
}

func findBulk(rows []bulkRow, name string, mtu, queues int) (bulkRow, bool) {
	for _, r := range rows {
		if r.Name == name && r.MTU == mtu && r.Queues == queues {
			return r, true
		}
	}
	return bulkRow{}, false
}

// costTable prints the CPU cost rows with each contender's ratio to
// ndkxdp's.
func costTable(rows []costRow, idle idleRow) string {
	var t strings.Builder
	nd := findCost(rows, "ndkxdp")
	fmt.Fprintf(&t, "CPU cost of 64 B messages (%d-byte frames), each side a process, getrusage over %v:\n", rdmaFrame(benchMsg), cpuWindow)
	fmt.Fprintf(&t, "%-12s %10s %14s %14s %10s %10s %12s\n", "", "msg/s", "rx CPU-s/1M", "tx CPU-s/1M", "rx cores", "tx cores", "ndkxdp rx/x")
	for _, r := range rows {
		fmt.Fprintf(&t, "%-12s %10.0f %14.3f %14.3f %10.2f %10.2f %12.2f\n", r.Name, r.MsgPerS, r.RxCPUPerM, r.TxCPUPerM, r.RxCPUShare, r.TxCPUShare, nd.RxCPUPerM/r.RxCPUPerM)
	}
	fmt.Fprintf(&t, "idle adapter, %d connected QPs, adaptive, %.1f s: %.3f%% and %.3f%% of a core (A, B)\n",
		idle.QPs, idle.Seconds, idle.CorePctA, idle.CorePctB)
	return t.String()
}

// bulkTable prints the bulk rows with each one's rate as a ratio to Go
// TCP's and raw AF_XDP's at the same MTU and queue count. rx is the side
// the data flows to (a READ's requester), tx the side it comes from.
func bulkTable(rows []bulkRow) string {
	var t strings.Builder
	fmt.Fprintf(&t, "bulk A->B, each side a process, %v windows (ndkxdp: 64 KiB WRITEs by A, 64 KiB READs by B with %d posted and %d on the wire, one QP per queue; Go TCP: 64 KiB writes, one stream):\n", cpuWindow, procReadDepth, procReadLimit)
	fmt.Fprintf(&t, "%-12s %5s %5s %6s %6s %8s %12s %12s %10s %10s\n", "", "op", "MTU", "queues", "frame", "Gbit/s", "rx CPU-s/GB", "tx CPU-s/GB", "vs TCP", "vs AF_XDP")
	for _, r := range rows {
		vs := func(name string) string {
			ref, ok := findBulk(rows, name, r.MTU, r.Queues)
			if !ok || ref.Gbps == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", r.Gbps/ref.Gbps)
		}
		op := r.Op
		if op == "" {
			op = "-"
		}
		fmt.Fprintf(&t, "%-12s %5s %5d %6d %6d %8.2f %12.3f %12.3f %10s %10s\n", r.Name, op, r.MTU, r.Queues, r.Frame, r.Gbps, r.RxCPUPerGB, r.TxCPUPerGB, vs("Go TCP"), vs("raw AF_XDP"))
	}
	for _, r := range rows {
		if e := r.Engine; e != nil {
			fmt.Fprintf(&t, "  ndkxdp %s MTU %d, %d queues, engines of both sides: %d frames out, %d retransmission rounds (%d ACK timeouts), %d NAKs sent, %d out of sequence, %d answered again, %d RNR NAKs, %d TX ring full\n",
				r.Op, r.MTU, r.Queues, e.FramesOut, e.Retransmits, e.Timeouts, e.NAKsSent, e.OutOfSeq, e.Duplicates, e.RNRSent, e.TxFull)
		}
	}
	return t.String()
}

// reportCost reports ndkxdp's CPU per message against each baseline's,
// per side, and the idle adapter's share of a core.
func reportCost(b *testing.B, rows []costRow, idle idleRow) {
	nd, nn := findCost(rows, "ndkxdp"), findCost(rows, notifyName)
	for _, r := range rows {
		k, ok := baselineKeys[r.Name]
		if !ok {
			continue
		}
		b.ReportMetric(nd.RxCPUPerM/r.RxCPUPerM, "rx-cpu/"+k+"-rx-cpu")
		b.ReportMetric(nd.TxCPUPerM/r.TxCPUPerM, "tx-cpu/"+k+"-tx-cpu")
		if k == "tcp" && nn.RxCPUPerM != 0 {
			b.ReportMetric(nn.RxCPUPerM/r.RxCPUPerM, "notify-rx-cpu/tcp-rx-cpu")
		}
	}
	b.ReportMetric(nd.RxCPUPerM, "rx-cpu-s/M-msg")
	b.ReportMetric(nn.RxCPUPerM, "notify-rx-cpu-s/M-msg")
	b.ReportMetric(nd.TxCPUPerM, "tx-cpu-s/M-msg")
	b.ReportMetric(max(idle.CorePctA, idle.CorePctB), "idle-%core")
}

// bulkMetrics are ndkxdp's bulk figures for the metrics and the report's
// ratios, for each op (write, read), MTU and queue count: the rate over
// Go TCP's and raw AF_XDP's, READ's over WRITE's, and each side's CPU
// per GB, absolute and over Go TCP's.
func bulkMetrics(rows []bulkRow) map[string]float64 {
	m := map[string]float64{}
	ratio := func(name string, x, y float64) {
		if y != 0 {
			m[name] = x / y
		}
	}
	for _, r := range rows {
		if r.Name != "ndkxdp" {
			continue
		}
		op := strings.ToLower(r.Op)
		sfx := fmt.Sprintf("-mtu%d-q%d", r.MTU, r.Queues)
		if ref, ok := findBulk(rows, "Go TCP", r.MTU, r.Queues); ok {
			ratio(op+"/tcp"+sfx, r.Gbps, ref.Gbps)
			ratio(op+"-rx-cpu-per-gb/tcp"+sfx, r.RxCPUPerGB, ref.RxCPUPerGB)
			ratio(op+"-tx-cpu-per-gb/tcp"+sfx, r.TxCPUPerGB, ref.TxCPUPerGB)
		}
		if ref, ok := findBulk(rows, "raw AF_XDP", r.MTU, r.Queues); ok {
			ratio(op+"/xdp"+sfx, r.Gbps, ref.Gbps)
		}
		m[op+"-rx-cpu-s/GB"+sfx] = r.RxCPUPerGB
		m[op+"-tx-cpu-s/GB"+sfx] = r.TxCPUPerGB
		if r.Op == "READ" {
			if w, ok := findBulkOp(rows, "WRITE", r.MTU, r.Queues); ok {
				ratio("read/write"+sfx, r.Gbps, w.Gbps)
			}
		}
	}
	return m
}

func findBulkOp(rows []bulkRow, op string, mtu, queues int) (bulkRow, bool) {
	for _, r := range rows {
		if r.Name == "ndkxdp" && r.Op == op && r.MTU == mtu && r.Queues == queues {
			return r, true
		}
	}
	return bulkRow{}, false
}

func reportBulk(b *testing.B, rows []bulkRow) {
	for k, v := range bulkMetrics(rows) {
		b.ReportMetric(v, k)
	}
}

// BenchmarkCPUCost measures, in one run on one veth pair (MTU 9000), what
// a 64 B message costs each side in CPU time, for ndkxdp (SEND, the
// default polling unless NDKXDP_BENCH_POLL=busy or progress), raw AF_XDP, Go UDP and Go TCP,
// each side a process of its own measured with getrusage; and what an
// idle adapter with connected QPs costs over 10 s. It reports ndkxdp's
// CPU per message as ratios to each baseline's. Run it with -benchtime 1x.
func BenchmarkCPUCost(b *testing.B) {
	p := harness.New(b, harness.Config{MTU: benchMTU, StaticNeighbours: true})
	for b.Loop() {
		rows := measureCost(b, p)
		idle := measureIdle(b, p)
		fmt.Print(costTable(rows, idle))
		reportCost(b, rows, idle)
	}
}

// BenchmarkBulk measures 64 KiB WRITE and READ throughput and each
// side's CPU per GB at MTU 4096 and 9000, over one queue and over four (a
// 4-queue veth pair, Options.Queues 4, one QP per queue), against Go
// TCP's single stream and raw AF_XDP moving frames of the size ndkxdp's
// are over as many queues in the same direction, in the same run. Run it
// with -benchtime 1x.
func BenchmarkBulk(b *testing.B) {
	for b.Loop() {
		var rows []bulkRow
		for _, mtu := range []int{4096, benchMTU} {
			for _, q := range []int{1, 4} {
				rows = append(rows, measureBulk(b, mtu, q)...)
			}
		}
		fmt.Print(bulkTable(rows))
		reportBulk(b, rows)
	}
}
