package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// serveDaemonOn runs ndkxdp's daemon (ndk/daemon, in process) on h's veth
// end and returns its socket; the test's end stops it.
func serveDaemonOn(t *testing.T, h *harness.Host) string {
	t.Helper()
	var a *ndk.Adapter
	if err := h.Do(func() error {
		var err error
		a, err = ndk.Open(h.Link, ndk.Options{})
		return err
	}); err != nil {
		t.Fatalf("open the daemon's adapter: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "ndkxdp.sock")
	ln, err := daemon.Listen(sock, 0o600, -1)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	srv := daemon.New(a, daemon.Config{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	return sock
}

// resultRow returns the fields of the row under perftest's result header
// (the line holding column), failing the test without one.
func resultRow(t *testing.T, out, column string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, column) && i+1 < len(lines) {
			return strings.Fields(lines[i+1])
		}
	}
	t.Fatalf("no %q result in:\n%s", column, out)
	return nil
}

// TestToolsThroughDaemon runs `ndkxdp rping` and `ndkxdp perf` with
// -daemon against a daemon on A's veth end, the peer attached to B's with
// -dev: rping's client validates every pong, perf's server listens
// through the daemon (write_bw), its client connects through it
// (send_lat), and each report's result row holds the run's size and
// iterations and a positive figure.
func TestToolsThroughDaemon(t *testing.T) {
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	sock := serveDaemonOn(t, p.A)
	srvB := p.B.IPv4.String()
	t.Run("rping", func(t *testing.T) {
		cout, _ := runIn(t, p.B, []string{"rping", "-s", "-a", srvB, "-C", "10", "-S", "100", "-dev", p.B.Link},
			p.A, []string{"rping", "-c", "-a", srvB, "-C", "10", "-S", "100", "-V", "-v", "-daemon", sock})
		if n := strings.Count(cout, "ping data: rdma-ping-"); n != 10 {
			t.Fatalf("client printed %d validated pings, want 10:\n%s", n, cout)
		}
	})
	t.Run("write_bw", func(t *testing.T) {
		// The server listens through the daemon on A's address.
		cout, sout := runIn(t, p.A, []string{"perf", "write_bw", "-n", "200", "-s", "4096", "-daemon", sock},
			p.B, []string{"perf", "write_bw", "-n", "200", "-s", "4096", p.A.IPv4.String(), "-dev", p.B.Link})
		for _, out := range []string{cout, sout} {
			row := resultRow(t, out, "BW average[")
			if len(row) != 5 || row[0] != "4096" || row[1] != "200" {
				t.Fatalf("write_bw row %q, want 4096 bytes, 200 iterations:\n%s", row, out)
			}
			if bw, err := strconv.ParseFloat(row[3], 64); err != nil || bw <= 0 {
				t.Errorf("write_bw average %q, want a positive bandwidth", row[3])
			}
		}
	})
	t.Run("send_lat", func(t *testing.T) {
		cout, _ := runIn(t, p.B, []string{"perf", "send_lat", "-n", "200", "-s", "64", "-dev", p.B.Link},
			p.A, []string{"perf", "send_lat", "-n", "200", "-s", "64", srvB, "-daemon", sock})
		row := resultRow(t, cout, "t_typical[")
		if len(row) < 5 || row[0] != "64" || row[1] != "200" {
			t.Fatalf("send_lat row %q, want 64 bytes, 200 iterations:\n%s", row, cout)
		}
		if lat, err := strconv.ParseFloat(row[4], 64); err != nil || lat <= 0 {
			t.Errorf("send_lat t_typical %q, want a positive time", row[4])
		}
	})
}
