package baseline

import (
	"fmt"
	"slices"
	"time"
)

// Rate is a measured message rate at the receiver.
type Rate struct {
	Messages uint64        // messages received in the window
	Bytes    uint64        // frame bytes received (size × messages)
	Elapsed  time.Duration // measurement window
}

// PerSecond returns messages per second.
func (r Rate) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

// Gbps returns frame bits per second in units of 10^9.
func (r Rate) Gbps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e9
}

// Latency summarizes round-trip samples.
type Latency struct {
	N              int
	P50, P99, P999 time.Duration // P999 is the 99.9th percentile
	Min, Max       time.Duration
}

// Summarize sorts samples in place and returns their percentiles.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	return Latency{
		N:    len(samples),
		P50:  percentile(samples, 500),
		P99:  percentile(samples, 990),
		P999: percentile(samples, 999),
		Min:  samples[0],
		Max:  samples[len(samples)-1],
	}
}

// percentile uses the nearest-rank method on sorted samples; p is in
// tenths of a percent (999: p99.9).
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 999) / 1000 // ceil(p/1000 × n)
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

func (l Latency) String() string {
	return fmt.Sprintf("p50 %v p99 %v (n=%d)", l.P50.Round(100*time.Nanosecond), l.P99.Round(100*time.Nanosecond), l.N)
}
