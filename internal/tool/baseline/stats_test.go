package baseline

import (
	"testing"
	"time"
)

func TestSummarizeNearestRank(t *testing.T) {
	s := make([]time.Duration, 0, 100)
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	l := Summarize(s)
	if l.N != 100 || l.P50 != 50*time.Microsecond || l.P99 != 99*time.Microsecond || l.Min != time.Microsecond || l.Max != 100*time.Microsecond {
		t.Errorf("Summarize = %+v", l)
	}
	if one := Summarize([]time.Duration{7}); one.P50 != 7 || one.P99 != 7 {
		t.Errorf("single sample: %+v", one)
	}
	if empty := Summarize(nil); empty.N != 0 {
		t.Errorf("empty: %+v", empty)
	}
}

// TestSummarizeP999: with 2000 samples the 99.9th percentile is the
// 1998th (nearest rank), apart from p99 (the 1980th) and the maximum.
func TestSummarizeP999(t *testing.T) {
	s := make([]time.Duration, 0, 2000)
	for i := 1; i <= 2000; i++ {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	l := Summarize(s)
	if l.P99 != 1980*time.Microsecond || l.P999 != 1998*time.Microsecond || l.Max != 2000*time.Microsecond {
		t.Errorf("p99 %v p99.9 %v max %v, want 1.98ms 1.998ms 2ms", l.P99, l.P999, l.Max)
	}
}

func TestRateUnits(t *testing.T) {
	r := Rate{Messages: 2_000_000, Bytes: 2_000_000 * 1500, Elapsed: 2 * time.Second}
	if r.PerSecond() != 1e6 {
		t.Errorf("PerSecond = %v", r.PerSecond())
	}
	if r.Gbps() != 12 {
		t.Errorf("Gbps = %v", r.Gbps())
	}
	if (Rate{}).PerSecond() != 0 {
		t.Error("zero window must give zero rate")
	}
}

func TestPayloadSize(t *testing.T) {
	if n, err := payloadSize(64, udpOverhead); err != nil || n != 22 {
		t.Errorf("64-byte UDP frame payload = %d, %v; want 22", n, err)
	}
	if _, err := payloadSize(40, udpOverhead); err == nil {
		t.Error("a frame smaller than its headers must be rejected")
	}
}
