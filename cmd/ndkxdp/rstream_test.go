package main

import (
	"encoding/binary"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// rstreamLine is one of rstream's report lines.
var rstreamLine = regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+$`)

// TestRstreamFlags: rstream's flags, and the refusals of what is not
// served, in words.
func TestRstreamFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-T", "f"}, "fork"},
		{[]string{"-T", "x"}, "test options"},
		{[]string{"-f", "gid"}, "AF_IB"},
		{[]string{"-S", "0"}, "-S 0"},
		{[]string{"-I", "0"}, "positive"},
		{[]string{"-B", "100"}, "2048"},
		{[]string{"-T", "s", "-dev", "lo"}, "kernel TCP"},
		{nil, "-dev or -daemon"},
	} {
		args := tc.args
		if tc.want != "-dev or -daemon" && !strings.Contains(strings.Join(args, " "), "-dev") && !strings.Contains(strings.Join(args, " "), "-T s") {
			args = append(args, "-dev", "lo")
		}
		if _, err := parseRstream(args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rstream %v: %v, want an error naming %q", args, err, tc.want)
		}
	}
	f, err := parseRstream([]string{"-s", "198.18.0.1", "-S", "all", "-T", "verify", "-T", "n", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.cfg.Custom || !f.cfg.AllSizes || !f.cfg.Verify || !f.cfg.Client {
		t.Errorf("-S all -T verify -T n: %+v, %v", f.cfg, err)
	}
	f, err = parseRstream([]string{"-C", "7", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || !f.cfg.Custom || f.cfg.Count != 7 || f.cfg.Size != 1000 || f.cfg.Iterations != 1 {
		t.Errorf("-C 7: %+v, %v; want a custom test of 1 x 7 x 1000 bytes", f.cfg, err)
	}
}

// TestRstreamCustom runs rstream's custom test (-I 2 -C 40 -S 100000,
// data checked) between two ndkxdp adapters over a veth pair, and reads
// the client's capture: every transfer is an RDMA WRITE with immediate
// RS_OP_DATA of at most 64 KiB, the server's credit updates are WRITEs
// with immediate RS_OP_SGL, and each side ends with RS_CTRL_DISCONNECT.
func TestRstreamCustom(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	capture := filepath.Join(t.TempDir(), "rstream.pcap")
	test := []string{"-I", "2", "-C", "40", "-S", "100000", "-T", "v"}
	cout, sout := runIn(t, p.B, append([]string{"rstream", "-dev", p.B.Link}, test...),
		p.A, append([]string{"rstream", "-s", p.B.IPv4.String(), "-capture", capture, "-dev", p.A.Link}, test...))
	for side, out := range map[string]string{"client": cout, "server": sout} {
		m := rstreamLine.FindAllStringSubmatch(out, -1)
		if !strings.HasPrefix(out, "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n") ||
			len(m) != 1 || m[0][1] != "custom" || m[0][2] != "97k" || m[0][3] != "40" || m[0][4] != "2" || m[0][5] != "15m" {
			t.Errorf("%s printed:\n%s", side, out)
		}
	}
	c, err := pcapfile.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[[2]uint32]int{} // by from-client, imm op
	var dataBytes int
	for _, pk := range c.Packets {
		var pkt rocev2.Packet
		if rocev2.Parse(pk.Data, &pkt) != nil {
			continue
		}
		fromClient := pkt.IP.Src == p.A.IPv4
		switch pkt.BTH.Opcode {
		case rocev2.RCWriteOnlyImm, rocev2.RCWriteLastImm:
			imm := pkt.ImmDt
			ops[[2]uint32{b2u(fromClient), imm >> 29}]++
			if imm>>29 == 0 {
				if n := imm & 0x1FFFFFFF; n == 0 || n > 65536 {
					t.Errorf("a data transfer of %d bytes", n)
				} else if fromClient {
					dataBytes += int(n)
				}
			}
			if imm>>29 == 7 && imm&0x1FFFFFFF != 0 {
				t.Errorf("control message %d, want RS_CTRL_DISCONNECT (0)", imm&0x1FFFFFFF)
			}
			if imm>>29 == 4 && pkt.BTH.Opcode == rocev2.RCWriteOnlyImm && len(pkt.Payload) == 16 {
				if l := binary.LittleEndian.Uint32(pkt.Payload[12:]); l != 1<<19 {
					t.Errorf("a buffer offer of %d bytes, want half the 1 MiB receive buffer", l)
				}
			}
		}
	}
	// The client's data: the sync's 16 bytes, then 2 x 40 x 100000.
	if dataBytes != 16+2*40*100000 {
		t.Errorf("the client's data transfers carried %d bytes, want %d", dataBytes, 16+2*40*100000)
	}
	if ops[[2]uint32{0, 4}] == 0 || ops[[2]uint32{1, 4}] == 0 {
		t.Errorf("credit updates (RS_OP_SGL) by side: client %d, server %d; want both", ops[[2]uint32{1, 4}], ops[[2]uint32{0, 4}])
	}
	if ops[[2]uint32{0, 7}] != 1 && ops[[2]uint32{1, 7}] != 1 {
		t.Errorf("RS_CTRL_DISCONNECT: client %d, server %d; want one from a side at least", ops[[2]uint32{1, 7}], ops[[2]uint32{0, 7}])
	}
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// TestRstreamDefault runs rstream's default tests between two ndkxdp
// adapters over a veth pair: two connections, the latency tests on the
// first and the bandwidth tests on the second, each side printing the
// same eight tests with their sizes and counts.
func TestRstreamDefault(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 9000, StaticNeighbours: true})
	cout, sout := runIn(t, p.B, []string{"rstream", "-T", "v", "-dev", p.B.Link},
		p.A, []string{"rstream", "-s", p.B.IPv4.String(), "-T", "v", "-dev", p.A.Link})
	want := [][]string{
		{"64_lat", "64", "1", "100k", "12m"}, {"4k_lat", "4k", "1", "10k", "78m"},
		{"64k_lat", "64k", "1", "1k", "125m"}, {"1m_lat", "1m", "1", "100", "200m"},
		{"64_bw", "64", "100k", "1", "12m"}, {"4k_bw", "4k", "10k", "1", "78m"},
		{"64k_bw", "64k", "1k", "1", "125m"}, {"1m_bw", "1m", "100", "1", "200m"},
	}
	t.Logf("client:\n%s", cout)
	for side, out := range map[string]string{"client": cout, "server": sout} {
		m := rstreamLine.FindAllStringSubmatch(out, -1)
		ok := len(m) == len(want)
		for i := 0; ok && i < len(m); i++ {
			ok = strings.Join(m[i][1:], " ") == strings.Join(want[i], " ")
		}
		if !ok {
			t.Errorf("%s printed:\n%s", side, out)
		}
	}
}

// TestRiostream runs riostream's custom test with its data checked
// between two ndkxdp adapters over a veth pair, then its default tests:
// the transfers are RDMA WRITEs without immediate into the window the
// peer offered with RS_OP_IOMAP_SGL, which the client's capture shows.
func TestRiostream(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	capture := filepath.Join(t.TempDir(), "riostream.pcap")
	test := []string{"-I", "20", "-C", "3", "-S", "70000", "-T", "v"}
	cout, sout := runIn(t, p.B, append([]string{"riostream", "-dev", p.B.Link}, test...),
		p.A, append([]string{"riostream", "-s", p.B.IPv4.String(), "-capture", capture, "-dev", p.A.Link}, test...))
	for side, out := range map[string]string{"client": cout, "server": sout} {
		if m := rstreamLine.FindAllStringSubmatch(out, -1); len(m) != 1 || strings.Join(m[0][1:], " ") != "custom 68k 3 20 8m" {
			t.Errorf("%s printed:\n%s", side, out)
		}
	}
	c, err := pcapfile.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	var direct, iomaps int
	for _, pk := range c.Packets {
		var pkt rocev2.Packet
		if rocev2.Parse(pk.Data, &pkt) != nil || pkt.IP.Src != p.A.IPv4 {
			continue
		}
		switch {
		case pkt.BTH.Opcode == rocev2.RCWriteFirst || pkt.BTH.Opcode == rocev2.RCWriteOnly:
			direct += int(pkt.RETH.DMALen)
		case pkt.BTH.Opcode == rocev2.RCWriteOnlyImm && pkt.ImmDt>>29 == 6:
			iomaps++
			if len(pkt.Payload) != 24 || binary.LittleEndian.Uint32(pkt.Payload[20:]) != 70000 {
				t.Errorf("an iomap offer of %d bytes: %x", len(pkt.Payload), pkt.Payload)
			}
		}
	}
	if direct != 20*3*70000 || iomaps != 1 {
		t.Errorf("the client wrote %d bytes directly, want %d; offered %d windows, want 1", direct, 20*3*70000, iomaps)
	}
}

// TestRstreamSockets: -T s runs rstream's custom test over kernel TCP
// between the namespaces, with no adapter.
func TestRstreamSockets(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	test := []string{"-T", "s", "-T", "v", "-I", "2", "-C", "10", "-S", "30000"}
	cout, sout := runIn(t, p.B, append([]string{"rstream"}, test...), p.A, append([]string{"rstream", "-s", p.B.IPv4.String()}, test...))
	for side, out := range map[string]string{"client": cout, "server": sout} {
		if m := rstreamLine.FindAllStringSubmatch(out, -1); len(m) != 1 || strings.Join(m[0][1:], " ") != "custom 29k 10 2 1.1m" {
			t.Errorf("%s printed:\n%s", side, out)
		}
	}
}

// BenchmarkRstreamVsTCP runs rstream's custom tests over an rsocket
// between two ndkxdp adapters and over kernel TCP (-T s) on the same veth
// pair (MTU 9000), and reports each figure with rsocket's over TCP's: a
// 64-byte ping-pong (usec per transfer, half a round trip) and 64 KiB
// transfers one way then the other (Gb/s).
//
//	go test -run '^$' -bench RstreamVsTCP -benchtime 1x ./cmd/ndkxdp
func BenchmarkRstreamVsTCP(b *testing.B) {
	testenv.RequireRoot(b)
	p := harness.New(b, harness.Config{MTU: 9000, StaticNeighbours: true})
	figure := func(args []string, col int) float64 {
		srv := append([]string{"rstream"}, args...)
		cli := append([]string{"rstream", "-s", p.B.IPv4.String()}, args...)
		if args[0] != "-T" {
			srv, cli = append(srv, "-dev", p.B.Link), append(cli, "-dev", p.A.Link)
		}
		cout, _ := runIn(b, p.B, srv, p.A, cli)
		for _, line := range strings.Split(cout, "\n") {
			if f := strings.Fields(line); len(f) == 8 && f[0] == "custom" {
				v, err := strconv.ParseFloat(f[col], 64)
				if err != nil {
					b.Fatal(err)
				}
				return v
			}
		}
		b.Fatalf("no report line:\n%s", cout)
		return 0
	}
	lat := []string{"-S", "64", "-C", "1", "-I", "20000"}
	bw := []string{"-S", "65536", "-C", "5000"}
	for range b.N {
		rl, tl := figure(lat, 7), figure(append([]string{"-T", "s"}, lat...), 7)
		rb, tb := figure(bw, 6), figure(append([]string{"-T", "s"}, bw...), 6)
		b.ReportMetric(rl, "rsocket-us/xfer")
		b.ReportMetric(tl, "tcp-us/xfer")
		b.ReportMetric(rl/tl, "lat-rsocket/tcp")
		b.ReportMetric(rb, "rsocket-Gb/s")
		b.ReportMetric(tb, "tcp-Gb/s")
		b.ReportMetric(rb/tb, "bw-rsocket/tcp")
	}
}
