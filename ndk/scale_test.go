package ndk

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// envCount reads a count from the environment: the scale tests run a
// reduced but real version in CI and the full one when asked.
func envCount(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive count", name, s)
	}
	return n
}

// scaleSide is one adapter of a scale test: its QPs share one PD and one
// pair of CQs, as consumers with many connections do.
type scaleSide struct {
	a        *Adapter
	pd       *PD
	rcq, icq *CQ
	qps      []*QP
	buf      []byte
	mr       *MR
}

func newScaleSide(t testing.TB, a *Adapter, bufSize int) *scaleSide {
	t.Helper()
	s := &scaleSide{a: a, buf: make([]byte, bufSize)}
	var err error
	if s.pd, err = a.CreatePD(); err != nil {
		t.Fatal(err)
	}
	if s.rcq, err = a.CreateCQ(1<<16, nil); err != nil {
		t.Fatal(err)
	}
	if s.icq, err = a.CreateCQ(1<<16, nil); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegisterMR(s.buf, MRFlagAllowLocalWrite); err != nil {
		t.Fatal(err)
	}
	return s
}

// createQP makes a small QP (depth 4, 1 SGE, no inline): what a consumer
// with thousands of mostly idle connections asks for.
func (s *scaleSide) createQP(t testing.TB) *QP {
	t.Helper()
	q, err := s.pd.CreateQP(QPConfig{ReceiveCQ: s.rcq, InitiatorCQ: s.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.qps = append(s.qps, q)
	return q
}

// scalePipe joins two CM-capable adapters by an in-memory pipe.
func scalePipe(t testing.TB) (x, y *Adapter) {
	t.Helper()
	p, err := porttest.NewPipe(porttest.PipeConfig{Depth: 4096})
	if err != nil {
		t.Fatal(err)
	}
	peers := map[netip.Addr]rocev2.MAC{pipeIPA: {2, 0, 0, 0, 0, 1}, pipeIPB: {2, 0, 0, 0, 0, 2}}
	return cmPipeAdapter(t, p.A(), pipeIPA.String(), 1, peers, cm.Params{}),
		cmPipeAdapter(t, p.B(), pipeIPB.String(), 2, peers, cm.Params{})
}

func connectOOB(t testing.TB, qx, qy *QP) {
	t.Helper()
	// The scale tests post on thousands of QPs at once; under the race
	// detector on a loaded machine an engine can fall behind longer than
	// the default ACK timeout's eight rounds (about 0.5 s), which would
	// end a SEND with STATUS_IO_TIMEOUT, a verdict on the machine, not on
	// scale.
	o := ConnectOptions{AckTimeout: time.Second}
	if err := qx.ConnectOOB(qy.LocalEndpoint(), o); err != nil {
		t.Fatal(err)
	}
	if err := qy.ConnectOOB(qx.LocalEndpoint(), o); err != nil {
		t.Fatal(err)
	}
}

// heapInUse is the live heap after two collections.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// waitN polls c until n completions arrived, failing on any that did not
// succeed; it returns them in arrival order.
func waitN(t testing.TB, c *CQ, n int, d time.Duration) []Result {
	t.Helper()
	out := make([]Result, 0, n)
	var r [256]Result
	deadline := time.Now().Add(d)
	for len(out) < n {
		k := c.GetResults(r[:min(len(r), n-len(out))])
		for _, x := range r[:k] {
			if x.Status != StatusSuccess {
				t.Fatalf("completion %d of %d: %+v", len(out)+1, n, x)
			}
		}
		out = append(out, r[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions within %v", len(out), n, d)
			}
			runtime.Gosched()
		}
	}
	return out
}

// TestTenThousandQPs puts 10,000 connected QPs on one adapter (each with
// its peer on a second adapter, over the in-memory link), the first
// cmShare of them connected through the IB CM and the rest out of band
// (the CM's rate, not the engine, limits how fast connections open),
// sends one 64-byte message on every one with every byte checked, and
// closes them. It reports time and heap per QP. The default engine would
// have refused the 4,097th QP (MaxQPs was 4,096). NDKXDP_SCALE_QPS
// changes the count.
func TestTenThousandQPs(t *testing.T) {
	n := envCount(t, "NDKXDP_SCALE_QPS", 10000)
	cmShare := min(100, n)
	ax, ay := scalePipe(t)
	x, y := newScaleSide(t, ax, 64*n), newScaleSide(t, ay, 64*n)

	h0 := heapInUse()
	start := time.Now()
	dst := netip.AddrPortFrom(pipeIPB, 7600)
	accepted := make(chan error, cmShare)
	passive := make(chan *QP, cmShare)
	l, err := ay.CreateListener(func(c *Connector) {
		accepted <- c.Accept(context.Background(), <-passive, 4, 4, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Listen(dst); err != nil {
		t.Fatal(err)
	}
	var connectors []*Connector
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range cmShare {
		qx := x.createQP(t)
		passive <- y.createQP(t)
		c, err := ax.CreateConnector()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Connect(ctx, qx, netip.AddrPort{}, dst, 4, 4, nil); err != nil {
			t.Fatalf("CM connection %d: %v", i, err)
		}
		if err := c.CompleteConnect(nil); err != nil {
			t.Fatal(err)
		}
		if err := <-accepted; err != nil {
			t.Fatalf("CM connection %d: accept: %v", i, err)
		}
		connectors = append(connectors, c)
	}
	cmTime := time.Since(start)
	oob := time.Now()
	for range n - cmShare {
		connectOOB(t, x.createQP(t), y.createQP(t))
	}
	oobTime := time.Since(oob)
	h1 := heapInUse()

	// Use every connection: a receive on y, a 64-byte SEND from x whose
	// bytes name its QP.
	use := time.Now()
	for i := range n {
		payload := x.buf[64*i : 64*i+64]
		copy(payload, fmt.Sprintf("qp %6d %#06x", i, x.qps[i].QPN()))
		rs, _ := y.mr.SGE(64*i, 64)
		if err := y.qps[i].Receive(i, []SGE{rs}); err != nil {
			t.Fatal(err)
		}
		ss, _ := x.mr.SGE(64*i, 64)
		if err := x.qps[i].Send(i, []SGE{ss}, 0); err != nil {
			t.Fatal(err)
		}
		if i%1024 == 1023 {
			// Keep the CQs (64 Ki deep) and the link from overflowing.
			waitN(t, y.rcq, 1024, 30*time.Second)
			waitN(t, x.icq, 1024, 30*time.Second)
		}
	}
	waitN(t, y.rcq, n%1024, 30*time.Second)
	waitN(t, x.icq, n%1024, 30*time.Second)
	useTime := time.Since(use)
	for i := range n {
		if got, want := y.buf[64*i:64*i+64], x.buf[64*i:64*i+64]; string(got) != string(want) {
			t.Fatalf("QP %d received %q, want %q", i, got[:16], want[:16])
		}
	}
	for _, c := range connectors {
		c.Close()
	}
	closing := time.Now()
	for _, s := range []*scaleSide{x, y} {
		for _, q := range s.qps {
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	closeTime := time.Since(closing)
	perQP := func(d time.Duration, k int) time.Duration {
		return (d / time.Duration(max(k, 1))).Round(100 * time.Nanosecond)
	}
	t.Logf("%d QPs per adapter (%d through the CM, %d out of band)", n, cmShare, n-cmShare)
	t.Logf("connect per QP pair: CM %v, out of band (create both + connect both) %v", perQP(cmTime, cmShare), perQP(oobTime, n-cmShare))
	t.Logf("one 64 B SEND per QP, all checked: %v per QP; close %v per QP", perQP(useTime, n), perQP(closeTime, 2*n))
	t.Logf("heap per QP (both adapters' QPs, connected, with their CM state where any): %d bytes (%d KiB for %d QPs)",
		(h1-min(h0, h1))/uint64(2*n), (h1-min(h0, h1))>>10, 2*n)
}

// sendStream is one QP pair streaming 64-byte SENDs, with idle connected
// QP pairs beside it on the same two adapters.
type sendStream struct {
	x, y     *scaleSide
	qx, qy   *QP
	ssgl     []SGE
	rsgl     []SGE
	results  [64]Result
	inFlight int
}

const streamWindow = 16

func newSendStream(b *testing.B, idle int) *sendStream {
	b.Helper()
	p, err := porttest.NewPipe(porttest.PipeConfig{Depth: 4096})
	if err != nil {
		b.Fatal(err)
	}
	x := newScaleSide(b, pipeAdapter(b, p.A(), "198.18.0.1", 1), 64)
	y := newScaleSide(b, pipeAdapter(b, p.B(), "198.18.0.2", 2), 64)
	for range idle {
		connectOOB(b, x.createQP(b), y.createQP(b))
	}
	return streamBetween(b, x, y)
}

// streamBetween makes a streaming QP pair from x to y with CQs of its own,
// so only its completions are polled.
func streamBetween(b testing.TB, x, y *scaleSide) *sendStream {
	b.Helper()
	var err error
	s := &sendStream{x: &scaleSide{a: x.a, pd: x.pd, mr: x.mr}, y: &scaleSide{a: y.a, pd: y.pd, mr: y.mr}}
	x, y = s.x, s.y
	for _, side := range []*scaleSide{x, y} {
		if side.rcq, err = side.a.CreateCQ(1024, nil); err != nil {
			b.Fatal(err)
		}
		if side.icq, err = side.a.CreateCQ(1024, nil); err != nil {
			b.Fatal(err)
		}
	}
	s.qx, s.qy = x.createQP(b), y.createQP(b)
	connectOOB(b, s.qx, s.qy)
	ss, _ := x.mr.SGE(0, 64)
	rs, _ := y.mr.SGE(0, 64)
	s.ssgl, s.rsgl = []SGE{ss}, []SGE{rs}
	return s
}

// run sends n messages, at most streamWindow outstanding (the QPs are 4
// deep: each receive is posted just before its SEND and the receive queue
// is refilled as receives complete), and returns the time taken. A
// completion that did not succeed, or a minute without one, fails b: a
// stream whose QP failed under a flood would otherwise wait forever.
func (s *sendStream) run(b testing.TB, n int) time.Duration {
	start := time.Now()
	posted, recvd := 0, 0
	recvOut := 0
	progress := start
	for recvd < n {
		for posted < n && s.inFlight < 4 && recvOut < 4 {
			if err := s.qy.Receive(nil, s.rsgl); err != nil {
				b.Fatal(err)
			}
			if err := s.qx.Send(nil, s.ssgl, 0); err != nil {
				b.Fatal(err)
			}
			posted++
			s.inFlight++
			recvOut++
		}
		k := s.check(b, s.y.rcq)
		recvd += k
		recvOut -= k
		s.inFlight -= s.check(b, s.x.icq)
		if k == 0 {
			if time.Since(progress) > time.Minute {
				b.Fatalf("stream: %d of %d messages received, none for a minute; sender %+v, receiver %+v",
					recvd, n, s.x.a.Stats(), s.y.a.Stats())
			}
			runtime.Gosched()
		} else {
			progress = time.Now()
		}
	}
	for s.inFlight > 0 {
		s.inFlight -= s.check(b, s.x.icq)
		if time.Since(progress) > time.Minute {
			b.Fatalf("stream: %d SENDs not completed for a minute", s.inFlight)
		}
		runtime.Gosched()
	}
	return time.Since(start)
}

// check takes c's completions and fails b on one that did not succeed.
func (s *sendStream) check(b testing.TB, c *CQ) int {
	k := c.GetResults(s.results[:])
	for _, r := range s.results[:k] {
		if r.Status != StatusSuccess {
			b.Fatalf("stream completion %+v; sender %+v, receiver %+v", r, s.x.a.Stats(), s.y.a.Stats())
		}
	}
	return k
}

// BenchmarkSend64BesideIdleQPs measures the per-message cost of a stream
// of 64-byte SENDs on one QP pair with no other QP on its adapters, and
// with 10,000 idle connected QP pairs beside it (NDKXDP_SCALE_QPS), in
// alternating chunks of one run, so the machine's noise falls on both.
// ratio is the lone cost over the crowded one: the goal is >= 0.9 (the
// idle QPs cost the busy one at most about 10%).
func BenchmarkSend64BesideIdleQPs(b *testing.B) {
	idle := envCount(b, "NDKXDP_SCALE_QPS", 10000)
	lone, crowd := newSendStream(b, 0), newSendStream(b, idle)
	lone.run(b, 1000) // warm both up
	crowd.run(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	var tLone, tCrowd time.Duration
	for done := 0; done < b.N; {
		k := min(500, b.N-done)
		if done%1000 == 0 {
			tLone += lone.run(b, k)
			tCrowd += crowd.run(b, k)
		} else {
			tCrowd += crowd.run(b, k)
			tLone += lone.run(b, k)
		}
		done += k
	}
	b.ReportMetric(float64(tLone.Nanoseconds())/float64(b.N), "ns/msg-1qp")
	b.ReportMetric(float64(tCrowd.Nanoseconds())/float64(b.N), "ns/msg-beside-idle")
	b.ReportMetric(float64(tLone)/float64(tCrowd), "ratio")
}

// TestConnectUseDisconnectCycles runs connect/use/disconnect cycles
// through the IB CM between two adapters over the in-memory link: each
// cycle creates a QP on both sides, connects them (REQ/REP/RTU), sends one
// 64-byte SEND whose bytes are checked, disconnects (the active side on
// even cycles, the passive on odd), and closes the connectors and QPs.
// After a first round that sets the high-water marks of the CM's maps
// (finished connections wait in time-wait, and Go maps keep their
// buckets), a second round of as many cycles must leave goroutines where
// they were and the heap within 1 MiB. NDKXDP_CHURN_CYCLES sets the cycles
// per round (default 2,000 in CI; 10,000 for the full run).
func TestConnectUseDisconnectCycles(t *testing.T) {
	n := envCount(t, "NDKXDP_CHURN_CYCLES", 2000)
	ax, ay := scalePipe(t)
	x, y := newScaleSide(t, ax, 64), newScaleSide(t, ay, 64)
	dst := netip.AddrPortFrom(pipeIPB, 7601)
	type passiveEnd struct {
		c    *Connector
		err  error
		disc chan struct{}
	}
	accepted := make(chan passiveEnd, 1)
	passive := make(chan *QP, 1)
	l, err := ay.CreateListener(func(c *Connector) {
		p := passiveEnd{c: c, disc: make(chan struct{}, 1)}
		p.err = c.Accept(context.Background(), <-passive, 4, 4, nil, func() { p.disc <- struct{}{} })
		accepted <- p
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Listen(dst); err != nil {
		t.Fatal(err)
	}
	ss, _ := x.mr.SGE(0, 64)
	rs, _ := y.mr.SGE(0, 64)
	cycle := func(i int) {
		qx, qy := x.createQP(t), y.createQP(t)
		x.qps, y.qps = x.qps[:0], y.qps[:0]
		passive <- qy
		c, err := ax.CreateConnector()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := c.Connect(ctx, qx, netip.AddrPort{}, dst, 4, 4, nil); err != nil {
			t.Fatalf("cycle %d: connect: %v", i, err)
		}
		if err := c.CompleteConnect(nil); err != nil {
			t.Fatal(err)
		}
		p := <-accepted
		if p.err != nil {
			t.Fatalf("cycle %d: accept: %v", i, p.err)
		}
		copy(x.buf, fmt.Sprintf("cycle %8d", i))
		if err := qy.Receive(nil, []SGE{rs}); err != nil {
			t.Fatal(err)
		}
		if err := qx.Send(nil, []SGE{ss}, 0); err != nil {
			t.Fatal(err)
		}
		waitN(t, y.rcq, 1, 10*time.Second)
		waitN(t, x.icq, 1, 10*time.Second)
		if string(y.buf) != string(x.buf) {
			t.Fatalf("cycle %d: received %q, want %q", i, y.buf[:16], x.buf[:16])
		}
		quitter := c
		if i%2 == 1 {
			quitter = p.c
		}
		if err := quitter.Disconnect(ctx); err != nil {
			t.Fatalf("cycle %d: disconnect: %v", i, err)
		}
		c.Close()
		p.c.Close()
		<-c.Closed()
		<-p.c.Closed()
		for _, q := range []*QP{qx, qy} {
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle := func() (int, uint64) {
		// Time-wait (the path's ACK timeout, about 0.5 s) and the
		// disconnect events end within this.
		time.Sleep(1500 * time.Millisecond)
		return runtime.NumGoroutine(), heapInUse()
	}
	gStart := runtime.NumGoroutine()
	for i := range n {
		cycle(i)
	}
	g0, h0 := settle()
	start := time.Now()
	for i := range n {
		cycle(i)
	}
	elapsed := time.Since(start)
	g1, h1 := settle()
	t.Logf("%d cycles in %v (%v each); goroutines %d at the start, %d -> %d; heap in use %d KiB -> %d KiB",
		n, elapsed.Round(time.Millisecond), (elapsed / time.Duration(n)).Round(time.Microsecond), gStart, g0, g1, h0>>10, h1>>10)
	if g1 > gStart || g0 > gStart {
		t.Errorf("goroutines: %d at the start, %d after the first round, %d after the second", gStart, g0, g1)
	}
	if h1 > h0+1<<20 {
		t.Errorf("heap in use grew from %d to %d bytes over %d cycles", h0, h1, n)
	}
}
