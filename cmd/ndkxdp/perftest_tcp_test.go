package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// cmFrames counts the frames of a capture addressed to QP 1 (IB CM MADs)
// and the others.
func cmFrames(t *testing.T, capture string) (cm, other int) {
	t.Helper()
	c, err := pcapfile.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	for _, pk := range c.Packets {
		var pkt rocev2.Packet
		if rocev2.Parse(pk.Data, &pkt) != nil {
			continue
		}
		if pkt.BTH.DestQP == rocev2.GSIQP {
			cm++
		} else {
			other++
		}
	}
	return cm, other
}

// TestPerfOverTCP: without -R perftest exchanges its control messages
// over TCP and connects the data QP out of band. -comm picks the channel
// (-R is rdma), and every test runs with a client that speaks TCP only
// to a server that takes either (the default), and the other way round,
// over a veth pair, with not one IB CM message on the wire; the default
// on both sides stays rdma_cm.
func TestPerfOverTCP(t *testing.T) {
	for args, want := range map[string]perftest.Comm{"": perftest.CommAuto, "-R": perftest.CommRDMACM, "-comm rdma": perftest.CommRDMACM, "-comm tcp": perftest.CommTCP, "--rdma_cm -comm auto": perftest.CommRDMACM, "-z": perftest.CommRDMACMControl, "-R -z": perftest.CommRDMACM} {
		f, err := parsePerfTest("write_bw", append(strings.Fields(args), "-dev", "lo"), io.Discard, io.Discard)
		if err != nil || f.params.Comm != want {
			t.Errorf("write_bw %s: %v, comm %v, want %v", args, err, f.params.Comm, want)
		}
	}
	f, err := parsePerfTest("write_bw", []string{"-u", "18", "--sl", "3", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.params.QPTimeout != 18 {
		t.Errorf("write_bw -u 18 --sl 3: %v, QP timeout %d", err, f.params.QPTimeout)
	}
	for _, args := range [][]string{{"-comm", "udp"}, {"-R", "-comm", "tcp"}, {"-u", "0"}, {"--qp-timeout", "32"}, {"-S", "16"}, {"-S", "-1"}, {"-C"}, {"--report-histogrm"}, {"-z", "-comm", "tcp"}} {
		if _, err := parsePerfTest("write_bw", append(args, "-dev", "lo"), io.Discard, io.Discard); err == nil {
			t.Errorf("write_bw %q accepted", args)
		}
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	for _, tc := range []struct {
		test                 string
		server, client, more []string
		cm                   int // IB CM frames in the server's capture; -1 some
		cmMax                int // with cm -1: at most this many (one connection's, retransmissions allowed)
	}{
		{test: "send_bw", client: []string{"-comm", "tcp"}},
		{test: "write_bw", client: []string{"-comm", "tcp", "-u", "18"}},
		{test: "read_bw", client: []string{"-comm", "tcp"}},
		{test: "atomic_bw", client: []string{"-comm", "tcp"}},
		{test: "send_lat", client: []string{"-comm", "tcp"}},
		{test: "write_lat", client: []string{"-comm", "tcp"}},
		{test: "read_lat", client: []string{"-comm", "tcp"}},
		{test: "atomic_lat", client: []string{"-comm", "tcp"}},
		// The server speaks TCP only: the default client's REQ is
		// rejected (nobody listens on rdma_cm: a REQ and a REJ) and it
		// turns to TCP.
		{test: "write_bw", server: []string{"-comm", "tcp"}, cm: 2},
		{test: "send_bw", server: []string{"-comm", "tcp"}, more: []string{"-b", "--use-srq", "-r", "64"}, cm: 2},
		{test: "write_bw", more: []string{"-a", "-n", "20"}, client: []string{"-comm", "tcp"}},
		{test: "send_bw", more: []string{"-q", "3"}, client: []string{"-comm", "tcp"}},
		{test: "write_lat", more: []string{"-D", "1"}, client: []string{"-comm", "tcp"}},
		{test: "send_bw", more: []string{"-D", "1"}, server: []string{"-comm", "tcp"}, cm: 2},
		{test: "write_bw", more: []string{"-b"}, client: []string{"-comm", "tcp"}},
		{test: "send_bw", more: []string{"--post_list", "8"}, client: []string{"-comm", "tcp"}},
		{test: "send_lat", more: []string{"-H", "--report-unsorted"}, client: []string{"-comm", "tcp"}},
		{test: "send_bw", more: []string{"-c", "UD"}, client: []string{"-comm", "tcp"}},
		{test: "send_lat", more: []string{"-c", "UD"}, server: []string{"-comm", "tcp"}, cm: 2},
		{test: "read_bw", more: []string{"-q", "2"}, server: []string{"-comm", "tcp"}, cm: 2},
		{test: "write_bw", cm: -1},
		// -z: the control connection through rdma_cm, the data QPs
		// connected out of band.
		{test: "read_bw", server: []string{"-z"}, client: []string{"-z"}, cm: -1, cmMax: 8},
		{test: "send_lat", more: []string{"-z"}, cm: -1, cmMax: 8},
		{test: "send_bw", more: []string{"-z", "-q", "2"}, cm: -1, cmMax: 8},
		{test: "send_bw", more: []string{"-z", "-c", "UD"}, cm: -1, cmMax: 8},
	} {
		name := tc.test + strings.Join(tc.server, "") + "_" + strings.Join(tc.client, "") + strings.Join(tc.more, "")
		t.Run(name, func(t *testing.T) {
			capture := filepath.Join(t.TempDir(), "server.pcap")
			common := append([]string{"perf", tc.test, "-n", "200"}, tc.more...)
			if !strings.HasPrefix(tc.test, "atomic_") {
				common = append(common, "-s", "64")
			}
			cout, sout := runBoth(t, p,
				slices.Concat(common, tc.server, []string{"-capture", capture, "-dev", p.B.Link}),
				slices.Concat(common, tc.client, []string{srv, "-dev", p.A.Link}))
			t.Logf("client:\n%s\nserver:\n%s", cout, sout)
			if rows := perfRows(cout); len(rows) == 0 || (tc.test != "read_lat" && tc.test != "atomic_lat" && len(perfRows(sout)) == 0) {
				t.Errorf("no report rows")
			}
			// Each side prints the other's QP as it learned it.
			for _, pair := range [][2]string{{cout, sout}, {sout, cout}} {
				local, remote := qpLine(pair[0], "local"), qpLine(pair[1], "remote")
				if local == "" || local != remote {
					t.Errorf("local address %q printed as the peer's %q", local, remote)
				}
			}
			if slices.Contains(tc.more, "-H") {
				// -U's 199 samples, then -H's 197, on each side.
				for _, out := range []string{cout, sout} {
					if n := strings.Count(out, "#, usec\n"); n != 2 || !strings.Contains(out, "\n199, ") || !strings.Contains(out, "\n197, ") {
						t.Errorf("-H -U printed %d sample lists:\n%s", n, out)
					}
				}
			}
			cm, other := cmFrames(t, capture)
			if other == 0 || (tc.cm >= 0 && cm != tc.cm) || (tc.cm < 0 && cm == 0) || (tc.cmMax > 0 && cm > tc.cmMax) {
				t.Errorf("capture: %d IB CM frames, %d others; want %d CM frames (-1: some)", cm, other, tc.cm)
			}
		})
	}
}

// TestPerfTCPDialsFromTheAdapter: a client that would speak perftest over
// TCP dials from its adapter's address, so that from a thread of another
// network namespace (here the test's own, where the veth's addresses are
// not) nothing leaves: the dial fails with EADDRNOTAVAIL.
func TestPerfTCPDialsFromTheAdapter(t *testing.T) {
	testenv.RequireRoot(t)
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_nonlocal_bind"); err != nil || strings.TrimSpace(string(b)) != "0" {
		// Then the bind would succeed and the SYN leave by this
		// namespace's routes: not a test to run here.
		t.Fatalf("net.ipv4.ip_nonlocal_bind is %q (%v); this test needs 0", b, err)
	}
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	var d *ndkverbs.Device
	if err := p.A.Do(func() (err error) { d, err = ndkverbs.Open(p.A.Link, ndk.Options{}); return err }); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prm := perftest.Params{Verb: perftest.Write, Kind: perftest.BW, Iterations: 5, Port: 18999, Comm: perftest.CommTCP}
	_, err := perftest.RunClient(ctx, prm, &ndkverbs.Connector{Dev: d, Peer: p.B.IPv4}, io.Discard)
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("-comm tcp from the wrong namespace: %v, want EADDRNOTAVAIL", err)
	}
}

// qpLine returns the QPN and PSN of a side's "local" or "remote"
// address line.
func qpLine(out, side string) string {
	for _, l := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(l, " "+side+" address: "); ok {
			f := strings.Fields(rest)
			if len(f) >= 6 {
				return strings.Join(f[2:6], " ")
			}
		}
	}
	return ""
}
