package perftest

import (
	"math"
	"slices"
)

// Timestamps are nanoseconds on the monotonic clock, so perftest's
// cycles_to_units is 1e9 per second (bandwidth) and 1000 per microsecond
// (latency).
const (
	nsPerSecond = 1e9
	nsPerUsec   = 1000
	mbFactor    = 0x100000  // MB/sec means 2^20 bytes per second (print_report_bw)
	gbFactor    = 125000000 // Gb/sec: 10^9 bits
)

// bwReport is print_report_bw for one QP, post_list 1, iterations mode:
// posted[i] is when request i was posted, completed[k] when the signaled
// completion covering request k was polled (only those indices are set).
// The peak is the best rate over every window that ends at a signaled
// completion; integer divisions and unsigned arithmetic are perftest's.
func bwReport(p *Params, posted, completed []uint64) Report {
	iters := len(posted)
	cqMod := p.CQMod
	optDelta := completed[0] - posted[0]
	if completed[0] == 0 {
		// With CQMod > 1 perftest never sets tcompleted[0]; the unsigned
		// difference wraps to a huge start value. Say so directly.
		optDelta = math.MaxUint64
	}
	if !p.NoPeak {
		for i := 0; i < iters; i++ {
			for j := roundUp(i+1, cqMod) - 1; j < iters; j += cqMod {
				if t := (completed[j] - posted[i]) / uint64(j-i+1); t < optDelta {
					optDelta = t
				}
			}
			if iters%cqMod != 0 {
				j := iters - 1
				if t := (completed[j] - posted[i]) / uint64(j-i+1); t < optDelta {
					optDelta = t
				}
			}
		}
	}
	format := uint64(mbFactor)
	if p.ReportGbits {
		format = gbFactor
	}
	loc := iters - 1
	if p.NoPeak {
		loc = 0
	}
	sum := float64(completed[loc] - posted[0])
	r := Report{
		Size:    uint64(p.Size),
		Iters:   uint64(iters),
		BWAvg:   float64(p.Size) * float64(iters) * nsPerSecond / (sum * float64(format)),
		MsgRate: float64(iters) * nsPerSecond / (sum * 1e6),
	}
	if !p.NoPeak {
		up := uint64(p.Size) * uint64(nsPerSecond)
		down := optDelta * format
		r.BWPeak = float64(up) / float64(down)
	}
	return r
}

func roundUp(v, m int) int { return (v + m - 1) / m * m }

// LatStats is the row print_report_lat prints, in microseconds.
type LatStats struct {
	Size, Iters                   int
	Min, Max, Typical, Avg, Stdev float64
	Percentile99, Percentile999   float64
}

// latTail is LAT_MEASURE_TAIL: the two largest samples are dropped.
const latTail = 2

// latReport is print_report_lat for tst == LAT: LatOf the test's posting
// times, whose deltas are halved for round-trip tests (send, write).
func latReport(p *Params, posted []uint64) LatStats {
	st := LatOf(posted, p.Verb != Read && p.Verb != Atomic)
	st.Size, st.Iters = p.Size, p.Iterations
	return st
}

// LatOf is print_report_lat's row of a latency test from the times (ns)
// its iterations were posted, each right after the last one's answer: the
// deltas between consecutive posts, halved when halve is set (a round
// trip of two half trips), sorted, the tail dropped; typical is the
// median. The standard deviation truncates each difference to int before
// squaring, as perftest does. Size and Iters are left zero.
func LatOf(posted []uint64, halve bool) LatStats {
	n := len(posted) - 1
	delta := make([]uint64, n)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
	}
	rtt := 1.0
	if halve {
		rtt = 2
	}
	q := nsPerUsec * rtt
	slices.Sort(delta)
	cnt := n - latTail
	var median uint64
	if (cnt-1)%2 != 0 {
		median = (delta[cnt/2] + delta[cnt/2-1]) / 2
	} else {
		median = delta[cnt/2]
	}
	var sum float64
	for i := 0; i < cnt; i++ {
		sum += float64(delta[i]) / q
	}
	avg := sum / float64(cnt)
	var stdevSum float64
	for i := 0; i < cnt; i++ {
		tv := int32(avg - float64(delta[i])/q)
		stdevSum += float64(int32(math.Pow(float64(tv), 2)))
	}
	i99 := int(math.Ceil(float64(cnt) * 0.99))
	i999 := int(math.Ceil(float64(cnt) * 0.999))
	return LatStats{
		Min: float64(delta[0]) / q, Max: float64(delta[cnt]) / q,
		Typical: float64(median) / q, Avg: avg, Stdev: math.Sqrt(stdevSum / float64(cnt)),
		Percentile99: float64(delta[i99]) / q, Percentile999: float64(delta[i999]) / q,
	}
}
