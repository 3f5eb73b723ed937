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
	if err := qx.ConnectOOB(qy.LocalEndpoint(), ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := qy.ConnectOOB(qx.LocalEndpoint(), ConnectOptions{}); err != nil {
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
