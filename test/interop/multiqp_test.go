package interop

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// bwCases are perftest's bandwidth tests. testPerftestQPs runs each with
// -q 2 against rxe, both ways: one control connection, two data
// connections, the pingpong_dests exchanged per QP, -n on each QP; each
// side's row counts -n x 2 messages.
var bwCases = []perfCase{
	{"ib_write_bw", perftest.Write, perftest.BW},
	{"ib_send_bw", perftest.Send, perftest.BW},
	{"ib_read_bw", perftest.Read, perftest.BW},
	{"ib_atomic_bw", perftest.Atomic, perftest.BW},
}

const qpsInterop = 2

func testPerftestQPs(t *testing.T, p *peer) {
	t.Run("ib_write_bw_q24/rxe_client", func(t *testing.T) { testPerftestManyQPs(t, p) })
	retry := perftest.Retry{Attempts: 100, Interval: 100 * time.Millisecond}
	for _, c := range bwCases {
		prm := c.params(4096)
		prm.Port, prm.MTU, prm.QPs = perfPort, p.dev.Adapter.PathMTU(), qpsInterop
		row := prm
		row.Iterations = prm.Iterations * qpsInterop
		flags := fmt.Sprintf("-R -d rxe0 -F -q %d -n %d -p %d", qpsInterop, prm.Iterations, perfPort)
		if c.verb != perftest.Atomic {
			flags += fmt.Sprintf(" -s %d", prm.Size)
		}
		t.Run(c.tool+"/rxe_server", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			q := prm
			q.ConnectRetry = retry
			theirs = p.guestServer(t, ctx, c.tool+" "+flags, perfPort, func() error {
				_, err := perftest.RunClient(ctx, q, &ndkxdpConnector{p}, &ours)
				return err
			})
			t.Logf("rxe server:\n%s\nndkxdp client:\n%s", theirs, ours.String())
			requireRow(t, "ndkxdp's client", ours.String(), ours.String(), row)
			requireRow(t, "rxe's server", theirs, theirs, row)
		})
		t.Run(c.tool+"/rxe_client", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			var res perftest.Result
			theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
				var err error
				res, err = perftest.RunServer(ctx, prm, l, &ours)
				return err
			}, fmt.Sprintf("%s %s %v", c.tool, flags, HostIPv4))
			t.Logf("rxe client:\n%s\nndkxdp server:\n%s", theirs, ours.String())
			requireRow(t, "rxe's client", theirs, theirs, row)
			requireRow(t, "ndkxdp's server", ours.String(), theirs, row)
			if len(res.Peers) != qpsInterop || res.Peers[0].QPN == res.Peers[1].QPN {
				t.Errorf("rxe's QPs as our server learned them: %+v", res.Peers)
			}
			if c.verb == perftest.Send {
				for i, n := range res.PerQP {
					if n != prm.Iterations {
						t.Errorf("our qp %d consumed %d receives, want %d", i, n, prm.Iterations)
					}
				}
			}
		})
	}
}

// testPerftestManyQPs: rxe's client with -q 24 sends its 24 connect
// requests at once; our server takes them all (its listener's backlog is
// larger than that) and runs the test. Within a minute: Debian 13's
// perftest exits without answering our DREQs, and the server's QPs wait
// for their DREPs together (5 s), not one after another (2 minutes).
func testPerftestManyQPs(t *testing.T, p *peer) {
	const qps = 24
	prm := perfCase{"ib_write_bw", perftest.Write, perftest.BW}.params(4096)
	prm.Port, prm.MTU, prm.QPs = perfPort, p.dev.Adapter.PathMTU(), qps
	row := prm
	row.Iterations = prm.Iterations * qps
	var ours bytes.Buffer
	var theirs string
	p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
	ctx := ctxFor(t, 2*time.Minute)
	var took time.Duration
	theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
		start := time.Now()
		_, err := perftest.RunServer(ctx, prm, l, &ours)
		took = time.Since(start)
		return err
	}, fmt.Sprintf("ib_write_bw -R -d rxe0 -F -q %d -n %d -s %d -p %d %v", qps, prm.Iterations, prm.Size, perfPort, HostIPv4))
	if took > time.Minute {
		t.Errorf("our server took %v: its %d QPs waited for their DREPs one after another", took, qps)
	}
	t.Logf("rxe client:\n%s\nndkxdp server:\n%s", reportLines(theirs), reportLines(ours.String()))
	requireRow(t, "rxe's client", theirs, theirs, row)
	requireRow(t, "ndkxdp's server", ours.String(), theirs, row)
}
