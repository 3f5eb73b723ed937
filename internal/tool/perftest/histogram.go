package perftest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Histogram is the distribution of a latency test's samples (the same
// samples as LatStats: halved round trips for send and write, the two
// largest dropped), in buckets whose bounds double: ndkxdp perf
// -histogram prints it.
type Histogram struct {
	Buckets []Bucket
	Samples int
}

// Bucket counts the samples in [Low, High) microseconds.
type Bucket struct {
	Low, High float64
	Count     int
}

// latHistogram builds the histogram of the samples latReport reports.
func latHistogram(p *Params, posted []uint64) *Histogram {
	n := len(posted) - 1
	if n <= latTail {
		return &Histogram{}
	}
	q := nsPerUsec * 2.0
	if p.Verb == Read || p.Verb == Atomic {
		q = nsPerUsec
	}
	us := make([]float64, n)
	for i := range us {
		us[i] = float64(posted[i+1]-posted[i]) / q
	}
	slices.Sort(us)
	return NewHistogram(us[:n-latTail])
}

// NewHistogram sorts samples (microseconds) into buckets with bounds at
// powers of two (…, 0.5, 1, 2, 4, …), from the smallest sample's bucket to
// the largest's.
func NewHistogram(samples []float64) *Histogram {
	h := &Histogram{Samples: len(samples)}
	if len(samples) == 0 {
		return h
	}
	lo, hi := samples[0], samples[0]
	for _, s := range samples {
		lo, hi = min(lo, s), max(hi, s)
	}
	exp := func(v float64) int {
		if v <= 0 {
			return -10 // below a nanosecond
		}
		return max(int(math.Floor(math.Log2(v))), -10)
	}
	first, last := exp(lo), exp(hi)
	for e := first; e <= last; e++ {
		h.Buckets = append(h.Buckets, Bucket{Low: math.Ldexp(1, e), High: math.Ldexp(1, e+1)})
	}
	h.Buckets[0].Low = 0
	for _, s := range samples {
		h.Buckets[exp(s)-first].Count++
	}
	return h
}

// PrintHistogram writes h as a table with a bar per bucket.
func PrintHistogram(w io.Writer, h *Histogram) {
	if h == nil || h.Samples == 0 {
		return
	}
	most := 0
	for _, b := range h.Buckets {
		most = max(most, b.Count)
	}
	fmt.Fprintf(w, " latency[usec]          count      %%\n")
	cum := 0
	for _, b := range h.Buckets {
		cum += b.Count
		bar := strings.Repeat("#", (b.Count*40+most-1)/most)
		fmt.Fprintf(w, " [%8.3f, %8.3f) %9d %6.2f%% %s\n", b.Low, b.High, b.Count, 100*float64(b.Count)/float64(h.Samples), bar)
	}
}
