package interop

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// testPerftestModes runs perftest's -a and -D against rxe, one case each
// way: ib_write_bw -R -a with rxe's server (our client prints a row for
// each size from 2 to 2^23; rxe prints the one row our client sends, the
// last size's) and ib_send_lat -R -D 2 with rxe's client (each side
// prints the duration table's one row).
func testPerftestModes(t *testing.T, p *peer) {
	retry := perftest.Retry{Attempts: 100, Interval: 100 * time.Millisecond}
	t.Run("ib_write_bw_a/rxe_server", func(t *testing.T) {
		prm := perftest.Params{Verb: perftest.Write, Kind: perftest.BW, AllSizes: true, Iterations: 5, Port: perfPort,
			ConnectRetry: retry, MTU: p.dev.Adapter.PathMTU()}
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, time.Minute)
		theirs = p.guestServer(t, ctx, fmt.Sprintf("ib_write_bw -R -d rxe0 -F -a -n 5 -p %d", perfPort), perfPort, func() error {
			_, err := perftest.RunClient(ctx, prm, &ndkxdpConnector{p}, &ours)
			return err
		})
		t.Logf("rxe server:\n%sndkxdp client:\n%s", reportLines(theirs), reportLines(ours.String()))
		last := prm
		for size := 2; size <= perftest.MaxSize; size *= 2 {
			last.Size = size
			requireRow(t, fmt.Sprintf("ndkxdp's client (%d bytes)", size), ours.String(), ours.String(), last)
		}
		if n := strings.Count(reportLines(theirs), "\n"); n != 1 {
			t.Errorf("rxe's server printed %d rows, want the one the client sent", n)
		}
		requireRow(t, "rxe's server", theirs, theirs, last)
	})
	t.Run("ib_send_lat_D/rxe_client", func(t *testing.T) {
		prm := perftest.Params{Verb: perftest.Send, Kind: perftest.Lat, Duration: 2 * time.Second, Port: perfPort,
			MTU: p.dev.Adapter.PathMTU()}
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, time.Minute)
		start := time.Now()
		theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
			_, err := perftest.RunServer(ctx, prm, l, &ours)
			return err
		}, fmt.Sprintf("ib_send_lat -R -d rxe0 -F -D 2 -p %d %v", perfPort, HostIPv4))
		t.Logf("rxe client:\n%sndkxdp server:\n%s", reportLines(theirs), reportLines(ours.String()))
		if el := time.Since(start); el < 2*time.Second {
			t.Errorf("the run took %v, less than -D 2", el)
		}
		requireDurationRow(t, "rxe's client", theirs)
		requireDurationRow(t, "ndkxdp's server", ours.String())
	})
}

// requireDurationRow fails unless out has a latency test's duration table
// (#bytes, #iterations, t_avg, tps) with one row of 2 bytes and a
// positive count; t_avg and tps may be void only where perftest says its
// clock calibration failed (see requireRow).
func requireDurationRow(t *testing.T, who, out string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "t_avg[usec]    tps average") || i+1 >= len(lines) {
			continue
		}
		f := strings.Fields(lines[i+1])
		if len(f) != 4 || f[0] != "2" {
			t.Fatalf("%s: duration row %q, want 2 bytes, a count, t_avg and tps:\n%s", who, f, out)
		}
		if n, err := strconv.ParseUint(f[1], 10, 64); err != nil || n == 0 {
			t.Fatalf("%s: %q iterations in the window:\n%s", who, f[1], out)
		}
		for _, m := range f[2:] {
			if v, err := strconv.ParseFloat(m, 64); (err != nil || math.IsInf(v, 0) || math.IsNaN(v) || v <= 0) && !strings.Contains(out, "Correlation coefficient") {
				t.Fatalf("%s: measure %q without a clock calibration failure:\n%s", who, m, out)
			}
		}
		return
	}
	t.Fatalf("%s: no duration table:\n%s", who, out)
}
