package perftest

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestBWReportArithmetic(t *testing.T) {
	p := Params{Size: 1000, CQMod: 2}
	posted := []uint64{0, 10, 20, 30}
	completed := []uint64{0, 60, 0, 200} // signaled completions at 2 and 4
	r := bwReport(&p, posted, completed)
	// Best window: requests 0..1 in 60 ns, 30 ns each.
	if want := 1e12 / (30 * 1048576.0); r.BWPeak != want {
		t.Errorf("peak %v, want %v", r.BWPeak, want)
	}
	if want := 4000e9 / (200 * 1048576.0); r.BWAvg != want {
		t.Errorf("avg %v, want %v", r.BWAvg, want)
	}
	if r.MsgRate != 20 || r.Size != 1000 || r.Iters != 4 {
		t.Errorf("report %+v", r)
	}
	// Gb/s divides by 125e6 instead of 2^20.
	p.ReportGbits = true
	if g := bwReport(&p, posted, completed); g.BWAvg != 4000e9/(200*125e6) {
		t.Errorf("Gb/s avg %v", g.BWAvg)
	}
	// -N: no peak, the average over completed[0] - posted[0].
	p = Params{Size: 1000, CQMod: 2, NoPeak: true}
	r = bwReport(&p, []uint64{0, 0, 0, 0}, []uint64{400, 0, 0, 0})
	if r.BWPeak != 0 || r.BWAvg != 4000e9/(400*1048576.0) {
		t.Errorf("-N report %+v", r)
	}
	// A final signaled completion that is not on a CQMod boundary counts.
	p = Params{Size: 1, CQMod: 2}
	r = bwReport(&p, []uint64{0, 100, 200}, []uint64{0, 1000, 210})
	if want := 1e9 / (10 * 1048576.0); r.BWPeak != want {
		t.Errorf("peak with a trailing completion %v, want %v", r.BWPeak, want)
	}
}

func TestLatReportArithmetic(t *testing.T) {
	deltas := []uint64{3000, 1000, 2000, 6000, 4000, 5000}
	posted := []uint64{0}
	for _, d := range deltas {
		posted = append(posted, posted[len(posted)-1]+d)
	}
	tests := []struct {
		verb Verb
		want LatStats
	}{
		// One-way for READ: sorted 1..6 us, the two largest dropped, median
		// of 1,2,3,4 is 2.5; stdev truncates the differences 1.5, 0.5,
		// -0.5, -1.5 to 1, 0, 0, -1.
		{Read, LatStats{Size: 8, Iters: 7, Min: 1, Max: 5, Typical: 2.5, Avg: 2.5, Stdev: math.Sqrt(0.5), Percentile99: 5, Percentile999: 5}},
		// Round trip halved for WRITE; every truncated difference is 0.
		{Write, LatStats{Size: 8, Iters: 7, Min: 0.5, Max: 2.5, Typical: 1.25, Avg: 1.25, Stdev: 0, Percentile99: 2.5, Percentile999: 2.5}},
	}
	for _, tt := range tests {
		p := Params{Verb: tt.verb, Size: 8, Iterations: 7}
		if got := latReport(&p, posted); got != tt.want {
			t.Errorf("%v: %+v, want %+v", tt.verb, got, tt.want)
		}
	}
	// Odd sample count: the median is the middle sample.
	p := Params{Verb: Read, Size: 2, Iterations: 6}
	if got := latReport(&p, posted[:6]); got.Typical != 2 {
		t.Errorf("median of 1,2,3 = %v", got.Typical)
	}
}

func TestReportText(t *testing.T) {
	var b bytes.Buffer
	PrintBWHeader(&b, false)
	PrintBW(&b, Report{Size: 65536, Iters: 5000, BWPeak: 1234.5678, BWAvg: 1200.1, MsgRate: 0.019201}, false)
	PrintFooter(&b)
	want := resultLine +
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		" 65536      5000             1234.57            1200.10\t\t   0.019201\n" +
		resultLine
	if b.String() != want {
		t.Errorf("bw table\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	PrintBW(&b, Report{Size: 8, Iters: 1000, BWPeak: 0.051234, BWAvg: 0.0456, MsgRate: 0.712}, true)
	if want := " 8          1000           0.051234            0.045600            0.712000\n"; b.String() != want {
		t.Errorf("small Gb/s row %q, want %q", b.String(), want)
	}
	b.Reset()
	PrintLatHeader(&b)
	PrintLat(&b, LatStats{Size: 2, Iters: 1000, Min: 1, Max: 5, Typical: 2.5, Avg: 2.5, Stdev: 0.7071, Percentile99: 5, Percentile999: 5})
	want = resultLine +
		" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		" 2       1000          1.00           5.00         2.50     \t       2.50        \t0.71   \t\t5.00    \t\t5.00   \n"
	if b.String() != want {
		t.Errorf("lat table\n%q\nwant\n%q", b.String(), want)
	}
	if len(resultLine) != 88 {
		t.Errorf("RESULT_LINE is %d bytes, want 87 dashes and a newline", len(resultLine))
	}
}

// TestHistogram: buckets double from the smallest sample's to the
// largest's, and count every sample once.
func TestHistogram(t *testing.T) {
	h := NewHistogram([]float64{0.7, 1, 1.5, 3, 3.9, 17})
	var lows []float64
	total := 0
	for _, b := range h.Buckets {
		lows = append(lows, b.Low)
		total += b.Count
	}
	if want := []float64{0, 1, 2, 4, 8, 16}; !slices.Equal(lows, want) || total != 6 || h.Buckets[0].Count != 1 || h.Buckets[1].Count != 2 || h.Buckets[2].Count != 2 || h.Buckets[5].Count != 1 {
		t.Errorf("buckets %+v", h.Buckets)
	}
	// latHistogram takes latReport's samples: halved round trips, the two
	// largest dropped.
	posted := []uint64{0, 2000, 4000, 8000, 100000, 200000}
	h = latHistogram(&Params{Verb: Send}, posted)
	if h.Samples != 3 || h.Buckets[0].Count != 2 || h.Buckets[len(h.Buckets)-1].Count != 1 {
		t.Errorf("latHistogram: %+v", h)
	}
	var b bytes.Buffer
	PrintHistogram(&b, h)
	if !strings.Contains(b.String(), "66.67% ####") {
		t.Errorf("printed:\n%s", b.String())
	}
}
