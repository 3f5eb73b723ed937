package daemon_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// TestOperatorRequestsDuringTraffic asks every operator request, scrapes
// /metrics and runs a capture while a client WRITEs (under -race in CI:
// the snapshots are taken beside the engines and the relay). Operator
// sessions are not counted as clients, and the counts they see only grow.
func TestOperatorRequestsDuringTraffic(t *testing.T) {
	bd := newBed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := ndk.Dial(ctx, bd.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	pd, _ := a.CreatePD()
	cq, _ := a.CreateCQ(64, nil)
	qp, err := pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := a.Memory(1 << 14)
	mr, err := pd.RegisterMR(mem, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	bpd, _ := bd.b.CreatePD()
	bcq, _ := bd.b.CreateCQ(64, nil)
	bq, err := bpd.CreateQP(ndk.QPConfig{ReceiveCQ: bcq, InitiatorCQ: bcq, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer bq.Close()
	bmem := make([]byte, 1<<14)
	bmr, err := bpd.RegisterMR(bmem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := bq.ConnectOOB(qp.LocalEndpoint(), ndk.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := qp.ConnectOOB(bq.LocalEndpoint(), ndk.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}

	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mctx, stopMetrics := context.WithCancel(context.Background())
	metricsDone := make(chan error, 1)
	go func() { metricsDone <- bd.srv.ServeMetrics(mctx, mln, 0) }()
	defer func() {
		stopMetrics()
		if err := <-metricsDone; err != nil {
			t.Error(err)
		}
	}()

	var wg sync.WaitGroup
	dctx, stopDump := context.WithCancel(ctx)
	var captured atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := daemon.Dump(dctx, bd.sock, 0, func(daemon.DumpFrame, daemon.DumpCounts) error { captured.Add(1); return nil })
		if err != nil {
			t.Errorf("dump: %v", err)
		}
	}()

	const n = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, _ := mr.SGE(0, 4096)
		var r [1]ndk.ResultEx
		// The capture starts when the dump's request reaches the
		// daemon, which may be after the first WRITEs: write on (at most
		// 10 s) until it has seen as many frames as WRITEs were asked.
		until := time.Now().Add(10 * time.Second)
		for i := 0; i < n || (captured.Load() < n && time.Now().Before(until)); i++ {
			if err := qp.Write(nil, []ndk.SGE{s}, bmr.Addr(), bmr.RemoteToken(), 0); err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			deadline := time.Now().Add(5 * time.Second)
			for cq.GetResultsEx(r[:]) == 0 {
				if time.Now().After(deadline) {
					t.Errorf("write %d: no completion", i)
					return
				}
				time.Sleep(10 * time.Microsecond)
			}
		}
	}()
	var lastOut uint64
	rounds := 0
	for running := true; running; rounds++ {
		select {
		case <-done:
			running = false
		default:
		}
		var st daemon.Status
		var info daemon.Info
		var stats daemon.Stats
		var qps []daemon.QP
		for op, out := range map[string]any{daemon.OpAdminStatus: &st, daemon.OpAdminInfo: &info, daemon.OpAdminStats: &stats, daemon.OpAdminQPs: &qps} {
			if err := daemon.Query(ctx, bd.sock, op, out); err != nil {
				t.Fatalf("%s: %v", op, err)
			}
		}
		if st.Clients != 1 {
			t.Fatalf("status counts %d clients; the operator's sessions are not clients", st.Clients)
		}
		if out := stats.Adapter["frames_out"]; out < lastOut {
			t.Fatalf("frames_out went back from %d to %d", lastOut, out)
		} else {
			lastOut = out
		}
		if len(qps) != 1 || qps[0].QPN != qp.QPN() {
			t.Fatalf("qps %+v; want the client's QP %d", qps, qp.QPN())
		}
		resp, err := http.Get("http://" + mln.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "ndkxdp_engine_frames_out_total") {
			t.Fatalf("metrics lack the engine counters:\n%.500s", body)
		}
	}
	// A second client with two QPs: each session counts its own.
	a2, err := ndk.Dial(ctx, bd.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	pd2, _ := a2.CreatePD()
	cq2, _ := a2.CreateCQ(16, nil)
	for range 2 {
		if _, err := pd2.CreateQP(ndk.QPConfig{ReceiveCQ: cq2, InitiatorCQ: cq2, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4}); err != nil {
			t.Fatal(err)
		}
	}
	var st daemon.Status
	if err := daemon.Query(ctx, bd.sock, daemon.OpAdminStatus, &st); err != nil {
		t.Fatal(err)
	}
	if st.Clients != 2 || st.QPs != 3 || st.Connections != 1 || len(st.Sessions) != 2 ||
		st.Sessions[0].QPs != 1 || st.Sessions[0].Connections != 1 || st.Sessions[1].QPs != 2 || st.Sessions[1].Connections != 0 {
		t.Errorf("status %+v; want the first client with 1 QP connected, the second with 2 QPs", st)
	}
	time.Sleep(300 * time.Millisecond) // the capture streams every 250 ms
	stopDump()
	wg.Wait()
	frames := captured.Load()
	if frames < n {
		t.Errorf("the capture saw %d frames of at least %d WRITEs", frames, n)
	}
	t.Logf("%d rounds of every request during %d WRITEs; %d frames captured", rounds, n, frames)
}

// TestStatusCountsSessionsThatSaidHello: a connection the daemon accepted
// but whose first request it has not read (an operator's query on its
// way, say) is not a client, nor counted as served; one that said hello
// is both.
func TestStatusCountsSessionsThatSaidHello(t *testing.T) {
	bd := newBed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	silent, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: bd.sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	clients := func() int {
		var st daemon.Status
		if err := daemon.Query(ctx, bd.sock, daemon.OpAdminStatus, &st); err != nil {
			t.Fatal(err)
		}
		if st.Served != uint64(st.Clients) {
			t.Errorf("status: %d clients served, %d now: the operator's sessions count as served", st.Served, st.Clients)
		}
		return st.Clients
	}
	// The daemon accepts in order and lists a session before it accepts
	// the next: the silent one is listed when the query is answered.
	if n := clients(); n != 0 {
		t.Fatalf("status counts %d clients with one silent connection and no hello", n)
	}
	dialRaw(t, bd.sock)
	if n := clients(); n != 1 {
		t.Fatalf("status counts %d clients after one hello", n)
	}
}
