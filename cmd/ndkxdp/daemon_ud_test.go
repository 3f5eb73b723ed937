package main

import (
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestUDToolsThroughDaemon runs `ndkxdp udaddy` and `ndkxdp perf send_bw
// -c UD` with -daemon against a daemon on A's veth end, the peer attached
// to B's with -dev, the daemon's client as client and as server: every
// datagram each way arrives (udaddy's closing lines on both sides), and
// perf's result rows hold the run's size and iterations.
func TestUDToolsThroughDaemon(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	sock := serveDaemonOn(t, p.A)
	a, b := p.A.IPv4.String(), p.B.IPv4.String()
	complete := func(t *testing.T, side, out string) {
		t.Helper()
		for _, want := range []string{"data transfers complete", "test complete"} {
			if !strings.Contains(out, want) {
				t.Fatalf("udaddy %s did not say %q:\n%s", side, want, out)
			}
		}
	}
	t.Run("udaddy client through the daemon", func(t *testing.T) {
		cout, sout := runIn(t, p.B, []string{"udaddy", "-b", b, "-C", "10", "-S", "512", "-dev", p.B.Link},
			p.A, []string{"udaddy", "-s", b, "-C", "10", "-S", "512", "-daemon", sock})
		complete(t, "client (daemon)", cout)
		complete(t, "server", sout)
	})
	t.Run("udaddy server through the daemon", func(t *testing.T) {
		cout, sout := runIn(t, p.A, []string{"udaddy", "-C", "10", "-S", "1024", "-daemon", sock},
			p.B, []string{"udaddy", "-s", a, "-C", "10", "-S", "1024", "-dev", p.B.Link})
		complete(t, "client", cout)
		complete(t, "server (daemon)", sout)
	})
	t.Run("send_bw -c UD", func(t *testing.T) {
		// The server serves its UD QP through the daemon; the client
		// resolves it over SIDR.
		cout, sout := runIn(t, p.A, []string{"perf", "send_bw", "-c", "UD", "-n", "200", "-s", "1024", "-daemon", sock},
			p.B, []string{"perf", "send_bw", "-c", "UD", "-n", "200", "-s", "1024", a, "-dev", p.B.Link})
		for _, out := range []string{cout, sout} {
			if row := resultRow(t, out, "BW average["); len(row) != 5 || row[0] != "1024" || row[1] != "200" {
				t.Fatalf("send_bw -c UD row %q, want 1024 bytes, 200 iterations:\n%s", row, out)
			}
		}
	})
	t.Run("send_lat -c UD", func(t *testing.T) {
		// The client's UD QP is the daemon's.
		cout, _ := runIn(t, p.B, []string{"perf", "send_lat", "-c", "UD", "-n", "200", "-s", "64", "-dev", p.B.Link},
			p.A, []string{"perf", "send_lat", "-c", "UD", "-n", "200", "-s", "64", b, "-daemon", sock})
		if row := resultRow(t, cout, "t_typical["); len(row) < 5 || row[0] != "64" || row[1] != "200" {
			t.Fatalf("send_lat -c UD row %q, want 64 bytes, 200 iterations:\n%s", row, cout)
		}
	})
}
