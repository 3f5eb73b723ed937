package daemon_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// endpoint is one side of a measured connection: either mode's client on
// A (through the daemon, or straight on the daemon's own adapter), or the
// peer on B.
type endpoint struct {
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	mr       *ndk.MR
	mem      []byte
}

func newEndpoint(t testing.TB, a *ndk.Adapter, pd *ndk.PD, depth int) *endpoint {
	t.Helper()
	e := &endpoint{}
	var err error
	if e.rcq, err = a.CreateCQ(4*depth, nil); err != nil {
		t.Fatal(err)
	}
	if e.icq, err = a.CreateCQ(4*depth, nil); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = pd.CreateQP(ndk.QPConfig{ReceiveCQ: e.rcq, InitiatorCQ: e.icq, ReceiveQueueDepth: depth, InitiatorQueueDepth: depth,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}); err != nil {
		t.Fatal(err)
	}
	if e.mem, err = a.Memory(1 << 16); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = pd.RegisterMR(e.mem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteWrite|ndk.MRFlagAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	return e
}

// connectPair connects x (on adapter a) to a fresh endpoint on B through
// the CM.
func (bd *bed) connectPair(t testing.TB, a *ndk.Adapter, x *endpoint, port uint16, depth int) *endpoint {
	t.Helper()
	b := bd.b
	y := newEndpoint(t, b.Adapter, b.PD, depth)
	acc := make(chan error, 1)
	l, err := b.Adapter.CreateListener(func(c *ndk.Connector) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		acc <- c.Accept(ctx, y.qp, 4, 4, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	dst := netip.AddrPortFrom(bd.pair.B.IPv4, port)
	if err := l.Listen(dst); err != nil {
		t.Fatal(err)
	}
	c, err := a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Connect(ctx, x.qp, netip.AddrPort{}, dst, 4, 4, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	if err := <-acc; err != nil {
		t.Fatal(err)
	}
	return y
}

// sendRate streams n 64-byte SENDs from x to y, window deep, y reposting
// its receives; it returns messages per second.
func sendRate(t testing.TB, x, y *endpoint, n, window int) float64 {
	t.Helper()
	rs, _ := y.mr.SGE(0, 64)
	for range window {
		if err := y.qp.Receive(nil, []ndk.SGE{rs}); err != nil {
			t.Fatal(err)
		}
	}
	ss, _ := x.mr.SGE(0, 64)
	var res [64]ndk.Result
	sent, done, recvd := 0, 0, 0
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for done < n || recvd < n {
		for sent < n && sent-done < window {
			if err := x.qp.Send(nil, []ndk.SGE{ss}, 0); err != nil {
				break
			}
			sent++
		}
		for k := y.rcq.GetResults(res[:]); k > 0; k = y.rcq.GetResults(res[:]) {
			for i := range k {
				if res[i].Status != ndk.StatusSuccess {
					t.Fatalf("receive %v", res[i].Status)
				}
				recvd++
				if err := y.qp.Receive(nil, []ndk.SGE{rs}); err != nil {
					t.Fatal(err)
				}
			}
		}
		done += x.icq.GetResults(res[:])
		if time.Now().After(deadline) {
			t.Fatalf("send stream stalled: %d sent, %d done, %d received", sent, done, recvd)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// pingPong measures n SEND round trips from x through y's echo; it returns
// the median round trip.
func pingPong(t testing.TB, x, y *endpoint, n int) time.Duration {
	t.Helper()
	xs, _ := x.mr.SGE(0, 64)
	ys, _ := y.mr.SGE(0, 64)
	var res [4]ndk.Result
	poll := func(c *ndk.CQ, what string) {
		deadline := time.Now().Add(5 * time.Second)
		for c.GetResults(res[:1]) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("ping-pong: no %s in 5 s", what)
			}
		}
		if res[0].Status != ndk.StatusSuccess {
			t.Fatalf("ping-pong %s: %v", what, res[0].Status)
		}
	}
	rtt := make([]time.Duration, 0, n)
	for range n {
		if err := y.qp.Receive(nil, []ndk.SGE{ys}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.Receive(nil, []ndk.SGE{xs}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := x.qp.Send(nil, []ndk.SGE{xs}, 0); err != nil {
			t.Fatal(err)
		}
		poll(y.rcq, "ping")
		if err := y.qp.Send(nil, []ndk.SGE{ys}, 0); err != nil {
			t.Fatal(err)
		}
		poll(x.rcq, "pong")
		rtt = append(rtt, time.Since(start))
		poll(x.icq, "ping's completion")
		poll(y.icq, "pong's completion")
	}
	slices.Sort(rtt)
	return rtt[len(rtt)/2]
}

// BenchmarkDaemonVsInProcess measures, in one run on one veth pair, a QP
// of a daemon-backed adapter against a QP straight on the daemon's own
// adapter (the same engines): 64-byte SEND message rate and SEND
// ping-pong median round trip, and reports the ratios.
//
//	go test -run '^$' -bench DaemonVsInProcess -benchtime 1x ./test/daemon
func BenchmarkDaemonVsInProcess(b *testing.B) {
	bd := newBenchBed(b)
	c := dial(b, bd.sock)
	const depth = 256
	for i := 0; i < b.N; i++ {
		inx := newEndpoint(b, bd.a, bd.apd, depth)
		iny := bd.connectPair(b, bd.a, inx, uint16(7300+4*i), depth)
		dx := newEndpoint(b, c.a, c.pd, depth)
		dy := bd.connectPair(b, c.a, dx, uint16(7301+4*i), depth)

		// Three rounds, the modes interleaved, and the medians: this
		// machine is shared, and one stream's rate moves with what else
		// runs.
		const msgs, trips, rounds = 30000, 2000, 3
		var rins, rds []float64
		var pins, pds []time.Duration
		for range rounds {
			rins = append(rins, sendRate(b, inx, iny, msgs, 64))
			rds = append(rds, sendRate(b, dx, dy, msgs, 64))
			pins = append(pins, pingPong(b, inx, iny, trips))
			pds = append(pds, pingPong(b, dx, dy, trips))
		}
		slices.Sort(rins)
		slices.Sort(rds)
		slices.Sort(pins)
		slices.Sort(pds)
		rin, rd, pin, pd := rins[rounds/2], rds[rounds/2], pins[rounds/2], pds[rounds/2]
		b.ReportMetric(rin, "inproc-msg/s")
		b.ReportMetric(rd, "daemon-msg/s")
		b.ReportMetric(rd/rin, "rate-ratio")
		b.ReportMetric(float64(pin.Nanoseconds())/1e3, "inproc-p50-µs")
		b.ReportMetric(float64(pd.Nanoseconds())/1e3, "daemon-p50-µs")
		b.ReportMetric(float64(pd)/float64(pin), "rtt-ratio")
	}
}
