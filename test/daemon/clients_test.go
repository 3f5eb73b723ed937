package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/spin"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestHundredClientsInTurn: 100 clients one after another, each opening its
// objects, connecting (out of band), moving a verified SEND and leaving;
// afterwards the daemon holds no session and its goroutines and heap are
// back to where they were.
func TestHundredClientsInTurn(t *testing.T) {
	bd := newBed(t)
	b := bd.b
	round := func(i int) {
		c := dialOpen(t, bd.sock)
		bq, err := b.PD.CreateQP(ndk.QPConfig{ReceiveCQ: b.RCQ, InitiatorCQ: b.ICQ, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4, MaxReceiveRequestSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		mem := make([]byte, 64)
		mr, err := b.PD.RegisterMR(mem, ndk.MRFlagAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := bq.ConnectOOB(c.qp.LocalEndpoint(), ndk.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.qp.ConnectOOB(bq.LocalEndpoint(), ndk.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		rs, _ := mr.SGE(0, 64)
		if err := bq.Receive(nil, []ndk.SGE{rs}); err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("client %d", i)
		copy(c.mem, msg)
		ss, _ := c.mr.SGE(0, len(msg))
		if err := c.qp.Send(nil, []ndk.SGE{ss}, 0); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c.icq, "send"); r.Status != ndk.StatusSuccess {
			t.Fatalf("round %d: send %v", i, r.Status)
		}
		if r := wait(t, b.RCQ, "receive"); string(mem[:r.BytesTransferred]) != msg {
			t.Fatalf("round %d: peer got %q", i, mem[:r.BytesTransferred])
		}
		c.a.Close()
		bq.Close()
		_ = mr.Deregister()
		for b.ICQ.GetResults(make([]ndk.Result, 8)) > 0 {
		}
		for b.RCQ.GetResults(make([]ndk.Result, 8)) > 0 {
		}
	}
	round(-1) // warm: first-use allocations are not growth
	waitSessions(t, bd, 0)
	g0, h0 := settle()
	for i := range 100 {
		round(i)
	}
	waitSessions(t, bd, 0)
	g1, h1 := settle()
	t.Logf("goroutines %d -> %d, heap %d -> %d bytes", g0, g1, h0, h1)
	if g1 > g0+2 {
		t.Errorf("goroutines grew from %d to %d over 100 clients", g0, g1)
	}
	if h1 > h0+1<<20 {
		t.Errorf("heap grew by %d bytes over 100 clients (bound 1 MiB)", h1-h0)
	}
}

func waitSessions(t *testing.T, bd *bed, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for bd.srv.Clients() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions, want %d", bd.srv.Clients(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settle lets exiting goroutines finish and returns the goroutine count
// and the live heap.
func settle() (int, uint64) {
	var ms runtime.MemStats
	for range 5 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc
}

// senderChild is one client process of BenchmarkClientProcesses: it
// connects through the daemon to dst and streams n 64-byte SENDs, then
// prints its rate.
func senderChild(env string) {
	f := strings.Split(env, ",")
	var n int
	fmt.Sscan(f[2], &n)
	busy := f[3] == "busy"
	t := &childT{}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	a, err := ndk.Dial(ctx, f[0])
	if err != nil {
		t.Fatal(err)
	}
	// The sender waits as the tools do (verbs.Backoff): when its window
	// is full it spins for completions a while, then arms its CQ and
	// blocks, giving the core to the daemon's engine and the other
	// senders. A busy sender only spins.
	wake := make(chan struct{}, 1)
	c := clientNotified(t, a, func(ndk.Status) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	x := connectTo(ctx, t, c, netip.MustParseAddrPort(f[1]))
	fmt.Println("ready")
	// Start together: the parent closes stdin to start.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	s, _ := c.mr.SGE(0, 64)
	sgl := []ndk.SGE{s}
	var res [32]ndk.Result
	var y spin.Yielder
	var idleSince time.Time
	sent, done := 0, 0
	start := time.Now()
	for done < n && ctx.Err() == nil {
		for sent < n && sent-done < 32 {
			if c.qp.Send(nil, sgl, 0) != nil {
				break
			}
			sent++
		}
		k := c.icq.GetResults(res[:])
		for i := range k {
			if res[i].Status != ndk.StatusSuccess {
				t.Fatalf("send: %v", res[i].Status)
			}
		}
		done += k
		switch {
		case k > 0:
			idleSince = time.Time{}
		case busy:
			runtime.Gosched()
		case idleSince.IsZero():
			idleSince = time.Now()
		case time.Since(idleSince) < 20*time.Microsecond:
			y.Yield()
		default:
			if err := c.icq.Arm(ndk.CQNotifyAny); err != nil {
				t.Fatal(err)
			}
			select {
			case <-wake:
			case <-ctx.Done():
			}
			idleSince = time.Time{}
		}
	}
	fmt.Printf("rate %f\n", float64(n)/time.Since(start).Seconds())
	_ = x.Disconnect(ctx)
	a.Close()
}

// BenchmarkClientProcesses measures the aggregate 64-byte SEND rate of
// client processes on one daemon: one process, then eight at once, each
// streaming to its own QP on the peer, and reports the ratio. The senders
// wait for completions as the tools do ("adaptive": spin 20µs, then block
// on the CQ's notification), or only spin ("busy"): nine busy processes on
// fewer cores take the daemon's engine's time, which the busy ratio shows.
//
//	go test -run '^$' -bench ClientProcesses -benchtime 1x ./test/daemon
func BenchmarkClientProcesses(b *testing.B) {
	bd := newBenchBed(b)
	const perClient = 40000
	port := uint16(7500)
	for _, mode := range []string{"adaptive", "busy"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				one := bd.processes(b, 1, perClient, port, mode)
				eight := bd.processes(b, 8, perClient/4, port+1, mode)
				port += 2
				b.ReportMetric(one, "1proc-msg/s")
				b.ReportMetric(eight, "8proc-msg/s")
				b.ReportMetric(eight/one, "ratio")
			}
		})
	}
}

// processes runs n sender processes (mode: adaptive or busy) against QPs
// on B listening at port and returns their aggregate rate (total messages over the longest run).
func (bd *bed) processes(tb testing.TB, n, msgs int, port uint16, mode string) float64 {
	tb.Helper()
	hb := bd.b
	var mu sync.Mutex
	var qps []*ndk.QP
	rmem, err := hb.Adapter.Memory(64 * 1024)
	if err != nil {
		tb.Fatal(err)
	}
	rmr, err := hb.PD.RegisterMR(rmem, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		tb.Fatal(err)
	}
	rs, _ := rmr.SGE(0, 64)
	l, err := hb.Adapter.CreateListener(func(x *ndk.Connector) {
		q, err := hb.PD.CreateQP(ndk.QPConfig{ReceiveCQ: hb.RCQ, InitiatorCQ: hb.ICQ, ReceiveQueueDepth: 512, InitiatorQueueDepth: 4, MaxReceiveRequestSGE: 1})
		if err != nil {
			return
		}
		q2 := q
		for range 512 {
			_ = q.Receive(q2, []ndk.SGE{rs})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if x.Accept(ctx, q, 4, 4, nil, nil) == nil {
			mu.Lock()
			qps = append(qps, q)
			mu.Unlock()
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	dst := netip.AddrPortFrom(bd.pair.B.IPv4, port)
	if err := l.Listen(dst); err != nil {
		tb.Fatal(err)
	}
	// The peer reposts each receive on the QP it completed on.
	stop := make(chan struct{})
	repost := make(chan struct{})
	go func() {
		defer close(repost)
		var res [64]ndk.Result
		for {
			select {
			case <-stop:
				return
			default:
			}
			k := hb.RCQ.GetResults(res[:])
			for i := range k {
				if q, ok := res[i].RequestContext.(*ndk.QP); ok && res[i].Status == ndk.StatusSuccess {
					_ = q.Receive(q, []ndk.SGE{rs})
				}
			}
			if k == 0 {
				runtime.Gosched()
			}
		}
	}()
	type child struct {
		cmd   *exec.Cmd
		out   *bufio.Scanner
		stdin interface{ Close() error }
	}
	kids := make([]child, n)
	for i := range kids {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), fmt.Sprintf("NDKXDP_SENDER_CHILD=%s,%s,%d,%s", bd.sock, dst, msgs, mode))
		stdout, _ := cmd.StdoutPipe()
		stdin, _ := cmd.StdinPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		kids[i] = child{cmd, bufio.NewScanner(stdout), stdin}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	}
	for _, k := range kids {
		if !k.out.Scan() || k.out.Text() != "ready" {
			tb.Fatalf("sender not ready: %q", k.out.Text())
		}
	}
	for _, k := range kids {
		k.stdin.Close()
	}
	total := 0.0
	var slowest float64
	for _, k := range kids {
		var r float64
		if !k.out.Scan() {
			tb.Fatal(errors.New("sender ended without its rate"))
		}
		fmt.Sscanf(k.out.Text(), "rate %f", &r)
		if slowest == 0 || r < slowest {
			slowest = r
		}
		total += r
	}
	close(stop)
	<-repost
	mu.Lock()
	for _, q := range qps {
		q.Close()
	}
	mu.Unlock()
	_ = rmr.Deregister()
	// Every process sent msgs; the aggregate is bounded by the slowest.
	return slowest * float64(n)
}
