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

// testPerftestBidir runs the bandwidth tests (bwCases) with perftest's
// -b against rxe, each both ways: both sides run the test at once and
// each prints the sum of both sides' rows, so the two rows are the same.
// Send and write bw (bwCases[:2]) also run with -q 2 and with -D 2
// against Debian 13's rxe.
func testPerftestBidir(t *testing.T, p *peer) {
	for _, c := range bwCases {
		prm := c.params(4096)
		prm.MTU, prm.Bidir = p.dev.Adapter.PathMTU(), true
		bothWays(t, p, c.tool, prm, c.timeout(), c.tool+" "+guestArgs(prm)+" -b", func(t *testing.T, theirs, ours string) {
			requireSameSum(t, theirs, ours, prm)
		})
	}
	// The -q 2 and -D 2 variants run against one peer, the newer
	// perftest (25.01), which bounds CI's time: 4.5+0.17's main()s take
	// the same steps for them (bidir.go).
	if factsOf(t, p.vm).perftest != "25.01" {
		return
	}
	// -q 2: every QP runs -n on both sides; each row counts -n x 2.
	for _, c := range bwCases[:2] {
		prm := c.params(4096)
		prm.MTU, prm.Bidir, prm.QPs = p.dev.Adapter.PathMTU(), true, qpsInterop
		row := prm
		row.Iterations = prm.Iterations * qpsInterop
		cmd := fmt.Sprintf("%s %s -b -q %d", c.tool, guestArgs(prm), qpsInterop)
		bothWays(t, p, c.tool+"_q2", prm, c.timeout(), cmd, func(t *testing.T, theirs, ours string) {
			requireSameSum(t, theirs, ours, row)
		})
	}
	// -D 2: each side times its own run. write bw exchanges the rows
	// and each prints the sum with its own count; send bw, as send_bw.c
	// does for -D, exchanges nothing and each prints its own row.
	for _, c := range bwCases[:2] {
		prm := c.params(4096)
		prm.MTU, prm.Bidir, prm.Duration = p.dev.Adapter.PathMTU(), true, 2*time.Second
		cmd := fmt.Sprintf("%s -R -d rxe0 -F -b -D 2 -s 4096 -p %d", c.tool, perfPort)
		bothWays(t, p, c.tool+"_D", prm, time.Minute, cmd, func(t *testing.T, theirs, ours string) {
			requireBWDurationRow(t, "rxe's perftest", theirs, theirs)
			requireBWDurationRow(t, "ndkxdp's perftest", ours, theirs)
		})
	}
}

// bothWays runs perftest cmd (without the server's address) in the guest
// and ours with prm against it, rxe as server and then as client, and
// checks both outputs with check.
func bothWays(t *testing.T, p *peer, name string, prm perftest.Params, timeout time.Duration, cmd string, check func(t *testing.T, theirs, ours string)) {
	t.Run(name+"/rxe_server", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, timeout)
		theirs = p.guestServer(t, ctx, cmd, perfPort, func() error {
			_, err := perftest.RunClient(ctx, prm, &ndkxdpConnector{p}, &ours)
			return err
		})
		t.Logf("rxe server:\n%s\nndkxdp client:\n%s", theirs, ours.String())
		check(t, theirs, ours.String())
	})
	t.Run(name+"/rxe_client", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, timeout)
		theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
			_, err := perftest.RunServer(ctx, prm, l, &ours)
			return err
		}, fmt.Sprintf("%s %v", cmd, HostIPv4))
		t.Logf("rxe client:\n%s\nndkxdp server:\n%s", theirs, ours.String())
		check(t, theirs, ours.String())
	})
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
