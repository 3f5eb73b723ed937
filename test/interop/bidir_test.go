package interop

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

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
