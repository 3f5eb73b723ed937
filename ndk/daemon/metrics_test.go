package daemon_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/counters"
)

// TestMetricsNameEveryCounter: /metrics has a family for every engine
// counter and every QP counter the table declares, under its name and
// with its help, so that a counter added to the table reaches it.
func TestMetricsNameEveryCounter(t *testing.T) {
	bd := newBed(t)
	pd, err := bd.a.CreatePD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := bd.a.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	qp, err := pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- bd.srv.ServeMetrics(ctx, ln, 0) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	text := string(body)
	for _, c := range counters.EngineCounters {
		if want := "# HELP ndkxdp_engine_" + c.Name + "_total " + c.Help + "\n"; !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, c := range counters.QPCounters {
		if want := "# HELP ndkxdp_qp_" + c.Name + "_total " + c.Help; !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
