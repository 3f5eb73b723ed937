package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk/internal/counters"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Prometheus metrics (the daemon's -metrics): every scrape reads the same
// counters as the admin requests (ndkxdp stats), so the two always agree.
// Names follow Prometheus' conventions: ndkxdp_<subsystem>_<name>_total
// for counters, labels interface, queue and qpn.

// DefaultQPSeries bounds the QPs that get series of their own; the rest
// are summed under qpn="other", so a daemon with many QPs does not make
// a scrape (and the server storing it) grow without bound.
const DefaultQPSeries = 64

// MetricsAddress completes a -metrics address: one without a host (":9464"
// or "9464") listens on loopback only, so that exposing the counters to
// the network is a decision the operator writes down.
func MetricsAddress(addr string) string {
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// ServeMetrics serves /metrics on ln until ctx ends. qpSeries bounds the
// per-QP series (0: DefaultQPSeries).
func (s *Server) ServeMetrics(ctx context.Context, ln net.Listener, qpSeries int) error {
	if qpSeries <= 0 {
		qpSeries = DefaultQPSeries
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{s: s, qpSeries: qpSeries},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

type collector struct {
	s        *Server
	qpSeries int
}

// Describe sends nothing: the collector is unchecked, since the CM's
// attributes and the engine's counters decide its series at scrape time.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

var (
	labelsQueue = []string{"interface", "queue"}
	labelsQP    = []string{"interface", "qpn"}
)

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ifn := s.cfg.Interface
	counter := func(name, help string, labels []string, v uint64, values ...string) {
		d := prometheus.NewDesc(name, help, labels, nil)
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), values...)
	}
	gauge := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, []string{"interface"}, nil), prometheus.GaugeValue, v, ifn)
	}
	st := s.status()
	gauge("ndkxdp_daemon_start_time_seconds", "When the daemon started, in seconds since the epoch.", float64(st.Started.UnixNano())/1e9)
	gauge("ndkxdp_clients", "Client processes connected.", float64(st.Clients))
	gauge("ndkxdp_qps", "QPs of the daemon.", float64(st.QPs))
	gauge("ndkxdp_connections", "Connected QPs.", float64(st.Connections))
	counter("ndkxdp_clients_served_total", "Client processes served since the start.", []string{"interface"}, st.Served, ifn)
	for _, r := range reasons {
		counter("ndkxdp_sessions_ended_total", "Client sessions the daemon ended for what the client did, by reason.",
			[]string{"interface", "reason"}, st.Ended[r], ifn, r)
	}
	for _, q := range sortedKeys(st.QuotaExceeded) {
		counter("ndkxdp_quota_exceeded_total", "Client requests and connections refused over a daemon quota, by quota.",
			[]string{"interface", "quota"}, st.QuotaExceeded[q], ifn, q)
	}
	counter("ndkxdp_clients_refused_total", "Client connections the daemon's allow list refused.", []string{"interface"}, st.Refused, ifn)
	counter("ndkxdp_client_rings_broken_total", "Client QP and SRQ rings read no more because the client wrote into them what no correct client writes.", []string{"interface"}, st.BrokenRings, ifn)

	p, err := s.provider()
	if err != nil {
		return
	}
	for i, e := range s.a.Stats() {
		q := strconv.Itoa(i)
		e := counters.Engine(e)
		for c, v := range e.All() {
			counter("ndkxdp_engine_"+c.Name+"_total", c.Help, labelsQueue, v, ifn, q)
		}
	}
	for _, x := range p.Queues() {
		if x.Bind == "" {
			continue
		}
		q := strconv.Itoa(x.Queue)
		k := x.Socket
		for _, m := range []struct {
			name string
			v    uint64
		}{
			{"rx_dropped", k.RxDropped}, {"rx_invalid_descs", k.RxInvalidDescs}, {"tx_invalid_descs", k.TxInvalidDescs},
			{"rx_ring_full", k.RxRingFull}, {"fill_ring_empty", k.RxFillRingEmptyDescs}, {"tx_ring_empty", k.TxRingEmptyDescs},
		} {
			counter("ndkxdp_xsk_"+m.name+"_total", "AF_XDP socket statistic "+m.name+" (XDP_STATISTICS).", labelsQueue, m.v, ifn, q)
		}
		counter("ndkxdp_xsk_tx_frames_total", "Frames the engine queued on the AF_XDP socket.", labelsQueue, x.Port.TxFrames, ifn, q)
		counter("ndkxdp_xsk_tx_in_place_bytes_total", "Bytes sent in place from registered memory instead of copied into a UMEM frame (no copy at all on a zero-copy socket).", labelsQueue, x.Port.TxRefBytes, ifn, q)
	}
	if xc, err := p.XDPCounters(); err == nil {
		for r, n := range xc {
			counter("ndkxdp_xdp_frames_total", "Frames the steering program saw, by verdict and reason.",
				[]string{"interface", "verdict", "reason"}, n, ifn, loader.Reason(r).Verdict().String(), strings.ToLower(loader.Reason(r).String()))
		}
	}
	cm := s.a.CMStats()
	for dir, m := range map[string]map[string]uint64{"sent": attrs(cm.Sent), "received": attrs(cm.Received)} {
		for a, n := range m {
			counter("ndkxdp_cm_mads_total", "Connection-management MADs, by direction and attribute.",
				[]string{"interface", "direction", "attribute"}, n, ifn, dir, a)
		}
	}
	counter("ndkxdp_cm_retransmits_total", "CM MADs resent after a timeout.", []string{"interface"}, cm.Retransmits, ifn)
	counter("ndkxdp_cm_drops_total", "CM MADs dropped locally (queue full).", []string{"interface"}, cm.QueueDrops+cm.SendDrops, ifn)
	counter("ndkxdp_cm_time_wait_evictions_total", "Connections whose time-wait ended early to keep time-wait within its bound.", []string{"interface"}, cm.TimeWaitEvictions, ifn)
	counter("ndkxdp_cm_backlog_refusals_total", "Connect requests refused because their listener's backlog was full.", []string{"interface"}, cm.BacklogRefusals, ifn)
	for _, g := range []struct {
		state string
		n     int
	}{{"all", cm.Connections}, {"half_open", cm.HalfOpen}, {"time_wait", cm.TimeWait}} {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("ndkxdp_cm_connections", "Connections the CM holds state for, all and by state.",
			[]string{"interface", "state"}, nil), prometheus.GaugeValue, float64(g.n), ifn, g.state)
	}
	c.collectQPs(ch, p, counter)
}

func attrs(m map[rocev2.AttributeID]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for a, n := range m {
		out[strings.ToLower(a.String())] = n
	}
	return out
}

// collectQPs emits each QP's counters, the first qpSeries QPs by number
// each under its own qpn, the rest summed under qpn="other".
func (c *collector) collectQPs(ch chan<- prometheus.Metric, p *inproc.Provider, counter func(string, string, []string, uint64, ...string)) {
	qps := p.QPs()
	sort.Slice(qps, func(i, j int) bool { return qps[i].QPN < qps[j].QPN })
	var other counters.QP
	emit := func(q *counters.QP, label string) {
		for m, v := range q.All() {
			counter("ndkxdp_qp_"+m.Name+"_total", m.Help+` qpn="other" sums the QPs beyond the series limit.`,
				labelsQP, v, c.s.cfg.Interface, label)
		}
	}
	for i := range qps {
		q := &qps[i].QPInfo
		if i < c.qpSeries {
			emit(&q.QP, strconv.FormatUint(uint64(q.QPN), 10))
			continue
		}
		other.Add(q.QP)
	}
	if len(qps) > c.qpSeries {
		emit(&other, "other")
	}
}

func sortedKeys(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
