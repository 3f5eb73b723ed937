package ops_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

// scrape fetches the daemon's /metrics from inside A's namespace (where
// the daemon listens on loopback) and parses it with Prometheus' own
// parser.
func (bd *bed) scrape(t testing.TB, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	err := bd.pair.A.Do(func() error {
		// Dial on this goroutine, whose thread is in A's namespace.
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: %s\r\nAccept: text/plain\r\nConnection: close\r\n\r\n", addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = p.TextToMetricFamilies(resp.Body)
		return err
	})
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	return fams
}

// sum adds the values of name's series whose labels include want.
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, int) {
	f := fams[name]
	if f == nil {
		return 0, 0
	}
	var v float64
	n := 0
metrics:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, x := range want {
			if labels[k] != x {
				continue metrics
			}
		}
		n++
		if m.Counter != nil {
			v += m.Counter.GetValue()
		} else if m.Gauge != nil {
			v += m.Gauge.GetValue()
		}
	}
	return v, n
}

// TestMetrics scrapes the daemon's /metrics while WRITEs run and after:
// the counters never go back, and once the traffic settles the engines'
// frames out and in equal the frames B's adapter captured from A and
// from B. With -metrics-qps 1 a second QP is summed under qpn="other".
func TestMetrics(t *testing.T) {
	bd := newBed(t, "-metrics", ":0", "-metrics-qps", "1")
	var s daemon.Status
	runJSON(t, &s, "status", "-daemon", bd.sock)
	host, _, err := net.SplitHostPort(s.Metrics)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("metrics served at %q; a port alone must mean loopback", s.Metrics)
	}
	// A second QP, never connected, beyond the series limit.
	qp2, err := bd.pd.CreateQP(ndk.QPConfig{ReceiveCQ: bd.icq, InitiatorCQ: bd.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		bd.writes(t, 200)
	}()
	var last float64
	scrapes := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(20 * time.Millisecond):
		}
		f := bd.scrape(t, s.Metrics)
		out, n := sum(f, "ndkxdp_engine_frames_out_total", map[string]string{"interface": bd.pair.A.Link})
		if n == 0 {
			t.Fatal("no ndkxdp_engine_frames_out_total series")
		}
		if out < last {
			t.Fatalf("frames_out went back from %v to %v", last, out)
		}
		last = out
		scrapes++
	}
	if t.Failed() {
		return
	}
	bd.quiet(t)
	f := bd.scrape(t, s.Metrics)
	fromA, fromB := bd.captured(t)
	out, _ := sum(f, "ndkxdp_engine_frames_out_total", nil)
	in, _ := sum(f, "ndkxdp_engine_frames_in_total", nil)
	if uint64(out) != fromA || uint64(in) != fromB {
		t.Errorf("metrics: %v frames out, %v in; B captured %d from A, %d from B", out, in, fromA, fromB)
	}
	if redirect, _ := sum(f, "ndkxdp_xdp_frames_total", map[string]string{"verdict": "redirect"}); redirect != in {
		t.Errorf("metrics: XDP redirected %v frames, engines received %v", redirect, in)
	}
	for _, name := range []string{"ndkxdp_xsk_rx_dropped_total", "ndkxdp_xsk_rx_ring_full_total", "ndkxdp_xsk_fill_ring_empty_total", "ndkxdp_xsk_tx_invalid_descs_total", "ndkxdp_xsk_tx_frames_total", "ndkxdp_xsk_tx_in_place_bytes_total"} {
		if _, n := sum(f, name, map[string]string{"queue": "0"}); n != 1 {
			t.Errorf("%s: %d series for queue 0", name, n)
		}
	}
	// Every frame an engine sent went through its socket's TX ring.
	if tx, _ := sum(f, "ndkxdp_xsk_tx_frames_total", nil); tx != out {
		t.Errorf("metrics: sockets queued %v frames, engines sent %v", tx, out)
	}
	// Per-QP series: the connected QP by number, the other summed.
	qpOut, n := sum(f, "ndkxdp_qp_frames_out_total", nil)
	if n != 2 {
		t.Errorf("%d ndkxdp_qp_frames_out_total series for 2 QPs and a limit of 1; want the first and other", n)
	}
	// The limit keeps the lower QPN's series; the QPNs are consecutive
	// unless they wrapped at 2^24.
	kept := min(bd.qp.QPN(), qp2.QPN())
	if _, n := sum(f, "ndkxdp_qp_frames_out_total", map[string]string{"qpn": fmt.Sprint(kept)}); n != 1 {
		t.Errorf("no series of its own for QP %d, the first under the limit", kept)
	}
	if _, n := sum(f, "ndkxdp_qp_frames_out_total", map[string]string{"qpn": "other"}); n != 1 {
		t.Errorf("no qpn=\"other\" series beyond the limit")
	}
	if want := float64(200 * bd.packetsPerWrite()); qpOut != want {
		t.Errorf("QP series sum to %v frames out; 200 WRITEs are %v packets", qpOut, want)
	}
	if c, _ := sum(f, "ndkxdp_clients", nil); c != 1 {
		t.Errorf("ndkxdp_clients %v, want 1", c)
	}
	if c, _ := sum(f, "ndkxdp_connections", nil); c != 1 {
		t.Errorf("ndkxdp_connections %v, want 1", c)
	}
	for name := range f {
		if !strings.HasPrefix(name, "ndkxdp_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") && !strings.HasPrefix(name, "promhttp_") {
			t.Errorf("metric %s outside the ndkxdp_ namespace", name)
		}
	}
	t.Logf("%d scrapes during 200 WRITEs; %v frames out, %v in", scrapes, out, in)
}
