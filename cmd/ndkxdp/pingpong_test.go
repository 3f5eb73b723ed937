package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/pingpong"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestPingpongFlags: the C tools' flags parse to the run they mean, the
// host may come anywhere among them, and bad ones are usage errors.
func TestPingpongFlags(t *testing.T) {
	f, err := parsePingpong(pingpong.RC, []string{"-g", "1", "198.18.0.2", "-s", "100", "--iters", "7", "-e", "-c", "-m", "512", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.cfg.Server != "198.18.0.2" || f.cfg.Size != 100 || f.cfg.Iters != 7 || !f.cfg.Events || !f.cfg.Validate ||
		f.cfg.MTU != 512 || f.gidIndex != 1 || f.cfg.Port != pingpong.DefaultPort || f.cfg.RxDepth != pingpong.DefaultRxDepth {
		t.Fatalf("parsed %+v, %v", f, err)
	}
	if f, err := parsePingpong(pingpong.UD, []string{"-dev", "lo"}, io.Discard, io.Discard); err != nil || f.cfg.Size != pingpong.DefaultUDSize || f.gidIndex != -1 || f.cfg.Server != "" {
		t.Fatalf("ud defaults %+v, %v", f, err)
	}
	for _, tc := range []struct {
		mode pingpong.Mode
		args []string
		want string
	}{
		{pingpong.RC, []string{"-m", "1500", "-dev", "lo"}, "-m 1500"},
		{pingpong.UD, []string{"-m", "1024", "-dev", "lo"}, "not defined: -m"},
		{pingpong.RC, []string{"-p", "70000", "-dev", "lo"}, "not a port"},
		{pingpong.RC, []string{"-r", "1", "-dev", "lo"}, "at least 2"},
		{pingpong.RC, []string{"-i", "2", "-dev", "lo"}, "one port"},
		{pingpong.RC, []string{"a", "b", "-dev", "lo"}, "unexpected arguments"},
		{pingpong.RC, []string{"198.18.0.2"}, "-dev or -daemon is required"},
		{pingpong.UD, []string{"-d", "nosuchdev0"}, "no network interface or RDMA device"},
		{pingpong.UC, []string{"-c", "-dev", "lo"}, "not defined: -c"}, // ibv_uc_pingpong has none
	} {
		_, err := parsePingpong(tc.mode, tc.args, io.Discard, io.Discard)
		var ue *cmdline.UsageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error naming %q", tc.args, err, tc.want)
		}
	}
}

// TestPingpongCommands runs `ndkxdp rc_pingpong`, `ud_pingpong` and
// `uc_pingpong` against each other on the two ends of a veth pair, with
// -c (the server checks what the C tools check; uc_pingpong has none),
// polling and on CQ events: both sides print the C tools' lines, each names the other's QP,
// and the byte counts are size * iters * 2.
func TestPingpongCommands(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srvAddr := p.B.IPv4.String()
	line := func(which string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^  ` + which + ` address: +LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x[0-9a-f]{6}[,:] GID (\S+)$`)
	}
	for _, tc := range []struct {
		cmd   string
		iters int
		extra []string
		size  int
	}{
		{"rc_pingpong", 1000, nil, 4096},
		{"rc_pingpong", 200, []string{"-s", "100", "-m", "512", "-e"}, 100},
		{"rc_pingpong", 50, []string{"-s", "65536", "-r", "4"}, 65536},
		{"ud_pingpong", 1000, nil, 1024},
		{"ud_pingpong", 200, []string{"-s", "500", "-e"}, 500},
		{"uc_pingpong", 1000, nil, 4096},
		{"uc_pingpong", 200, []string{"-s", "100", "-m", "512", "-e"}, 100},
	} {
		t.Run(fmt.Sprintf("%s/%dB", tc.cmd, tc.size), func(t *testing.T) {
			common := append([]string{"-g", "1", "-n", fmt.Sprint(tc.iters), "-timeout", "40s"}, tc.extra...)
			if tc.cmd != "uc_pingpong" { // which has no -c
				common = append(common, "-c")
			}
			capture := filepath.Join(t.TempDir(), "client.pcap")
			cout, sout := runIn(t, p.B, append([]string{tc.cmd, "-dev", p.B.Link}, common...),
				p.A, append(append([]string{tc.cmd, "-dev", p.A.Link, "-capture", capture}, common...), srvAddr))
			checkPingpongTransport(t, capture, tc.cmd, 2*tc.iters)
			t.Logf("client:\n%sserver:\n%s", cout, sout)
			for _, side := range []struct{ who, out, me, peer string }{
				{"client", cout, p.A.IPv4.String(), srvAddr},
				{"server", sout, srvAddr, p.A.IPv4.String()},
			} {
				l, r := line("local").FindStringSubmatch(side.out), line("remote").FindStringSubmatch(side.out)
				if l == nil || r == nil || l[2] != "::ffff:"+side.me || r[2] != "::ffff:"+side.peer {
					t.Fatalf("%s's address lines: %q %q", side.who, l, r)
				}
				want := fmt.Sprintf(`(?m)^%d bytes in [\d.]+ seconds = [\d.]+ Mbit/sec\n%d iters in [\d.]+ seconds = [\d.]+ usec/iter$`, tc.size*tc.iters*2, tc.iters)
				if !regexp.MustCompile(want).MatchString(side.out) {
					t.Fatalf("%s printed no result lines for %d x %d bytes", side.who, tc.iters, tc.size)
				}
				if strings.Contains(side.out, "invalid data") {
					t.Fatalf("%s found invalid data", side.who)
				}
			}
			if line("local").FindStringSubmatch(cout)[1] != line("remote").FindStringSubmatch(sout)[1] ||
				line("local").FindStringSubmatch(sout)[1] != line("remote").FindStringSubmatch(cout)[1] {
				t.Fatalf("the sides disagree on their QPNs")
			}
			sep := ","
			if tc.cmd == "ud_pingpong" {
				sep = ":" // ud_pingpong.c:724
			}
			if !strings.Contains(line("local").FindString(cout), sep+" GID") {
				t.Fatalf("%s's local line lacks %q before GID:\n%s", tc.cmd, sep, cout)
			}
		})
	}
	// Without -g the sides swap zero GIDs, as the C tools do, and RoCE
	// cannot address them: the server names the fix.
	t.Run("no_gid", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var sout, serr, cout, cerr bytes.Buffer
		done := make(chan error, 1)
		go func() {
			done <- p.B.Do(func() error {
				return run(ctx, []string{"rc_pingpong", "-dev", p.B.Link, "-p", "18516"}, &sout, &serr)
			})
		}()
		time.Sleep(300 * time.Millisecond)
		cliErr := p.A.Do(func() error {
			return run(ctx, []string{"rc_pingpong", "-dev", p.A.Link, "-p", "18516", "-timeout", "5s", srvAddr}, &cout, &cerr)
		})
		srvErr := <-done
		if srvErr == nil || !strings.Contains(srvErr.Error(), "-g") || cliErr == nil {
			t.Fatalf("server: %v; client: %v", srvErr, cliErr)
		}
		if !strings.Contains(sout.String(), "GID ::\n") {
			t.Fatalf("the server's local line has no zero GID:\n%s", sout.String())
		}
	})
	// -c on the server alone: the client wrote no zeros at its page
	// starts, so the server finds the C tools' 0x7b filler there, says
	// so as they do, and fails.
	t.Run("validate_detects", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var sout, serr, cout, cerr bytes.Buffer
		done := make(chan error, 1)
		go func() {
			done <- p.B.Do(func() error {
				return run(ctx, []string{"rc_pingpong", "-dev", p.B.Link, "-g", "1", "-c", "-n", "10", "-s", "9000", "-p", "18517"}, &sout, &serr)
			})
		}()
		time.Sleep(300 * time.Millisecond)
		cliErr := p.A.Do(func() error {
			return run(ctx, []string{"rc_pingpong", "-dev", p.A.Link, "-g", "1", "-n", "10", "-s", "9000", "-p", "18517", srvAddr}, &cout, &cerr)
		})
		srvErr := <-done
		if cliErr != nil || !errors.Is(srvErr, pingpong.ErrInvalidData) {
			t.Fatalf("client: %v; server: %v, want invalid data", cliErr, srvErr)
		}
		if !strings.Contains(sout.String(), "invalid data in page 0\ninvalid data in page 1\ninvalid data in page 2\n") {
			t.Fatalf("the server did not name pages 0-2:\n%s", sout.String())
		}
	})
	// The UD datagram may not exceed the path MTU: the C tool's words.
	t.Run("ud_size_over_mtu", func(t *testing.T) {
		err := p.A.Do(func() error {
			return run(context.Background(), []string{"ud_pingpong", "-dev", p.A.Link, "-g", "1", "-s", "2048", srvAddr}, io.Discard, io.Discard)
		})
		if err == nil || !strings.Contains(err.Error(), "requested size larger than port MTU (1024)") {
			t.Fatalf("%v", err)
		}
	})
}

// TestPingpongThroughDaemon runs the pingpong tools with -daemon against
// a daemon on A's veth end, the peer attached to B's with -dev, the
// daemon's client as client (RC) and as server (UC; UD on CQ events), with
// -c where the tool has it: -g indexes the daemon's interface, and both sides finish.
func TestPingpongThroughDaemon(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	sock := serveDaemonOn(t, p.A)
	a, b := p.A.IPv4.String(), p.B.IPv4.String()
	finished := func(t *testing.T, out string, size, iters int) {
		t.Helper()
		if !strings.Contains(out, fmt.Sprintf("%d bytes in ", size*iters*2)) || !strings.Contains(out, fmt.Sprintf("%d iters in ", iters)) {
			t.Fatalf("no result lines for %d x %d bytes:\n%s", iters, size, out)
		}
	}
	t.Run("rc_pingpong client through the daemon", func(t *testing.T) {
		cout, sout := runIn(t, p.B, []string{"rc_pingpong", "-g", "1", "-c", "-n", "300", "-dev", p.B.Link},
			p.A, []string{"rc_pingpong", "-g", "1", "-c", "-n", "300", "-daemon", sock, b})
		finished(t, cout, 4096, 300)
		finished(t, sout, 4096, 300)
		if !strings.Contains(cout, "GID ::ffff:"+a) {
			t.Fatalf("the daemon's client does not name its address:\n%s", cout)
		}
	})
	t.Run("uc_pingpong server through the daemon", func(t *testing.T) {
		cout, sout := runIn(t, p.A, []string{"uc_pingpong", "-g", "1", "-n", "300", "-daemon", sock},
			p.B, []string{"uc_pingpong", "-g", "1", "-n", "300", "-dev", p.B.Link, a})
		finished(t, cout, 4096, 300)
		finished(t, sout, 4096, 300)
	})
	t.Run("ud_pingpong server through the daemon", func(t *testing.T) {
		cout, sout := runIn(t, p.A, []string{"ud_pingpong", "-g", "1", "-c", "-e", "-n", "300", "-daemon", sock},
			p.B, []string{"ud_pingpong", "-g", "1", "-c", "-n", "300", "-dev", p.B.Link, a})
		finished(t, cout, 1024, 300)
		finished(t, sout, 1024, 300)
	})
}

// TestSRQPingpong runs srq_pingpong as server and client over a veth
// pair: each side prints one address line per QP, the server's remote
// lines are the client's local ones in order (and the other way), and
// both count -n sends and receives over all QPs. -q above -r is refused
// in the C tool's words.
func TestSRQPingpong(t *testing.T) {
	for _, args := range [][]string{{"-q", "600"}, {"-q", "0"}, {"-q", "8", "-r", "4"}} {
		if _, err := parsePingpong(pingpong.SRQ, append(args, "-dev", "lo"), io.Discard, io.Discard); err == nil {
			t.Errorf("srq_pingpong %q accepted", args)
		}
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srvAddr := p.B.IPv4.String()
	qpns := func(out, which string) []string {
		var q []string
		for _, m := range regexp.MustCompile(`(?m)^  `+which+` address: +LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x[0-9a-f]{6}, GID ::ffff:198\.18\.\S+$`).FindAllStringSubmatch(out, -1) {
			q = append(q, m[1])
		}
		return q
	}
	for _, tc := range []struct {
		qps, iters, size int
		extra            []string
		daemon           bool // the client through a daemon
	}{
		{16, 1000, 4096, nil, false},
		{4, 200, 100, []string{"-q", "4", "-e", "-s", "100", "-r", "16"}, false},
		{8, 300, 1000, []string{"-q", "8", "-s", "1000"}, true},
	} {
		t.Run(fmt.Sprintf("q%d_daemon_%v", tc.qps, tc.daemon), func(t *testing.T) {
			common := append([]string{"-g", "1", "-c", "-n", fmt.Sprint(tc.iters), "-timeout", "40s"}, tc.extra...)
			client := []string{"srq_pingpong", "-dev", p.A.Link}
			if tc.daemon {
				client = []string{"srq_pingpong", "-daemon", serveDaemonOn(t, p.A)}
			}
			cout, sout := runIn(t, p.B, append([]string{"srq_pingpong", "-dev", p.B.Link}, common...),
				p.A, append(append(client, common...), srvAddr))
			t.Logf("client:\n%sserver:\n%s", cout, sout)
			cl, cr, sl, sr := qpns(cout, "local"), qpns(cout, "remote"), qpns(sout, "local"), qpns(sout, "remote")
			if len(cl) != tc.qps || !slices.Equal(cl, sr) || !slices.Equal(sl, cr) {
				t.Fatalf("QPNs: client local %v remote %v, server local %v remote %v; want %d each, crossed", cl, cr, sl, sr, tc.qps)
			}
			want := regexp.MustCompile(fmt.Sprintf(`(?m)^%d bytes in [\d.]+ seconds = [\d.]+ Mbit/sec\n%d iters in [\d.]+ seconds = [\d.]+ usec/iter$`, tc.size*tc.iters*2, tc.iters))
			for _, out := range []string{cout, sout} {
				if !want.MatchString(out) || strings.Contains(out, "invalid data") {
					t.Fatalf("no result lines for %d x %d bytes, or invalid data", tc.iters, tc.size)
				}
			}
		})
	}
}

// checkPingpongTransport reads the client's capture: every frame of the
// pingpong is a SEND of the tool's transport (RC, UD or UC), at least
// sends of them, and a UC pingpong's carry no AckReq and get no ACK.
func checkPingpongTransport(t *testing.T, capture, cmd string, sends int) {
	t.Helper()
	f, err := pcapfile.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]rocev2.Transport{"rc_pingpong": rocev2.TransportRC, "ud_pingpong": rocev2.TransportUD, "uc_pingpong": rocev2.TransportUC}[cmd]
	n := 0
	for _, r := range f.Packets {
		var pkt rocev2.Packet
		if err := rocev2.Parse(r.Data, &pkt); err != nil {
			t.Fatalf("%s captured a frame that does not parse: %v", cmd, err)
		}
		op := pkt.BTH.Opcode
		if op.Transport() != want {
			t.Fatalf("%s: a %v frame, want only %v", cmd, op, want)
		}
		if want == rocev2.TransportUC && pkt.BTH.AckReq {
			t.Fatalf("%s: %v asks for an ACK", cmd, op)
		}
		if op.Info().Response {
			continue // RC's ACKs
		}
		n++
	}
	if n < sends {
		t.Fatalf("%s: %d SENDs captured, want %d", cmd, n, sends)
	}
}
