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

// bidirCases are the bandwidth tests run with perftest's -b against rxe,
// each both ways: both sides run the test at once and each prints the
// sum of both sides' rows, so the two rows are the same.
var bidirCases = []perfCase{
	{"ib_send_bw", perftest.Send, perftest.BW},
	{"ib_write_bw", perftest.Write, perftest.BW},
	{"ib_read_bw", perftest.Read, perftest.BW},
	{"ib_atomic_bw", perftest.Atomic, perftest.BW},
}

func testPerftestBidir(t *testing.T, p *peer) {
	for _, c := range bidirCases {
		prm := c.params(4096)
		prm.MTU, prm.Bidir = p.dev.Adapter.PathMTU(), true
		flags := guestArgs(prm) + " -b"
		t.Run(c.tool+"/rxe_server", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			theirs = p.guestServer(t, ctx, c.tool+" "+flags, perfPort, func() error {
				_, err := perftest.RunClient(ctx, prm, &ndkxdpConnector{p}, &ours)
				return err
			})
			t.Logf("rxe server:\n%s\nndkxdp client:\n%s", theirs, ours.String())
			requireSameSum(t, theirs, ours.String(), prm)
		})
		t.Run(c.tool+"/rxe_client", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
				_, err := perftest.RunServer(ctx, prm, l, &ours)
				return err
			}, fmt.Sprintf("%s %s %v", c.tool, flags, HostIPv4))
			t.Logf("rxe client:\n%s\nndkxdp server:\n%s", theirs, ours.String())
			requireSameSum(t, theirs, ours.String(), prm)
		})
	}
	// -q 2: every QP runs -n on both sides; each row counts -n x 2.
	for _, c := range bidirCases[:2] {
		prm := c.params(4096)
		prm.MTU, prm.Bidir, prm.QPs = p.dev.Adapter.PathMTU(), true, qpsInterop
		row := prm
		row.Iterations = prm.Iterations * qpsInterop
		flags := fmt.Sprintf("%s -b -q %d", guestArgs(prm), qpsInterop)
		t.Run(c.tool+"_q2/rxe_server", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			theirs = p.guestServer(t, ctx, c.tool+" "+flags, perfPort, func() error {
				_, err := perftest.RunClient(ctx, prm, &ndkxdpConnector{p}, &ours)
				return err
			})
			t.Logf("rxe server:\n%s\nndkxdp client:\n%s", theirs, ours.String())
			requireSameSum(t, theirs, ours.String(), row)
		})
		t.Run(c.tool+"_q2/rxe_client", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
				_, err := perftest.RunServer(ctx, prm, l, &ours)
				return err
			}, fmt.Sprintf("%s %s %v", c.tool, flags, HostIPv4))
			t.Logf("rxe client:\n%s\nndkxdp server:\n%s", theirs, ours.String())
			requireSameSum(t, theirs, ours.String(), row)
		})
	}
	// -D 2: each side times its own run. write bw exchanges the rows
	// and each prints the sum with its own count; send bw, as send_bw.c
	// does for -D, exchanges nothing and each prints its own row.
	for _, c := range bidirCases[:2] {
		prm := c.params(4096)
		prm.MTU, prm.Bidir, prm.Duration = p.dev.Adapter.PathMTU(), true, 2*time.Second
		flags := fmt.Sprintf("-R -d rxe0 -F -b -D 2 -s 4096 -p %d", perfPort)
		t.Run(c.tool+"_D/rxe_server", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, time.Minute)
			q := prm
			q.ConnectRetry = perftest.Retry{Attempts: 100, Interval: 100 * time.Millisecond}
			theirs = p.guestServer(t, ctx, c.tool+" "+flags, perfPort, func() error {
				_, err := perftest.RunClient(ctx, q, &ndkxdpConnector{p}, &ours)
				return err
			})
			t.Logf("rxe server:\n%s\nndkxdp client:\n%s", theirs, ours.String())
			requireBWDurationRow(t, "rxe's server", theirs, theirs)
			requireBWDurationRow(t, "ndkxdp's client", ours.String(), theirs)
		})
		t.Run(c.tool+"_D/rxe_client", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, time.Minute)
			theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
				_, err := perftest.RunServer(ctx, prm, l, &ours)
				return err
			}, fmt.Sprintf("%s %s %v", c.tool, flags, HostIPv4))
			t.Logf("rxe client:\n%s\nndkxdp server:\n%s", theirs, ours.String())
			requireBWDurationRow(t, "rxe's client", theirs, theirs)
			requireBWDurationRow(t, "ndkxdp's server", ours.String(), theirs)
		})
	}
}

// requireBWDurationRow fails unless out has one bandwidth row of 4096
// bytes with a positive count and no peak (duration mode); the averages
// may be void only where rxe's perftest (calib) says its clock
// calibration failed.
func requireBWDurationRow(t *testing.T, who, out, calib string) {
	t.Helper()
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		if reportLine.MatchString(l) {
			rows = append(rows, strings.Fields(l))
		}
	}
	if len(rows) != 1 || len(rows[0]) < 5 || rows[0][0] != "4096" {
		t.Fatalf("%s: rows %q, want one of 4096 bytes:\n%s", who, rows, out)
	}
	f := rows[0]
	if n, err := strconv.ParseUint(f[1], 10, 64); err != nil || n == 0 {
		t.Fatalf("%s: %q iterations in the window:\n%s", who, f[1], out)
	}
	if f[2] != "0.00" {
		t.Errorf("%s: peak %s in duration mode, want 0.00", who, f[2])
	}
	for _, m := range f[3:5] {
		if v, err := strconv.ParseFloat(m, 64); (err != nil || math.IsInf(v, 0) || math.IsNaN(v) || v <= 0) && !strings.Contains(calib, "Correlation coefficient") {
			t.Fatalf("%s: measure %q without a clock calibration failure:\n%s", who, m, out)
		}
	}
}

// requireSameSum checks each side's row of a -b run and that both
// printed the same sum of both sides' measures (print_full_bw_report;
// where rxe's clock is uncalibrated under TCG both sums carry its void
// measures alike).
func requireSameSum(t *testing.T, theirs, ours string, prm perftest.Params) {
	t.Helper()
	if !strings.Contains(theirs, "Bidirectional") {
		t.Errorf("rxe's perftest did not run bidirectional:\n%s", theirs)
	}
	requireRow(t, "rxe's perftest", theirs, theirs, prm)
	requireRow(t, "ndkxdp's perftest", ours, theirs, prm)
	r, _, err := resultRow(theirs, theirs, prm)
	if err != nil {
		return // requireRow said why
	}
	o, _, err := resultRow(ours, theirs, prm)
	if err != nil {
		return
	}
	if strings.Join(r, " ") != strings.Join(o, " ") {
		t.Errorf("rows differ: rxe printed %q, ndkxdp %q; both print the sum of both sides'", r, o)
	}
}
