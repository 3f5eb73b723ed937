package interop

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// srqSize is the one message size of the SRQ cases: several packets at
// path MTU 1024, one at 4096.
const srqSize = 4096

// srqCases are perftest's send tests with --use-srq, rxe the client:
// ib_send_bw's server (ndkxdp) receives through an SRQ, and in
// ib_send_lat both sides do (perftest's srq_exists).
var srqCases = []perfCase{
	{"ib_send_bw", perftest.Send, perftest.BW},
	{"ib_send_lat", perftest.Send, perftest.Lat},
}

// srqRecorder is the ndkxdp listener of an SRQ case: it makes the SRQs
// (verbs.SRQMaker) and keeps them, so the case can count what went to
// them.
type srqRecorder struct {
	*ndkverbs.Listener
	dev  *ndkverbs.Device
	mu   sync.Mutex
	srqs []*ndkverbs.SRQ
}

func (l *srqRecorder) CreateSRQ(depth int) (verbs.SRQ, error) {
	s, err := l.dev.CreateSRQ(depth)
	if err == nil {
		l.mu.Lock()
		l.srqs = append(l.srqs, s)
		l.mu.Unlock()
	}
	return s, err
}

// testSRQ: rxe's `ib_send_bw -R --use-srq` and `ib_send_lat -R
// --use-srq` run against ndkxdp's server with --use-srq. rxe must say it
// uses an SRQ and both sides must print their result rows, as in the
// perftest cases; ndkxdp's server must have made one SRQ and posted every
// receive of the run to it (its data QP, made on the SRQ, has no receive
// queue, so every SEND that completed was received through the SRQ).
func testSRQ(t *testing.T, p *peer) {
	for _, c := range srqCases {
		prm := c.params(srqSize)
		prm.MTU = p.dev.Adapter.PathMTU()
		prm.UseSRQ = true
		t.Run(fmt.Sprintf("%s_srq/%dB/rxe_client", c.tool, srqSize), func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			var rec *srqRecorder
			var res perftest.Result
			out := p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) (err error) {
				rec = &srqRecorder{Listener: l.(*ndkverbs.Listener), dev: p.dev}
				res, err = perftest.RunServer(ctx, prm, rec, &ours)
				return err
			}, c.tool+" "+guestArgs(prm)+" --use-srq "+HostIPv4.String())
			theirs = out
			t.Logf("rxe client (--use-srq):\n%sndkxdp server (--use-srq):\n%s", reportLines(out), reportLines(ours.String()))
			if !regexpUsingSRQ(out) {
				t.Fatalf("rxe's perftest does not report \"Using SRQ : ON\":\n%s", out)
			}
			requireRow(t, "rxe's client", out, out, prm)
			requireRow(t, "ndkxdp's server", ours.String(), ours.String(), prm)
			if len(rec.srqs) != 1 {
				t.Fatalf("ndkxdp's server made %d SRQs, want 1", len(rec.srqs))
			}
			if got, want := rec.srqs[0].Posted(), uint64(res.Params.Iterations); got != want {
				t.Fatalf("ndkxdp's server posted %d receives to its SRQ, want %d (every receive of the run)", got, want)
			}
		})
	}
	testSRQLatServer(t, p)
}

// srqConnector is ndkxdpConnector with SRQs (verbs.SRQMaker), kept for
// the case to count what went to them.
type srqConnector struct {
	ndkxdpConnector
	srqs []*ndkverbs.SRQ
}

func (c *srqConnector) CreateSRQ(depth int) (verbs.SRQ, error) {
	s, err := c.p.dev.CreateSRQ(depth)
	if err == nil {
		c.srqs = append(c.srqs, s)
	}
	return s, err
}

// testSRQLatServer: rxe's `ib_send_lat -R --use-srq` server against
// ndkxdp's client with --use-srq, whose receives (a latency client has
// an SRQ, perftest's srq_exists) all go to the SRQ of its data
// connection.
func testSRQLatServer(t *testing.T, p *peer) {
	c := srqCases[1]
	prm := c.params(srqSize)
	prm.MTU = p.dev.Adapter.PathMTU()
	prm.UseSRQ = true
	t.Run(fmt.Sprintf("%s_srq/%dB/rxe_server", c.tool, srqSize), func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, c.timeout())
		conn := &srqConnector{ndkxdpConnector: ndkxdpConnector{p}}
		var res perftest.Result
		out := p.guestServer(t, ctx, c.tool+" "+guestArgs(prm)+" --use-srq", perfPort, func() (err error) {
			res, err = perftest.RunClient(ctx, prm, conn, &ours)
			return err
		})
		theirs = out
		t.Logf("rxe server (--use-srq):\n%sndkxdp client (--use-srq):\n%s", reportLines(out), reportLines(ours.String()))
		if !regexpUsingSRQ(out) {
			t.Fatalf("rxe's perftest does not report \"Using SRQ : ON\":\n%s", out)
		}
		requireRow(t, "ndkxdp's client", ours.String(), ours.String(), prm)
		requireRow(t, "rxe's server", out, out, prm)
		// One SRQ per data connection attempt: rxe's server may not
		// listen yet when the first REQ comes (REJ reason 8).
		if len(conn.srqs) == 0 {
			t.Fatal("ndkxdp's client made no SRQ")
		}
		if got, want := conn.srqs[len(conn.srqs)-1].Posted(), uint64(res.Params.Iterations); got != want {
			t.Fatalf("ndkxdp's client posted %d receives to the SRQ of its data connection, want %d (every receive of the run)", got, want)
		}
		t.Logf("ndkxdp's client: %d data connection attempts, one SRQ each", len(conn.srqs))
	})
}

// regexpUsingSRQ finds perftest's header line "Connection type : RC
// Using SRQ      : ON".
func regexpUsingSRQ(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "Using SRQ"); i >= 0 && strings.HasSuffix(strings.TrimSpace(l[i:]), ": ON") {
			return true
		}
	}
	return false
}
