package latency

import (
	"context"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/test/harness"
)

// BenchmarkLatency reports, per latency test and for kernel TCP, the
// median, p99 and p99.9 of one -n 1000 run between two processes, and
// the ratios the polling model is held to: p99/p50 (goal: at most 3
// idle, 10 with a spinning process beside) and p99 against TCP's p99
// measured in the same run (goal: at most 1). read_lat reports whole
// round trips, the others half round trips, so READ is held against
// twice TCP's figure.
func BenchmarkLatency(b *testing.B) {
	for _, load := range []string{"idle", "contended"} {
		b.Run(load, func(b *testing.B) {
			p := harness.New(b, harness.Config{})
			if load == "contended" {
				startHogs(b, cpus()[0])
			}
			for range b.N {
				tcp := measure(b, p, "tcp_lat")
				b.ReportMetric(tcp.Typical, "tcp-p50-us")
				b.ReportMetric(tcp.P99, "tcp-p99-us")
				for _, test := range []string{"send_lat", "write_lat", "read_lat"} {
					l := measure(b, p, test)
					base := tcp.P99
					if test == "read_lat" {
						base *= 2
					}
					b.ReportMetric(l.Typical, test+"-p50-us")
					b.ReportMetric(l.P99, test+"-p99-us")
					b.ReportMetric(l.P999, test+"-p99.9-us")
					b.ReportMetric(l.P99/l.Typical, test+"-p99/p50")
					b.ReportMetric(l.P99/base, test+"-p99/tcp-p99")
				}
			}
		})
	}
}

func measure(b *testing.B, p *harness.Pair, test string) Lat {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := perf(ctx, b, p, test, "-n", "1000")
	if r.srvErr != nil || r.cliErr != nil {
		b.Fatalf("%s: server %v, client %v\nserver:\n%s\nclient:\n%s", test, r.srvErr, r.cliErr, r.srv, r.cli)
	}
	l, err := parseLat(r.cli)
	if err != nil {
		b.Fatalf("%s: %v", test, err)
	}
	return l
}
