package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// The lines cmatose.c prints, in order, on each side.
const (
	ucmatoseServerLines = "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	ucmatoseClientLines = "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
)

// TestUcmatose runs ucmatose as server and client over a veth pair (one
// connection of cmatose.c's defaults, four of 50 4 KiB messages, none
// with -C 0) and with the client through a daemon: each side prints
// cmatose.c's lines and status 0. Flags ndkxdp cannot honour are refused.
func TestUcmatose(t *testing.T) {
	for _, args := range [][]string{{"-P", "ib"}, {"-f", "gid"}, {"-c", "0"}, {"-C", "5000"}, {"-S", "-1"}, {"-a", "40"}} {
		if _, err := parseUcmatose(append(args, "-dev", "lo"), io.Discard, io.Discard); err == nil {
			t.Errorf("ucmatose %q accepted", args)
		}
	}
	if _, err := parseUcmatose([]string{"-a", "18", "-m", "-f", "ip", "-P", "tcp", "-dev", "lo"}, io.Discard, io.Discard); err != nil {
		t.Errorf("-a 18 -m -f ip -P tcp: %v", err)
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	for _, tc := range []struct {
		name   string
		extra  []string
		daemon bool
	}{
		{"defaults", nil, false},
		{"c4_C50_S4096", []string{"-c", "4", "-C", "50", "-S", "4096"}, false},
		{"C0", []string{"-C", "0"}, false},
		{"daemon_client", []string{"-c", "2", "-S", "1000"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := []string{"ucmatose", "-dev", p.A.Link}
			if tc.daemon {
				client = []string{"ucmatose", "-daemon", serveDaemonOn(t, p.A)}
			}
			cout, sout := runIn(t, p.B, append([]string{"ucmatose", "-dev", p.B.Link}, tc.extra...),
				p.A, append(append(client, tc.extra...), "-s", srv))
			wantS, wantC := ucmatoseServerLines, ucmatoseClientLines
			if tc.name == "C0" {
				wantS = "cmatose: starting server\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
				wantC = "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n"
			}
			if sout != wantS || cout != wantC {
				t.Fatalf("server printed:\n%s\nclient printed:\n%s\nwant:\n%s\n%s", sout, cout, wantS, wantC)
			}
		})
	}
}

// TestRdmaServerClient runs rdma_server and rdma_client over a veth pair
// (and the client through a daemon): each prints the examples' start and
// "end 0" lines. rdma_client without -s is refused.
func TestRdmaServerClient(t *testing.T) {
	if _, err := parseRdmaEcho("rdma_client", []string{"-dev", "lo"}, io.Discard, io.Discard); err == nil {
		t.Errorf("rdma_client without -s accepted")
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	for _, daemon := range []bool{false, true} {
		t.Run(fmt.Sprintf("daemon_client_%v", daemon), func(t *testing.T) {
			client := []string{"rdma_client", "-dev", p.A.Link}
			if daemon {
				client = []string{"rdma_client", "-daemon", serveDaemonOn(t, p.A)}
			}
			cout, sout := runIn(t, p.B, []string{"rdma_server", "-dev", p.B.Link, "-p", "7472"},
				p.A, append(client, "-s", p.B.IPv4.String(), "-p", "7472"))
			if sout != "rdma_server: start\nrdma_server: end 0\n" || cout != "rdma_client: start\nrdma_client: end 0\n" {
				t.Fatalf("server printed %q, client %q", sout, cout)
			}
		})
	}
}

// TestRdmaXServerClient runs rdma_xserver and rdma_xclient (RC, their
// default) over a veth pair: each prints the examples' start and "end 0"
// lines, and the client's capture holds its one 16-byte SEND and no SEND
// of the server's. XRC (-c x) is refused, naming it.
func TestRdmaXServerClient(t *testing.T) {
	for _, args := range [][]string{{"-c", "x"}, {"-c", "q"}} {
		if _, err := parseRdmaEcho("rdma_xserver", append(args, "-dev", "lo"), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "XRC") {
			t.Errorf("rdma_xserver %v: %v, want a refusal naming XRC", args, err)
		}
	}
	if _, err := parseRdmaEcho("rdma_xclient", []string{"-c", "r", "-s", "198.18.0.1", "-dev", "lo"}, io.Discard, io.Discard); err != nil {
		t.Errorf("rdma_xclient -c r: %v", err)
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	capture := filepath.Join(t.TempDir(), "xclient.pcap")
	cout, sout := runIn(t, p.B, []string{"rdma_xserver", "-dev", p.B.Link},
		p.A, []string{"rdma_xclient", "-s", p.B.IPv4.String(), "-capture", capture, "-dev", p.A.Link})
	if sout != "rdma_xserver: start\nrdma_xserver: end 0\n" || cout != "rdma_xclient: start\nrdma_xclient: end 0\n" {
		t.Fatalf("server printed %q, client %q", sout, cout)
	}
	c, err := pcapfile.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	sends := map[bool]int{} // by: from the client
	for _, pk := range c.Packets {
		var pkt rocev2.Packet
		if rocev2.Parse(pk.Data, &pkt) != nil || pkt.BTH.Opcode != rocev2.RCSendOnly {
			continue
		}
		sends[pkt.IP.Src == p.A.IPv4]++
		if len(pkt.Payload) != 16 {
			t.Errorf("a SEND of %d bytes, want 16", len(pkt.Payload))
		}
	}
	if sends[true] != 1 || sends[false] != 0 {
		t.Fatalf("SENDs: %d from the client, %d from the server; want 1 and 0", sends[true], sends[false])
	}
}
