package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// recorder wraps the in-memory network: it keeps every endpoint and can
// reject the data connection (the second Connect) a number of times with
// REJ reason 8, as a server that listens late does.
type recorder struct {
	net        *verbstest.Network
	mu         sync.Mutex
	eps        []*verbstest.Endpoint
	rejectData int
	calls      int
	sent       []int // sizes of the control SENDs the client posted
}

func (r *recorder) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	r.mu.Lock()
	r.calls++
	if r.calls > 1 && r.rejectData > 0 {
		r.rejectData--
		r.mu.Unlock()
		return nil, &verbs.RejectError{Reason: verbs.RejectInvalidServiceID}
	}
	first := r.calls == 1
	r.mu.Unlock()
	if first && p.Prepare != nil {
		prepare := p.Prepare
		p.Prepare = func(ep verbs.Endpoint) error { return prepare(&sizeLog{Endpoint: ep, r: r}) }
	}
	ep, err := r.net.Connect(ctx, port, p)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.eps = append(r.eps, ep.(*verbstest.Endpoint))
	r.mu.Unlock()
	return ep, nil
}

// sizeLog records the sizes of the client's control SENDs.
type sizeLog struct {
	verbs.Endpoint
	r *recorder
}

func (s *sizeLog) Send(id uint64, local verbs.Segment, signaled bool) error {
	s.r.mu.Lock()
	s.r.sent = append(s.r.sent, local.Len)
	s.r.mu.Unlock()
	return s.Endpoint.Send(id, local, signaled)
}

// serverSide keeps the endpoints the server accepted.
type serverSide struct {
	verbs.Listener
	mu  sync.Mutex
	eps []*verbstest.Endpoint
}

func (s *serverSide) Accept(ctx context.Context, p verbs.ConnParams) (verbs.Endpoint, error) {
	ep, err := s.Listener.Accept(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.eps = append(s.eps, ep.(*verbstest.Endpoint))
		s.mu.Unlock()
	}
	return ep, err
}

type pair struct {
	client, server Result
	cerr, serr     error
	cout, sout     bytes.Buffer
	rec            *recorder
	srv            *serverSide
}

func runPair(t *testing.T, cp, sp Params, rejectData int) *pair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := &verbstest.Network{}
	port := cp.Port
	if port == 0 {
		port = DefaultPort
	}
	l, err := n.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pr := &pair{rec: &recorder{net: n, rejectData: rejectData}, srv: &serverSide{Listener: l}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pr.server, pr.serr = RunServer(ctx, sp, pr.srv, &pr.sout)
	}()
	pr.client, pr.cerr = RunClient(ctx, cp, pr.rec, &pr.cout)
	if pr.cerr != nil {
		cancel() // do not leave the server waiting
	}
	wg.Wait()
	return pr
}

func TestTests(t *testing.T) {
	tests := []struct {
		name string
		p    Params
	}{
		{"send_bw", Params{Verb: Send, Kind: BW, Size: 4096, Iterations: 300, TxDepth: 16, CQMod: 4, RxDepth: 32}},
		{"write_bw", Params{Verb: Write, Kind: BW, Size: 3000, Iterations: 500}},
		{"write_bw default size", Params{Verb: Write, Kind: BW, Iterations: 50, NoPeak: true}},
		{"read_bw", Params{Verb: Read, Kind: BW, Size: 1024, Iterations: 200, OutReads: 4}},
		{"atomic_bw fetch-add", Params{Verb: Atomic, Kind: BW, Iterations: 200}},
		{"atomic_bw cmp-swap", Params{Verb: Atomic, Kind: BW, Iterations: 200, AtomicType: CompareAndSwap, ReportGbits: true}},
		{"send_lat", Params{Verb: Send, Kind: Lat, Size: 64, Iterations: 200}},
		{"write_lat", Params{Verb: Write, Kind: Lat, Size: 1, Iterations: 300}},
		{"write_lat big", Params{Verb: Write, Kind: Lat, Size: 65536, Iterations: 20}},
		{"read_lat", Params{Verb: Read, Kind: Lat, Size: 8, Iterations: 100}},
		{"atomic_lat fetch-add", Params{Verb: Atomic, Kind: Lat, Iterations: 100}},
		{"atomic_lat cmp-swap", Params{Verb: Atomic, Kind: Lat, Iterations: 100, AtomicType: CompareAndSwap}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr := runPair(t, tt.p, tt.p, 0)
			if pr.cerr != nil || pr.serr != nil {
				t.Fatalf("client: %v\nserver: %v", pr.cerr, pr.serr)
			}
			p := pr.client.Params
			if pr.client.PeerVersion != DefaultVersion || pr.client.MTU != 1024 {
				t.Errorf("peer version %q MTU %d", pr.client.PeerVersion, pr.client.MTU)
			}
			// Each side learned the other's buffer.
			if pr.client.Peer.RKey != pr.server.Local.RKey || pr.client.Peer.VAddr != pr.server.Local.VAddr || pr.server.Peer != pr.client.Local {
				t.Errorf("dests: client saw %+v, server advertised %+v", pr.client.Peer, pr.server.Local)
			}
			cdata, sdata := pr.rec.eps[1], pr.srv.eps[1]
			switch p.Kind {
			case BW:
				checkBW(t, p, pr.client.BW)
				if p.Verb != Send {
					// The server prints the client's report, received over
					// the control connection.
					if pr.server.BW == nil || *pr.server.BW != *pr.client.BW {
						t.Errorf("server printed %+v, client measured %+v", pr.server.BW, pr.client.BW)
					}
				} else {
					checkBW(t, p, pr.server.BW)
					if sdata.Posted.Receive != p.Iterations {
						t.Errorf("server posted %d receives, want %d", sdata.Posted.Receive, p.Iterations)
					}
				}
				warm := 0
				if p.Verb != Send {
					warm = min(window(&p), p.Iterations)
				}
				got := map[Verb]int{Send: cdata.Posted.Send, Write: cdata.Posted.Write, Read: cdata.Posted.Read, Atomic: cdata.Posted.Atomic}[p.Verb]
				if got != p.Iterations+warm {
					t.Errorf("client posted %d, want %d + %d warm-up", got, p.Iterations, warm)
				}
				if p.Verb == Atomic {
					// The server's target word counts the fetch-adds, or
					// holds the swap value.
					v := binary.LittleEndian.Uint64(targetWord(pr))
					want := uint64(p.Iterations + warm)
					if p.AtomicType == CompareAndSwap {
						want = atomicSwap
					}
					if v != want {
						t.Errorf("server's atomic target = %d, want %d", v, want)
					}
				}
				if !strings.Contains(pr.cout.String(), "BW peak[") || !strings.Contains(pr.sout.String(), "BW average[") {
					t.Errorf("reports missing:\n%s\n%s", pr.cout.String(), pr.sout.String())
				}
			case Lat:
				checkLat(t, p, pr.client.Lat)
				// The histogram holds the report's samples: every one
				// but the tail, from its min on, none above its max
				// (perftest's max is the first sample of the tail).
				if h, l := pr.client.Hist, pr.client.Lat; h == nil || h.Samples != p.Iterations-1-latTail ||
					h.Buckets[0].High <= l.Min || h.Buckets[len(h.Buckets)-1].Low > l.Max {
					t.Errorf("histogram %+v of a report with min %v max %v over %d iterations", h, l.Min, l.Max, p.Iterations)
				}
				if p.Verb == Read || p.Verb == Atomic {
					// Only the client posts (read_lat.c, atomic_lat.c).
					if n := cdata.Posted.Read + cdata.Posted.Atomic; pr.server.Lat != nil || n != p.Iterations {
						t.Errorf("%v lat: server stats %v, client posted %d", p.Verb, pr.server.Lat, n)
					}
				} else {
					checkLat(t, p, pr.server.Lat)
				}
				if !strings.Contains(pr.cout.String(), "t_typical[usec]") {
					t.Errorf("latency report missing:\n%s", pr.cout.String())
				}
			}
		})
	}
}

func targetWord(pr *pair) []byte {
	// The server registered one test buffer; its second half is the target.
	return pr.srvBuf()[pr.server.Local.VAddr-pr.srvAddr():][:8]
}

func (pr *pair) srvBuf() []byte  { return pr.srv.eps[1].Regions()[0].Buf }
func (pr *pair) srvAddr() uint64 { return pr.srv.eps[1].Regions()[0].Addr }

func checkBW(t *testing.T, p Params, r *Report) {
	t.Helper()
	if r == nil {
		t.Fatal("no bandwidth report")
	}
	if r.Size != uint64(p.Size) || r.Iters != uint64(p.Iterations) {
		t.Errorf("report size %d iters %d, want %d %d", r.Size, r.Iters, p.Size, p.Iterations)
	}
	if !(r.BWAvg > 0) || math.IsInf(r.BWAvg, 0) || !(r.MsgRate > 0) {
		t.Errorf("implausible report %+v", r)
	}
	if p.NoPeak && r.BWPeak != 0 {
		t.Errorf("peak %v with -N", r.BWPeak)
	}
}

func checkLat(t *testing.T, p Params, s *LatStats) {
	t.Helper()
	if s == nil {
		t.Fatal("no latency stats")
	}
	if s.Iters != p.Iterations || s.Size != p.Size {
		t.Errorf("stats size %d iters %d", s.Size, s.Iters)
	}
	if !(s.Min <= s.Typical && s.Typical <= s.Max && s.Min <= s.Avg && s.Avg <= s.Max && s.Percentile99 <= s.Percentile999 && s.Min >= 0) {
		t.Errorf("inconsistent stats %+v", s)
	}
}

func TestDataConnectionRetry(t *testing.T) {
	p := Params{Verb: Write, Kind: BW, Size: 64, Iterations: 10}
	// Without the retry option a late listener fails the client clearly.
	pr := runPair(t, p, p, 1)
	var rej *verbs.RejectError
	if !errors.As(pr.cerr, &rej) || rej.Reason != 8 || !strings.Contains(pr.cerr.Error(), "data connection") {
		t.Fatalf("client: %v, want REJ reason 8 on the data connection", pr.cerr)
	}
	// With it, three rejections are ridden out.
	q := p
	q.ConnectRetry = Retry{Attempts: 5, Interval: time.Millisecond}
	pr = runPair(t, q, p, 3)
	if pr.cerr != nil || pr.serr != nil {
		t.Fatalf("client %v server %v", pr.cerr, pr.serr)
	}
	if pr.rec.calls != 5 {
		t.Errorf("%d connects, want 1 control + 4 data", pr.rec.calls)
	}
	// And the retries are bounded.
	q.ConnectRetry = Retry{Attempts: 2, Interval: time.Millisecond}
	pr = runPair(t, q, p, 10)
	if !errors.As(pr.cerr, &rej) || !strings.Contains(pr.cerr.Error(), "after 3 attempts") {
		t.Fatalf("client: %v, want failure after 3 attempts", pr.cerr)
	}
}

func TestVersionTooOld(t *testing.T) {
	p := Params{Verb: Write, Kind: BW, Size: 64, Iterations: 10}
	old := p
	old.Version = "5.60"
	pr := runPair(t, p, old, 0)
	if !errors.Is(pr.cerr, ErrProtocol) || !strings.Contains(pr.cerr.Error(), "5.60") {
		t.Fatalf("client against 5.60: %v", pr.cerr)
	}
}

func TestBWLoopAllocatesNothing(t *testing.T) {
	a, b := verbstest.Pair(verbstest.Options{})
	p := Params{Verb: Write, Kind: BW, Size: 512, Iterations: 256, TxDepth: 32, CQMod: 8}
	if err := p.normalize(); err != nil {
		t.Fatal(err)
	}
	var dc, ds data
	if err := prepareData(&dc, &p, DefaultCycleBuf)(a); err != nil {
		t.Fatal(err)
	}
	if err := prepareData(&ds, &p, DefaultCycleBuf)(b); err != nil {
		t.Fatal(err)
	}
	peer := ds.dest(&p)
	posted, completed := make([]uint64, p.Iterations), make([]uint64, p.Iterations)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(20, func() {
		if err := postBW(ctx, &p, &dc, peer, posted, completed); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("postBW allocates %v times per run", allocs)
	}
}

func TestParams(t *testing.T) {
	tests := []struct {
		in      Params
		want    Params
		wantErr error
	}{
		{in: Params{Verb: Write, Kind: BW}, want: Params{Size: 65536, Iterations: 5000, TxDepth: 128, CQMod: 100}},
		{in: Params{Verb: Send, Kind: BW}, want: Params{Size: 65536, Iterations: 1000, TxDepth: 128, CQMod: 100}},
		{in: Params{Verb: Read, Kind: BW, OutReads: 4}, want: Params{Size: 65536, Iterations: 1000, TxDepth: 128, CQMod: 4}},
		{in: Params{Verb: Send, Kind: Lat}, want: Params{Size: 2, Iterations: 1000, TxDepth: 1, CQMod: 1}},
		{in: Params{Verb: Atomic, Kind: BW}, want: Params{Size: 8, Iterations: 1000, TxDepth: 128, CQMod: 16}},
		{in: Params{Verb: Write, Kind: BW, Iterations: 30000}, want: Params{Size: 65536, Iterations: 30000, TxDepth: 128, CQMod: 100, NoPeak: true}},
		{in: Params{Verb: Write, Kind: BW, TxDepth: 10}, want: Params{Size: 65536, Iterations: 5000, TxDepth: 10, CQMod: 10}},
		{in: Params{Verb: Atomic, Kind: BW, Size: 16}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Write, Kind: BW, Size: MaxSize + 1}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Write, Kind: BW, Iterations: 4}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Write, Kind: BW, TxDepth: MaxTx + 1}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Write, Kind: BW, MTU: 1500}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Write, Kind: BW, Duration: time.Second, Iterations: 50}, want: Params{Size: 65536, TxDepth: 128, CQMod: 100, NoPeak: true}},
		{in: Params{Verb: Send, Kind: BW, Duration: time.Second, Iterations: 4}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Write, Kind: BW, Duration: -time.Second}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Write, Kind: Lat, AllSizes: true, Size: 64}, want: Params{Size: MaxSize, Iterations: 1000, TxDepth: 1, CQMod: 1}},
		{in: Params{Verb: Write, Kind: BW, AllSizes: true, Duration: time.Second}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Atomic, Kind: BW, AllSizes: true}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Atomic, Kind: Lat}, want: Params{Size: 8, Iterations: 1000, TxDepth: 1, CQMod: 1}},
		{in: Params{Verb: Atomic, Kind: Lat, Size: 64}, wantErr: verbs.ErrInvalid},
		{in: Params{Verb: Write, Kind: BW, ConnectRetry: Retry{Attempts: 5000}}, wantErr: verbs.ErrInvalid},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			p := tt.in
			err := p.normalize()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := Params{Size: p.Size, Iterations: p.Iterations, TxDepth: p.TxDepth, CQMod: p.CQMod, NoPeak: p.NoPeak}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if p.Port != DefaultPort || p.Version != DefaultVersion || p.MTU != 1024 {
				t.Errorf("port %d version %q mtu %d", p.Port, p.Version, p.MTU)
			}
		})
	}
}

// opLog records, across both data endpoints, who posted each SEND and WRITE
// and in which order.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(op string) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

type loggedEndpoint struct {
	verbs.Endpoint
	role string
	log  *opLog
}

func (e *loggedEndpoint) Send(id uint64, local verbs.Segment, signaled bool) error {
	e.log.add(e.role + " send")
	return e.Endpoint.Send(id, local, signaled)
}

func (e *loggedEndpoint) Write(id uint64, local verbs.Segment, addr uint64, rkey uint32, signaled bool) error {
	e.log.add(e.role + " write")
	return e.Endpoint.Write(id, local, addr, rkey, signaled)
}

// loggingConnector and loggingListener log the data connection (the second
// one) of each side.
type loggingConnector struct {
	verbs.Connector
	log   *opLog
	calls int
}

func (c *loggingConnector) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	c.calls++
	if c.calls > 1 {
		p.Prepare = logPrepare(p.Prepare, "client", c.log)
	}
	return c.Connector.Connect(ctx, port, p)
}

// logPrepare hands the test's Prepare (which keeps the endpoint for the
// data path) a loggedEndpoint.
func logPrepare(prepare func(verbs.Endpoint) error, role string, log *opLog) func(verbs.Endpoint) error {
	return func(ep verbs.Endpoint) error {
		return prepare(&loggedEndpoint{Endpoint: ep, role: role, log: log})
	}
}

type loggingListener struct {
	verbs.Listener
	log   *opLog
	calls int
}

func (l *loggingListener) Accept(ctx context.Context, p verbs.ConnParams) (verbs.Endpoint, error) {
	l.calls++
	if l.calls > 1 {
		p.Prepare = logPrepare(p.Prepare, "server", l.log)
	}
	return l.Listener.Accept(ctx, p)
}

// TestLatencyPingPongOrder pins who opens each latency ping-pong and which
// tests end with a closing handshake, as Debian 12's perftest does (live
// rxe deadlocks or is left waiting otherwise): send_lat's client sends
// first (run_iter_lat_send skips the first wait on the CLIENT),
// write_lat's server writes first (run_iter_lat_write skips it on the
// SERVER), and write_lat's main() returns after its report without
// ctx_close_connection.
func TestLatencyPingPongOrder(t *testing.T) {
	tests := []struct {
		p       Params
		first   string
		closing bool
	}{
		{Params{Verb: Send, Kind: Lat, Size: 64, Iterations: 20}, "client send", true},
		{Params{Verb: Write, Kind: Lat, Size: 64, Iterations: 20}, "server write", false},
		{Params{Verb: Read, Kind: Lat, Size: 64, Iterations: 20}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.p.Verb.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n := &verbstest.Network{}
			l, err := n.Listen(DefaultPort)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			log := &opLog{}
			rec := &recorder{net: n}
			var serr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, serr = RunServer(ctx, tt.p, &loggingListener{Listener: l, log: log}, &bytes.Buffer{})
			}()
			_, cerr := RunClient(ctx, tt.p, &loggingConnector{Connector: rec, log: log}, &bytes.Buffer{})
			if cerr != nil {
				cancel()
			}
			<-done
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\nserver: %v", cerr, serr)
			}
			if tt.first != "" && (len(log.ops) == 0 || log.ops[0] != tt.first) {
				t.Errorf("data QP operations begin %v, want %q first", log.ops[:min(4, len(log.ops))], tt.first)
			}
			// 56-byte control messages of the client: two zeroed syncs
			// around the data connection, four pingpong_dest handshakes,
			// and the closing handshake where the test has one.
			dests := 0
			for _, n := range rec.sent {
				if n == DestLen {
					dests++
				}
			}
			want := 6
			if tt.closing {
				want++
			}
			if dests != want {
				t.Errorf("client sent %d pingpong_dest messages, want %d (closing handshake: %v)", dests, want, tt.closing)
			}
		})
	}
}

// TestClosingHandshakeAckLost: the side that sends the last message of
// the closing handshake may never see it acknowledged. The peer holds the
// message and disconnects at once (perftest's client after the server's
// message; perftest's server after its own), so a lost ACK is never
// repaired and the SEND is flushed by the disconnect. Both sides must
// still end without error, with the peer's report. The lost ACK is the
// one of the n-th 56-byte message after the ten 8-byte report messages:
// the client's closing message is the first, the server's the second.
//
// Both kinds of transport: one that flushes requests at the peer's
// disconnect (the SEND completes flushed) and one that leaves them
// outstanding (ndk, rdma_cm: Poll reports the disconnect while the SEND
// is pending and the server's message is already in).
func TestClosingHandshakeAckLost(t *testing.T) {
	for _, tt := range []struct {
		name string
		nth  int
		keep bool
	}{{"server/flushed", 2, false}, {"client/flushed", 1, false}, {"server/kept", 2, true}, {"client/kept", 1, true}} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			reports, dests, lost := 0, 0, 0
			n := &verbstest.Network{Options: verbstest.Options{KeepOnPeerClose: tt.keep, LoseAck: func(b []byte) bool {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case len(b) == ReportLen:
					reports++
				case len(b) == DestLen && reports == 10:
					if dests++; dests == tt.nth {
						lost++
						return true
					}
				}
				return false
			}}}
			l, err := n.Listen(DefaultPort)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			p := Params{Verb: Write, Kind: BW, Size: 4096, Iterations: 50}
			var srv Result
			var serr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				srv, serr = RunServer(ctx, p, l, &bytes.Buffer{})
			}()
			cli, cerr := RunClient(ctx, p, n, &bytes.Buffer{})
			if cerr != nil {
				cancel()
			}
			<-done
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\nserver: %v", cerr, serr)
			}
			if lost != 1 {
				t.Fatalf("%d ACKs lost, want 1 (%d report messages, %d closing messages)", lost, reports, dests)
			}
			if cli.BW == nil || srv.BW == nil || cli.BW.Iters != 50 || srv.BW.Iters != 50 {
				t.Fatalf("reports: client %+v, server %+v", cli.BW, srv.BW)
			}
		})
	}
}

// TestUseSRQRefused: --use-srq is for send tests only, and a side that
// needs an SRQ (a server; either side of a latency test) refuses to run
// through a Listener or Connector without verbs.SRQMaker, before it
// accepts or connects. A bandwidth client has no SRQ, so it runs.
func TestUseSRQRefused(t *testing.T) {
	if err := (Params{Verb: Write, Kind: BW, UseSRQ: true}).Check(); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("write_bw --use-srq: %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := &verbstest.Network{}
	l, err := n.Listen(DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srq := Params{Verb: Send, Kind: BW, UseSRQ: true}
	if _, err := RunServer(ctx, srq, l, io.Discard); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("send_bw --use-srq server on verbstest: %v, want ErrUnsupported", err)
	}
	srq.Kind = Lat
	if _, err := RunClient(ctx, srq, n, io.Discard); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("send_lat --use-srq client on verbstest: %v, want ErrUnsupported", err)
	}
	if n.Connects != 0 {
		t.Fatalf("%d connects before the refusal", n.Connects)
	}
	if !wantsSRQ(&Params{Verb: Send, Kind: BW, UseSRQ: true}, false) || wantsSRQ(&Params{Verb: Send, Kind: BW, UseSRQ: true}, true) {
		t.Fatal("send_bw --use-srq: the server has an SRQ and the client none, as perftest's srq_exists")
	}
}
