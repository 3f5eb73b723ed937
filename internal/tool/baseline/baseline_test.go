package baseline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestMeasurementsProduceFigures runs every measurement briefly and checks
// each produced a plausible figure: frames were counted, round trips were
// timed and ordered. It asserts nothing about speed (this machine is shared).
func TestMeasurementsProduceFigures(t *testing.T) {
	p := harness.New(t, harness.Config{})
	r, err := Run(context.Background(), p, Options{Duration: 100 * time.Millisecond, Pings: 300, Progress: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{XDP, UDP, TCP} {
		for _, size := range r.Options.Sizes {
			m := r.Rates[c][size]
			if m.Messages == 0 || m.Elapsed < 100*time.Millisecond || m.Bytes != m.Messages*uint64(size) {
				t.Errorf("%s rate at %d bytes: %+v", c, size, m)
			}
		}
		l := r.RTT[c]
		if l.N != 300 || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 || l.Min > l.P50 {
			t.Errorf("%s ping-pong: %+v", c, l)
		}
	}
	t.Logf("\n%s", r.Table())
}

// TestRunEndsWithContext: a run whose context ends returns at once with
// ctx's error, though its windows are a minute long.
func TestRunEndsWithContext(t *testing.T) {
	p := harness.New(t, harness.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, p, Options{Duration: time.Minute, Pings: 10_000_000})
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("Run returned %v after %v, want the context's error within 5s", err, took)
	}
}

// BenchmarkBaseline measures raw AF_XDP, Go UDP and Go TCP on one veth pair
// in one run and prints the figures with their ratios to AF_XDP:
//
//	go test -run '^$' -bench Baseline -benchtime 1x ./internal/tool/baseline
func BenchmarkBaseline(b *testing.B) {
	p := harness.New(b, harness.Config{})
	for range b.N {
		r, err := Run(context.Background(), p, Options{Duration: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		for _, size := range r.Options.Sizes {
			b.ReportMetric(r.Rates[XDP][size].PerSecond(), "xdp-pps-"+itoa(size))
			b.ReportMetric(r.Rates[UDP][size].PerSecond()/r.Rates[XDP][size].PerSecond(), "udp/xdp-rate-"+itoa(size))
			b.ReportMetric(r.Rates[TCP][size].PerSecond()/r.Rates[XDP][size].PerSecond(), "tcp/xdp-rate-"+itoa(size))
		}
		b.ReportMetric(us(r.RTT[XDP].P50), "xdp-rtt-p50-us")
		b.ReportMetric(float64(r.RTT[UDP].P50)/float64(r.RTT[XDP].P50), "udp/xdp-rtt-p50")
		b.ReportMetric(float64(r.RTT[TCP].P50)/float64(r.RTT[XDP].P50), "tcp/xdp-rtt-p50")
		b.Logf("\n%s", r.Table())
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}
