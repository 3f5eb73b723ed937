package main

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestToolInvocations: the rping and perf tools refuse bad flags with a
// message naming what is wrong, before touching any interface.
func TestToolInvocations(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rping", "-dev", "x"}, "exactly one of -s and -c"},
		{[]string{"rping", "-s", "-c", "-dev", "x"}, "exactly one of -s and -c"},
		{[]string{"rping", "-c", "-dev", "x"}, "needs -a ADDR"},
		{[]string{"rping", "-s"}, "-dev or -daemon is required"},
		{[]string{"rping", "-c", "-a", "non sense!", "-dev", "lo"}, "-a \"non sense!\": not an address"},
		{[]string{"rping", "-s", "-p", "70000", "-dev", "x"}, "not a port"},
		{[]string{"perf", "bogus_bw", "-dev", "x"}, "unknown test"},
		{[]string{"perf", "write_bw"}, "-dev or -daemon is required"},
		{[]string{"perf", "write_bw", "1.2.3.4", "5.6.7.8", "-dev", "x"}, "unexpected arguments"},
		{[]string{"perf", "write_bw", "not an address!", "-dev", "lo"}, "server address"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// runBoth runs the server command in namespace B and, once it listens,
// the client command in namespace A.
func runBoth(t testing.TB, p *harness.Pair, server, client []string) (string, string) {
	t.Helper()
	return runIn(t, p.B, server, p.A, client)
}

// runIn runs the server command in srvNS and, once it listens, the client
// command in cliNS.
func runIn(t testing.TB, srvNS *harness.Host, server []string, cliNS *harness.Host, client []string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sout, serr, cout, cerr bytes.Buffer
	var srvErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srvErr = srvNS.Do(func() error { return run(ctx, server, &sout, &serr) })
	}()
	// The client retries nothing for rping: give the server time to listen.
	time.Sleep(300 * time.Millisecond)
	cliErr := cliNS.Do(func() error { return run(ctx, client, &cout, &cerr) })
	if cliErr != nil {
		cancel()
	}
	wg.Wait()
	if cliErr != nil || srvErr != nil {
		t.Fatalf("client: %v\n%s%s\nserver: %v\n%s%s", cliErr, cout.String(), cerr.String(), srvErr, sout.String(), serr.String())
	}
	return cout.String(), sout.String()
}

// TestRpingAndPerfCommands runs `ndkxdp rping` and `ndkxdp perf` as
// server and client on the two ends of a veth pair, over IB CM.
func TestRpingAndPerfCommands(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srvAddr := p.B.IPv4.String()
	t.Run("rping", func(t *testing.T) {
		capture := filepath.Join(t.TempDir(), "rping.pcap")
		cout, _ := runBoth(t, p,
			[]string{"rping", "-s", "-a", srvAddr, "-C", "10", "-S", "100", "-dev", p.B.Link},
			[]string{"rping", "-c", "-a", srvAddr, "-C", "10", "-S", "100", "-V", "-v", "-capture", capture, "-dev", p.A.Link})
		if n := strings.Count(cout, "ping data: rdma-ping-"); n != 10 {
			t.Fatalf("client printed %d pings, want 10:\n%s", n, cout)
		}
		// The client's capture: its REQ, 10 pings' READs, WRITEs and
		// SENDs, and their answers, each a valid RoCEv2 frame.
		f, err := pcapfile.ReadFile(capture)
		if err != nil {
			t.Fatal(err)
		}
		ops := map[rocev2.Opcode]int{}
		var pkt rocev2.Packet
		for _, r := range f.Packets {
			if err := rocev2.Parse(r.Data, &pkt); err != nil {
				t.Fatalf("captured frame %d: %v", r.Index, err)
			}
			ops[pkt.BTH.Opcode]++
		}
		if ops[rocev2.RCReadRequest] < 10 || ops[rocev2.UDSendOnly] == 0 {
			t.Errorf("rping -capture holds %v, want 10 READ requests (the server's) and CM MADs", ops)
		}
	})
	// A real NIC's options on veth: every queue, copy mode (veth has no
	// AF_XDP zero-copy), generic XDP and busy polling.
	t.Run("rping with NIC options", func(t *testing.T) {
		nic := []string{"-queues", "all", "-zero-copy", "off", "-xdp-mode", "generic", "-busy-poll", "20us"}
		cout, _ := runBoth(t, p,
			append([]string{"rping", "-s", "-a", srvAddr, "-C", "5", "-dev", p.B.Link}, nic...),
			append([]string{"rping", "-c", "-a", srvAddr, "-C", "5", "-V", "-v", "-dev", p.A.Link}, nic...))
		if n := strings.Count(cout, "ping data: rdma-ping-"); n != 5 {
			t.Fatalf("client printed %d pings, want 5:\n%s", n, cout)
		}
	})
	for _, test := range []string{"write_bw", "read_lat", "atomic_bw", "atomic_lat"} {
		t.Run(test, func(t *testing.T) {
			cout, sout := runBoth(t, p,
				[]string{"perf", test, "-n", "50", "-dev", p.B.Link},
				[]string{"perf", test, "-n", "50", srvAddr, "-dev", p.A.Link})
			want := "BW average"
			if strings.HasSuffix(test, "_lat") {
				want = "t_typical"
			}
			if !strings.Contains(cout, want) {
				t.Fatalf("client report lacks %q:\n%s\nserver:\n%s", want, cout, sout)
			}
			t.Logf("client:\n%s", cout)
		})
	}
	// --write_with_imm: the server's row comes from its receives, which
	// only the client's WRITEs with immediate complete.
	t.Run("write_bw_write_with_imm", func(t *testing.T) {
		cout, sout := runBoth(t, p,
			[]string{"perf", "write_bw", "-n", "50", "-s", "4096", "--write_with_imm", "-dev", p.B.Link},
			[]string{"perf", "write_bw", "-n", "50", "-s", "4096", "--write_with_imm", srvAddr, "-dev", p.A.Link})
		for _, out := range []string{cout, sout} {
			if !strings.Contains(out, "RDMA WRITE with immediate") || !regexp.MustCompile(`(?m)^\s*4096\s+50\s`).MatchString(out) {
				t.Fatalf("no 4096 x 50 report row of a WRITE with immediate:\n%s", out)
			}
		}
	})
	t.Run("write_lat_write_with_imm", func(t *testing.T) {
		cout, sout := runBoth(t, p,
			[]string{"perf", "write_lat", "-n", "50", "--write_with_imm", "-dev", p.B.Link},
			[]string{"perf", "write_lat", "-n", "50", "--write_with_imm", srvAddr, "-dev", p.A.Link})
		for _, out := range []string{cout, sout} {
			if !strings.Contains(out, "RDMA WRITE with immediate") || !strings.Contains(out, "t_typical") {
				t.Fatalf("no latency report of a WRITE with immediate:\n%s", out)
			}
		}
	})
	// --use-srq (perftest's spelling, and -use_srq): the server receives
	// through an SRQ, as it says, and both sides print their rows.
	t.Run("send_bw_use_srq", func(t *testing.T) {
		cout, sout := runBoth(t, p,
			[]string{"perf", "send_bw", "-n", "50", "-s", "4096", "--use-srq", "-dev", p.B.Link},
			[]string{"perf", "send_bw", "-n", "50", "-s", "4096", "-use_srq", srvAddr, "-dev", p.A.Link})
		if !strings.Contains(sout, "receives through a shared receive queue") {
			t.Fatalf("the server does not say it receives through an SRQ:\n%s", sout)
		}
		for _, out := range []string{cout, sout} {
			if !strings.Contains(out, "BW average") || !regexp.MustCompile(`(?m)^\s*4096\s+50\s`).MatchString(out) {
				t.Fatalf("no 4096 x 50 report row:\n%s", out)
			}
		}
	})
}

// TestRpingPersistentServerAndDebug: rping's -P keeps the server serving
// one client after another, and -d prints each step; -P on a client is a
// bad command line.
func TestRpingPersistentServerAndDebug(t *testing.T) {
	if _, err := parseRping([]string{"-c", "-P", "-a", "198.18.0.1", "-dev", "lo"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-P is a server's") {
		t.Errorf("-P on a client: %v", err)
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sout, serr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- p.B.Do(func() error {
			return run(ctx, []string{"rping", "-s", "-P", "-d", "-a", srv, "-p", "7191", "-dev", p.B.Link}, &sout, &serr)
		})
	}()
	time.Sleep(300 * time.Millisecond)
	for i := range 2 {
		var cout, cerr bytes.Buffer
		if err := p.A.Do(func() error {
			return run(ctx, []string{"rping", "-c", "-a", srv, "-p", "7191", "-C", "3", "-dev", p.A.Link}, &cout, &cerr)
		}); err != nil {
			t.Fatalf("client %d: %v\n%s", i, err, cerr.String())
		}
	}
	cancel()
	<-done
	if n := strings.Count(serr.String(), "rping: 3 pings"); n != 2 {
		t.Errorf("the -P server reported %d clients of 3 pings, want 2:\n%s", n, serr.String())
	}
	if !strings.Contains(serr.String(), "rping: ") || !strings.Contains(serr.String(), "\nrping: ") {
		t.Errorf("-d printed no steps:\n%s", serr.String())
	}
}

// TestRpingSourceAndTOS: rping's -I (a client's source address), -t
// (type of service) and -q (its own QP) are taken: the client connects
// from -I, its frames and REQ carry -t's TOS byte, and the server, whose
// adapter sends 0, answers on the connection with the REQ's. -I on a
// server, an address not of the interface, -t through a daemon or out of
// range are refused.
func TestRpingSourceAndTOS(t *testing.T) {
	for _, args := range [][]string{
		{"-s", "-I", "198.18.0.1"},
		{"-c", "-a", "198.18.0.2", "-t", "256"},
		{"-c", "-a", "198.18.0.2", "-t", "7"},
		{"-c", "-a", "198.18.0.2", "-t", "8", "-daemon", "/nonexistent"},
	} {
		if _, err := parseRping(append(args, "-dev", "lo"), io.Discard, io.Discard); err == nil {
			t.Errorf("rping %q accepted", args)
		}
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	if err := p.A.Do(func() error {
		return run(context.Background(), []string{"rping", "-c", "-a", srv, "-I", "198.18.99.1", "-C", "1", "-dev", p.A.Link}, io.Discard, io.Discard)
	}); err == nil || !strings.Contains(err.Error(), "198.18.99.1") {
		t.Errorf("-I of an address the interface lacks: %v", err)
	}
	capture := filepath.Join(t.TempDir(), "client.pcap")
	runBoth(t, p,
		[]string{"rping", "-s", "-a", srv, "-C", "5", "-dev", p.B.Link},
		[]string{"rping", "-c", "-a", srv, "-C", "5", "-V", "-q", "-I", p.A.IPv4.String(), "-t", "184", "-capture", capture, "-dev", p.A.Link})
	c, err := pcapfile.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	tos, srcs := map[uint8]int{}, map[netip.Addr]int{}
	for _, pk := range c.Packets {
		var pkt rocev2.Packet
		if rocev2.Parse(pk.Data, &pkt) == nil && pkt.BTH.DestQP != rocev2.GSIQP {
			tos[pkt.IP.TOS]++
			srcs[pkt.IP.Src]++
		}
	}
	if len(tos) != 1 || tos[184] == 0 {
		t.Errorf("RC frames of the connection carried TOS %v, want only 184 (DSCP 46)", tos)
	}
	if len(srcs) != 2 || srcs[p.A.IPv4] == 0 || srcs[p.B.IPv4] == 0 {
		t.Errorf("RC frames came from %v, want the client's -I and the server", srcs)
	}
}
