package daemon_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestManyQPsThroughDaemon is issue 13's 10,000 QPs through the daemon:
// one client creates NDKXDP_DAEMON_SCALE_QPS QPs (default 1,000 in CI;
// 10,000 for the full run) on the daemon's adapter, each connected out of
// band to its own QP on the in-process host across the veth pair and used
// for one 64-byte SEND whose bytes are checked, then closes them. It
// reports time per QP and the test process's heap per QP (client and
// daemon both live in it).
func TestManyQPsThroughDaemon(t *testing.T) {
	n := 1000
	if s := os.Getenv("NDKXDP_DAEMON_SCALE_QPS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("NDKXDP_DAEMON_SCALE_QPS=%q", s)
		}
	}
	bd := newBed(t)
	c := dial(t, bd.sock)
	b := bd.b
	bmem := make([]byte, 64*n)
	bmr, err := b.PD.RegisterMR(bmem, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	csge, err := c.mr.SGE(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(r, i *ndk.CQ) ndk.QPConfig {
		return ndk.QPConfig{ReceiveCQ: r, InitiatorCQ: i, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4,
			MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	h0 := heap()
	start := time.Now()
	cqs, bqs := make([]*ndk.QP, n), make([]*ndk.QP, n)
	for i := range n {
		if cqs[i], err = c.pd.CreateQP(cfg(c.rcq, c.icq)); err != nil {
			t.Fatalf("QP %d through the daemon: %v", i, err)
		}
		if bqs[i], err = b.PD.CreateQP(cfg(b.RCQ, b.ICQ)); err != nil {
			t.Fatal(err)
		}
		var ce, be ndk.Endpoint
		ce = cqs[i].LocalEndpoint()
		if err := bd.pair.B.Do(func() error { be = bqs[i].LocalEndpoint(); return bqs[i].ConnectOOB(ce, ndk.ConnectOptions{}) }); err != nil {
			t.Fatalf("QP %d: B connect: %v", i, err)
		}
		if err := cqs[i].ConnectOOB(be, ndk.ConnectOptions{}); err != nil {
			t.Fatalf("QP %d: connect through the daemon: %v", i, err)
		}
	}
	connected := time.Since(start)
	h1 := heap()
	use := time.Now()
	for i := range n {
		copy(c.mem[:64], fmt.Sprintf("daemon qp %8d", i))
		rs, _ := bmr.SGE(64*i, 64)
		if err := bqs[i].Receive(i, []ndk.SGE{rs}); err != nil {
			t.Fatal(err)
		}
		if err := cqs[i].Send(i, []ndk.SGE{csge}, 0); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c.icq, "SEND"); r.Status != ndk.StatusSuccess {
			t.Fatalf("QP %d: SEND %v", i, r.Status)
		}
		if r := wait(t, b.RCQ, "receive"); r.Status != ndk.StatusSuccess || r.RequestContext != i {
			t.Fatalf("QP %d: receive %+v", i, r)
		}
		if string(bmem[64*i:64*i+64]) != string(c.mem[:64]) {
			t.Fatalf("QP %d: received %q", i, bmem[64*i:64*i+16])
		}
	}
	used := time.Since(use)
	closing := time.Now()
	for i := range n {
		if err := cqs[i].Close(); err != nil {
			t.Fatal(err)
		}
		_ = bqs[i].Close()
	}
	closed := time.Since(closing)
	t.Logf("%d QPs through the daemon: create both + connect both %v per pair; one checked 64 B SEND %v per QP; close %v per pair; heap %d B per QP pair (client, daemon and in-process peer)",
		n, connected/time.Duration(n), used/time.Duration(n), closed/time.Duration(n), (int64(h1)-int64(h0))/int64(n))
}
