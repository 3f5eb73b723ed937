package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/udaddy"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestUdaddyFlags: udaddy's flags parse to the run they mean, and bad
// ones are usage errors naming what is wrong.
func TestUdaddyFlags(t *testing.T) {
	f, err := parseUdaddy([]string{"-s", "198.18.0.2", "-C", "20", "-S", "512", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.dst != "198.18.0.2" || f.cfg.Count != 20 || f.cfg.Size != 512 || f.port != udaddy.DefaultPort {
		t.Fatalf("parsed %+v, %v", f, err)
	}
	// udaddy.c's -f, -P and its old -p (a port space, not a port).
	if _, err := parseUdaddy([]string{"-f", "ip", "-P", "udp", "-p", "0x111", "-dev", "lo"}, io.Discard, io.Discard); err != nil {
		t.Errorf("-f ip -P udp -p 0x111: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-C", "0", "-dev", "lo"}, "must be positive"},
		{[]string{"-port", "70000", "-dev", "lo"}, "not a port"},
		{[]string{"-s", "198.18.0.2"}, "-dev or -daemon is required"},
		{[]string{"-s", "198.18.0.2", "-dev", "lo", "-daemon", "/tmp/x.sock"}, "give one of -dev and -daemon"},
		{[]string{"-dev", "nosuchif0"}, "no such network interface"},
		{[]string{"-P", "ipoib", "-dev", "lo"}, "UDP port space only"},
		{[]string{"-p", "0x2", "-dev", "lo"}, "UDP port space only"},
		{[]string{"-f", "gid", "-dev", "lo"}, "a gid is InfiniBand's"},
	} {
		_, err := parseUdaddy(tc.args, io.Discard, io.Discard)
		var ue *cmdline.UsageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error naming %q", tc.args, err, tc.want)
		}
	}
}

// TestUdaddyTOS: udaddy's -t gives the client's datagrams its TOS byte,
// which the server's answers take; -t out of range, with CE's ECN bits
// or through a daemon is refused.
func TestUdaddyTOS(t *testing.T) {
	for _, args := range [][]string{{"-t", "256"}, {"-t", "3"}, {"-t", "8", "-daemon", "/nonexistent"}} {
		var ue *cmdline.UsageError
		if _, err := parseUdaddy(append(args, "-dev", "lo"), io.Discard, io.Discard); !errors.As(err, &ue) {
			t.Errorf("udaddy %q: %v, want a usage error", args, err)
		}
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	b := p.B.IPv4.String()
	capture := filepath.Join(t.TempDir(), "client.pcap")
	runIn(t, p.B, []string{"udaddy", "-b", b, "-C", "5", "-dev", p.B.Link},
		p.A, []string{"udaddy", "-s", b, "-C", "5", "-t", "106", "-capture", capture, "-dev", p.A.Link})
	c, err := pcapfile.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	tos := map[netip.Addr]map[uint8]int{}
	for _, pk := range c.Packets {
		var pkt rocev2.Packet
		if rocev2.Parse(pk.Data, &pkt) != nil || pkt.BTH.DestQP == rocev2.GSIQP {
			continue
		}
		if tos[pkt.IP.Src] == nil {
			tos[pkt.IP.Src] = map[uint8]int{}
		}
		tos[pkt.IP.Src][pkt.IP.TOS]++
	}
	t.Logf("datagrams' TOS by source: %v", tos)
	if c := tos[p.A.IPv4]; len(c) != 1 || c[106] != 5 {
		t.Errorf("the client's datagrams carried TOS %v, want 106 on all 5", c)
	}
	// The server answers where the first datagram came from, with its
	// TOS (ibv_create_ah_from_wc's address handle: ndk.UDReplyTo).
	if c := tos[p.B.IPv4]; len(c) != 1 || c[106] != 5 {
		t.Errorf("the server's answers carried TOS %v, want the request's 106 on all 5", c)
	}
}

// TestUdaddyConnections: with -c 3 the client resolves the server from
// three UD QPs, each sending -C datagrams and receiving -C answers; the
// server answers each of the three senders. Both print udaddy's lines
// and count 3 x -C each way.
func TestUdaddyConnections(t *testing.T) {
	for _, args := range [][]string{{"-c", "0"}, {"-c", "65"}} {
		if _, err := parseUdaddy(append(args, "-dev", "lo"), io.Discard, io.Discard); err == nil {
			t.Errorf("udaddy %q accepted", args)
		}
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	b := p.B.IPv4.String()
	var sout, cout, serr, cerr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.B.Do(func() error {
			return run(ctx, []string{"udaddy", "-b", b, "-c", "3", "-C", "7", "-dev", p.B.Link}, &sout, &serr)
		})
	}()
	time.Sleep(300 * time.Millisecond)
	cliErr := p.A.Do(func() error {
		return run(ctx, []string{"udaddy", "-s", b, "-c", "3", "-C", "7", "-dev", p.A.Link}, &cout, &cerr)
	})
	srvErr := <-done
	if cliErr != nil || srvErr != nil {
		t.Fatalf("client %v:\n%s%s\nserver %v:\n%s%s", cliErr, cout.String(), cerr.String(), srvErr, sout.String(), serr.String())
	}
	for _, e := range []string{cerr.String(), serr.String()} {
		if !strings.Contains(e, "udaddy: 21 datagrams sent, 21 received") {
			t.Errorf("counts: %q, want 21 each way", e)
		}
	}
	if !strings.HasSuffix(cout.String(), "data transfers complete\ntest complete\n") || !strings.HasSuffix(sout.String(), "data transfers complete\ntest complete\n") {
		t.Errorf("lines:\n%s\n%s", cout.String(), sout.String())
	}
}
