package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/test/daemonproc"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// peerClient is `demo -dev IF -peer ADDR` on h against addr, small.
func peerClient(h *harness.Host, addr string, extra ...string) []string {
	return append([]string{"demo", "-dev", h.Link, "-peer", addr, "-messages", "1000", "-send-size", "100",
		"-rdma-ops", "40", "-rdma-size", "8192", "-pings", "200"}, extra...)
}

// startServe runs `demo -serve` (args) in h's namespace until ctx ends or
// it returns, and waits until it listens (at most 20 s).
func startServe(t *testing.T, ctx context.Context, h *harness.Host, args []string) (*daemonproc.SyncBuffer, <-chan error) {
	t.Helper()
	out := &daemonproc.SyncBuffer{}
	served := make(chan error, 1)
	go func() { served <- h.Do(func() error { return run(ctx, args, out, out) }) }()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "serving the demo's phases on"); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-served:
			t.Fatalf("demo -serve ended before listening: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo -serve not listening after 20 s:\n%s", out.String())
		}
	}
	return out, served
}

// runAgainstServe runs the server and then the client, and returns their
// outputs once both ended.
func runAgainstServe(t *testing.T, srv *harness.Host, server []string, cli *harness.Host, client []string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sout, served := startServe(t, ctx, srv, server)
	var cout strings.Builder
	cerr := cli.Do(func() error { return run(ctx, client, &cout, &cout) })
	if cerr != nil {
		cancel()
	}
	if serr := <-served; cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout.String(), serr, sout.String())
	}
	return cout.String(), sout.String()
}

// checkPeerReport fails the test for each line of a full run against demo
// -serve at addr that the client's or the server's output lacks.
func checkPeerReport(t *testing.T, cout, sout, addr string) {
	t.Helper()
	t.Logf("client:\n%s\nserver:\n%s", cout, sout)
	for _, want := range []string{"peer: " + addr + ":7174 (-peer-kind ndkxdp",
		"SEND: 1000 messages of 100 bytes to the peer, contents verified there (QP 0x",
		"WRITE: 40 x 8192 bytes into the peer's memory, contents verified there",
		"READ: 40 x 8192 bytes from the peer's memory, contents verified",
		"report (against ndkxdp demo -serve at " + addr + ":7174):",
		"SEND      1000 x 100", "WRITE       40 x 8192", "READ        40 x 8192",
		"SEND   RTT p50", "p99.9", "(200 round trips)", "0 bad ICRC", "connections: 4 set up"} {
		if !strings.Contains(cout, want) {
			t.Errorf("client output lacks %q:\n%s", want, cout)
		}
	}
	for _, want := range []string{"serving the demo's phases on " + addr + ":7174",
		"SEND from ", ": 1000 messages of 100 bytes, contents verified",
		"WRITE from ", ": 40 x 8192 bytes written, contents verified",
		"READ from ", "ping-pong from ", "demo 1 from ", "served 1 demos"} {
		if !strings.Contains(sout, want) {
			t.Errorf("server output lacks %q:\n%s", want, sout)
		}
	}
}

// TestDemoPeerAgainstServe runs `demo -dev vethB -peer A` against `demo
// -dev vethA -serve -count 1` in the other namespace: in process on both
// sides, then with both sides through a daemon. Every phase runs, the
// server verifies SEND and WRITE and says so, the client verifies READ,
// and the server ends after the one demo.
func TestDemoPeerAgainstServe(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	addr := p.A.IPv4.String()
	t.Run("in process", func(t *testing.T) {
		capture := filepath.Join(t.TempDir(), "peer.pcap")
		cout, sout := runAgainstServe(t, p.A, []string{"demo", "-dev", p.A.Link, "-serve", "-count", "1"}, p.B, peerClient(p.B, addr, "-capture", capture))
		checkPeerReport(t, cout, sout, addr)
		// The capture holds every frame the client's report counts, both
		// ways.
		f, err := pcapfile.ReadFile(capture)
		if err != nil {
			t.Fatal(err)
		}
		var out, in int
		for _, l := range strings.Split(cout, "\n") {
			if _, err := fmt.Sscanf(strings.TrimSpace(l), p.B.Link+": %d frames out, %d in,", &out, &in); err == nil {
				break
			}
		}
		if out == 0 || len(f.Packets) != out+in {
			t.Errorf("capture holds %d frames; the report counts %d out and %d in", len(f.Packets), out, in)
		}
	})
	t.Run("through daemons", func(t *testing.T) {
		sockA, sockB := serveDaemonOn(t, p.A), serveDaemonOn(t, p.B)
		cout, sout := runAgainstServe(t, p.A, []string{"demo", "-dev", p.A.Link, "-serve", "-count", "1", "-daemon", sockA},
			p.B, peerClient(p.B, addr, "-daemon", sockB))
		checkPeerReport(t, cout, sout, addr)
		if !strings.Contains(cout, "this host: "+p.B.Link+" (daemon "+sockB+")") {
			t.Errorf("client output does not name the daemon:\n%s", cout)
		}
	})
}

// TestDemoPeerRping runs the demo against ndkxdp's own `rping -s`, a
// stand-in for any rping peer: the demo names the phases rping serves and
// those it skips, with why, and times rping's round trips.
func TestDemoPeerRping(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	addr := p.A.IPv4.String()
	cout, _ := runIn(t, p.A, []string{"rping", "-s", "-a", addr, "-dev", p.A.Link},
		p.B, []string{"demo", "-dev", p.B.Link, "-peer", addr, "-peer-kind", "rping", "-pings", "50"})
	for _, want := range []string{"peer: " + addr + ":7174 (-peer-kind rping",
		"connect:   runs", "SEND:      skipped: rping -s takes only its 16-byte buffer adverts",
		"WRITE:     skipped: rping -s advertises no memory", "READ:      skipped: rping -s advertises no memory",
		"ping-pong: runs as rping's round trips", "report (against rping -s at " + addr + ":7174):",
		"rping      150 x 64       READ by the peer and written back, each compared: 9600 bytes each way",
		"rping  RTT p50", "(50 round trips of 64 bytes)", "0 bad ICRC"} {
		if !strings.Contains(cout, want) {
			t.Errorf("client output lacks %q:\n%s", want, cout)
		}
	}
	// The demo's own client, told nothing, meets rping -s: rping's REP
	// carries no demo reply, and the client says what to do.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- p.A.Do(func() error {
			return run(ctx, []string{"rping", "-s", "-a", addr, "-dev", p.A.Link}, io.Discard, io.Discard)
		})
	}()
	time.Sleep(300 * time.Millisecond)
	err := p.B.Do(func() error { return run(ctx, peerClient(p.B, addr), io.Discard, io.Discard) })
	if err == nil || !strings.Contains(err.Error(), "SEND: the peer at "+addr+":7174: it accepted but is not ndkxdp demo -serve") ||
		!strings.Contains(err.Error(), "give -peer-kind rping") {
		t.Errorf("demo against rping -s without -peer-kind: %v, want the hint to -peer-kind rping", err)
	}
	cancel()
	<-served
}

// TestDemoPeerPerftest runs the demo against perftest servers (ndkxdp's
// own `perf`, through a daemon, standing in for any perftest -R peer) for
// WRITE and the ping-pong alone: the demo prints the command for every
// phase's server, skips SEND and READ, whose servers do not answer, and
// reports the two that ran from perftest's figures, saying that nothing
// was checked.
func TestDemoPeerPerftest(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	sock := serveDaemonOn(t, p.A)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servers := [][]string{
		{"perf", "write_bw", "-p", "18516", "-s", "8192", "-n", "40", "-daemon", sock},
		{"perf", "send_lat", "-p", "18518", "-s", "64", "-n", "50", "-daemon", sock},
	}
	done := make(chan error, len(servers))
	var souts [2]daemonproc.SyncBuffer
	for i, args := range servers {
		go func() { done <- run(ctx, args, &souts[i], &souts[i]) }()
	}
	time.Sleep(300 * time.Millisecond)
	var out, errOut strings.Builder
	err := p.B.Do(func() error {
		return run(ctx, []string{"demo", "-dev", p.B.Link, "-peer", p.A.IPv4.String(), "-peer-kind", "perftest",
			"-messages", "100", "-rdma-ops", "40", "-rdma-size", "8192", "-pings", "50"}, &out, &errOut)
	})
	if err != nil {
		cancel()
	}
	for range servers {
		if serr := <-done; serr != nil {
			t.Errorf("perftest server: %v\n%s\n%s", serr, souts[0].String(), souts[1].String())
		}
	}
	if err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errOut.String())
	}
	addr := p.A.IPv4.String()
	for _, want := range []string{"-peer-kind perftest: one perftest server per phase, ports from 18515",
		"SEND:      ib_send_bw -R -p 18515 -s 64 -n 100", "WRITE:     ib_write_bw -R -p 18516 -s 8192 -n 40",
		"READ:      ib_read_bw -R -p 18517 -s 8192 -n 40", "ping-pong: ib_send_lat -R -p 18518 -s 64 -n 50",
		"SEND: skipped: nobody listens at " + addr + ":18515 (REJ reason 8)", "READ: skipped: nobody listens at " + addr + ":18517",
		"report (against perftest -R servers at " + addr + ":18515):",
		"WRITE       40 x 8192", "(ib_write_bw; contents not checked)", "SEND   skipped (no ib_send_bw at port 18515)",
		"SEND   RTT p50", "(50 round trips, ib_send_lat's one-way figures doubled)", "connections: 2 perftest runs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("%s", out.String())
}

// TestDemoPeerUnreachable: a peer that never answers ARP fails the first
// phase's connection, naming the phase, the peer and EHOSTUNREACH.
func TestDemoPeerUnreachable(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500})
	var out, errOut strings.Builder
	start := time.Now()
	err := p.B.Do(func() error {
		return run(context.Background(), []string{"demo", "-dev", p.B.Link, "-peer", "198.18.0.77", "-messages", "10"}, &out, &errOut)
	})
	var msg strings.Builder
	exitStatus(err, &msg)
	if err == nil || !strings.Contains(msg.String(), "SEND: connect to 198.18.0.77:7174") || !strings.Contains(msg.String(), "EHOSTUNREACH") {
		t.Errorf("demo against nobody: %q, want the phase, the peer and EHOSTUNREACH named", msg.String())
	}
	t.Logf("%s after %v", strings.TrimSpace(msg.String()), time.Since(start).Round(time.Millisecond))
}

// TestDemoServeOutlivesAnInterruptedClient: a client interrupted in the
// middle of its SEND phase ends that phase on the server at once (its
// DREQ), the server says so and serves the next client's whole demo.
func TestDemoServeOutlivesAnInterruptedClient(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	addr := p.A.IPv4.String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sout, served := startServe(t, ctx, p.A, []string{"demo", "-dev", p.A.Link, "-serve", "-count", "1"})
	// The first client is interrupted 100 ms into its SEND phase, once
	// its line says it is connected (at most 20 s).
	cctx, ccancel := context.WithCancel(ctx)
	var cout daemonproc.SyncBuffer
	go func() {
		defer ccancel()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if strings.Contains(cout.String(), "connected through the IB CM") {
				time.Sleep(100 * time.Millisecond)
				return
			}
		}
	}()
	start := time.Now()
	err := p.B.Do(func() error {
		return run(cctx, []string{"demo", "-dev", p.B.Link, "-peer", addr, "-messages", "10000000"}, &cout, io.Discard)
	})
	if err == nil || !strings.Contains(err.Error(), "SEND") {
		t.Fatalf("interrupted client: %v, want its SEND phase named", err)
	}
	var out strings.Builder
	if err := p.B.Do(func() error { return run(ctx, peerClient(p.B, addr), &out, &out) }); err != nil {
		t.Fatalf("next client: %v\n%s\nserver:\n%s", err, out.String(), sout.String())
	}
	if err := <-served; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	s := sout.String()
	if !strings.Contains(s, ": the client disconnected before the phase's end") || !strings.Contains(s, "demo 1 from "+p.B.IPv4.String()) {
		t.Errorf("server output does not name the interrupted phase and the next demo:\n%s", s)
	}
	t.Logf("both clients served in %v:\n%s", time.Since(start).Round(time.Millisecond), s)
}
