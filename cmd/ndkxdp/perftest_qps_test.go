package main

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestPerfSeveralQPs runs `ndkxdp perf X -q 4` on both ends of a veth pair
// of 4 queues, each end's adapter opened with -queues 4: every bandwidth
// test completes with rows of -n x 4 messages on both sides (the write,
// read and atomic server prints the client's), and the frames spread over
// the engines: the QPs go to the queues round-robin, so each of the four
// engines of the side that sends the data moved at least -n frames.
func TestPerfSeveralQPs(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, Queues: 4, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	const n, qps = 200, 4
	for _, tc := range []struct {
		test string
		size string
		// sender is which side's engines send the data: the client's for
		// SEND and WRITE, the server's (READ responses) for READ.
		serverSends bool
	}{
		{"write_bw", "4096", false},
		{"send_bw", "2048", false},
		{"read_bw", "4096", true},
		{"atomic_bw", "8", false},
	} {
		t.Run(tc.test, func(t *testing.T) {
			args := []string{"perf", tc.test, "-q", "4", "-queues", "4", "-n", strconv.Itoa(n)}
			if tc.test != "atomic_bw" {
				args = append(args, "-s", tc.size)
			}
			cout, sout := runBoth(t, p,
				append(append([]string{}, args...), "-dev", p.B.Link),
				append(append([]string{}, args...), srv, "-dev", p.A.Link))
			t.Logf("client:\n%s\nserver:\n%s", cout, sout)
			for _, out := range []string{cout, sout} {
				if !strings.Contains(out, "4 QPs over 4 engine(s)") {
					t.Errorf("header does not name 4 QPs over 4 engines:\n%s", out)
				}
				rows := perfRows(out)
				if len(rows) != 1 || rows[0][1] != strconv.Itoa(n*qps) {
					t.Fatalf("rows %q, want one of %d iterations:\n%s", rows, n*qps, out)
				}
			}
			out := cout
			if tc.serverSends {
				out = sout
			}
			for i, f := range spread(t, out) {
				if f < n {
					t.Errorf("engine %d sent %d frames, want at least %d (one QP's messages): the QPs did not spread", i, f, n)
				}
			}
		})
	}
}

// spread parses printSpread's line: the frames each engine sent.
func spread(t *testing.T, out string) []uint64 {
	t.Helper()
	m := regexp.MustCompile(`frames out, in per engine:(.*)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no per-engine line:\n%s", out)
	}
	var sent []uint64
	for _, e := range regexp.MustCompile(`(\d+): (\d+), (\d+);`).FindAllStringSubmatch(m[1], -1) {
		v, _ := strconv.ParseUint(e[2], 10, 64)
		sent = append(sent, v)
	}
	if len(sent) != 4 {
		t.Fatalf("per-engine line %q, want 4 engines", m[0])
	}
	return sent
}

// BenchmarkPerfWriteBWQPs measures `ndkxdp perf write_bw -s 65536` with
// -q 1 and with -q 4 between two ndkxdp adapters of 4 queues each on a
// 4-queue veth pair, and -q 4 with one queue a side (every QP on one
// engine), alternating three runs of each, and reports the medians of
// the client's BW average (MB/s, perftest's 2^20) and their ratios. -n is per QP (NDKXDP_BENCH_N, default 2000), so -q 4 moves four
// times the bytes.
//
//	go test -run '^$' -bench PerfWriteBWQPs -benchtime 1x ./cmd/ndkxdp
func BenchmarkPerfWriteBWQPs(b *testing.B) {
	testenv.RequireRoot(b)
	p := harness.New(b, harness.Config{MTU: 1500, Queues: 4, StaticNeighbours: true})
	iters := "2000"
	if v := os.Getenv("NDKXDP_BENCH_N"); v != "" {
		iters = v
	}
	run := func(qps, queues string) float64 {
		args := []string{"perf", "write_bw", "-q", qps, "-queues", queues, "-s", "65536", "-n", iters}
		cout, _ := runBoth(b, p,
			append(append([]string{}, args...), "-dev", p.B.Link),
			append(append([]string{}, args...), p.B.IPv4.String(), "-dev", p.A.Link))
		rows := perfRows(cout)
		if len(rows) != 1 || len(rows[0]) < 4 {
			b.Fatalf("no row:\n%s", cout)
		}
		v, err := strconv.ParseFloat(rows[0][3], 64)
		if err != nil {
			b.Fatalf("BW average %q: %v", rows[0][3], err)
		}
		return v
	}
	for range b.N {
		var one, four, shared []float64
		for range 3 {
			one = append(one, run("1", "4"))
			four = append(four, run("4", "4"))
			shared = append(shared, run("4", "1"))
		}
		slices.Sort(one)
		slices.Sort(four)
		slices.Sort(shared)
		b.Logf("write_bw 64 KiB, MB/s: -q 1 %v, -q 4 %v (4 engines a side), -q 4 -queues 1 %v (one engine a side)", one, four, shared)
		b.ReportMetric(one[1], "MB/s-q1")
		b.ReportMetric(four[1], "MB/s-q4")
		b.ReportMetric(four[1]/one[1], "q4/q1")
		b.ReportMetric(shared[1]/one[1], "q4-1queue/q1")
	}
}
