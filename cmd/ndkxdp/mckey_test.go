package main

import (
	"errors"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestMckeyFlags: mckey's flags parse to the run they mean; what
// InfiniBand alone has, and bad counts, are usage errors naming why.
func TestMckeyFlags(t *testing.T) {
	f, err := parseMckey([]string{"-m", "239.1.2.3", "-s", "-c", "2", "-C", "20", "-S", "512", "-o", "-l", "-p", "0x111", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.group != "239.1.2.3" || !f.cfg.Sender || !f.cfg.SendOnly || !f.cfg.NoLoopback || f.cfg.Connections != 2 || f.cfg.Count != 20 || f.cfg.Size != 512 {
		t.Fatalf("parsed %+v, %v", f, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dev", "lo"}, "the multicast group is needed"},
		{[]string{"-M", "ff12:401b::1", "-b", "198.18.0.1", "-dev", "lo"}, "InfiniBand's"},
		{[]string{"-m", "239.1.1.1", "-p", "0x2", "-dev", "lo"}, "UDP port space only"},
		{[]string{"-m", "239.1.1.1", "-C", "0", "-dev", "lo"}, "must be positive"},
		{[]string{"-m", "239.1.1.1", "-c", "65", "-dev", "lo"}, "1 to 64 connections"},
		{[]string{"-m", "239.1.1.1", "-o", "-dev", "lo"}, "-o without -s"},
		{[]string{"-m", "239.1.1.1"}, "-dev or -daemon is required"},
	} {
		_, err := parseMckey(tc.args, io.Discard, io.Discard)
		var ue *cmdline.UsageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error naming %q", tc.args, err, tc.want)
		}
	}
}

// TestMckeyCommands: `ndkxdp mckey` receivers (one QP, two, and two
// through a daemon) and a
// sender on a veth pair: each receiving QP gets the sender's -C
// datagrams, and the sender's capture holds them as rdma_cm's multicast
// sends them: UD SEND_ONLY with immediate (the sender's QPN) to the group's
// MAC and address, QPN 0xFFFFFF, Q_Key RDMA_UDP_QKEY.
func TestMckeyCommands(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	const group = "239.1.2.3"
	for _, c := range []struct {
		conns  string
		daemon bool
	}{{"1", false}, {"2", false}, {"2", true}} {
		conns := c.conns
		name := "receivers " + conns
		receiver := []string{"-dev", p.B.Link}
		if c.daemon {
			name += " through a daemon"
			receiver = []string{"-daemon", serveDaemonOn(t, p.B)}
		}
		t.Run(name, func(t *testing.T) {
			capture := filepath.Join(t.TempDir(), "sender.pcap")
			cout, sout := runIn(t, p.B, append([]string{"mckey", "-m", group, "-c", conns, "-C", "5", "-S", "200"}, receiver...),
				p.A, []string{"mckey", "-m", group, "-s", "-C", "5", "-S", "200", "-capture", capture, "-dev", p.A.Link})
			for _, want := range []string{"mckey: starting server", "mckey: joined dgid: ::ffff:239.1.2.3 mlid 0x0 sl 0", "receiving data transfers", "data transfers complete", "test complete", "return status 0"} {
				if !strings.Contains(sout, want) {
					t.Errorf("receiver's output lacks %q:\n%s", want, sout)
				}
			}
			if n := strings.Count(sout, "mckey: joined dgid"); n != int(conns[0]-'0') {
				t.Errorf("receiver joined %d times, want %s:\n%s", n, conns, sout)
			}
			for _, want := range []string{"mckey: starting client", "initiating data transfers", "data transfers complete", "return status 0"} {
				if !strings.Contains(cout, want) {
					t.Errorf("sender's output lacks %q:\n%s", want, cout)
				}
			}
			c, err := pcapfile.ReadFile(capture)
			if err != nil {
				t.Fatal(err)
			}
			mac, _ := rocev2.MulticastMAC(netip.MustParseAddr(group))
			sent := 0
			for _, pk := range c.Packets {
				var pkt rocev2.Packet
				if rocev2.Parse(pk.Data, &pkt) != nil || pkt.BTH.DestQP != rocev2.MulticastQPN {
					continue
				}
				sent++
				if pkt.BTH.Opcode != rocev2.UDSendOnlyImm || pkt.Eth.Dst != mac || pkt.IP.Dst.Unmap() != netip.MustParseAddr(group) ||
					pkt.DETH.QKey != 0x01234567 || pkt.ImmDt != pkt.DETH.SrcQP || len(pkt.Payload) != 200 {
					t.Fatalf("datagram %v to %v %v: QKey %#x, imm %#x from QPN %#x, %d bytes", pkt.BTH.Opcode, pkt.Eth.Dst, pkt.IP.Dst, pkt.DETH.QKey, pkt.ImmDt, pkt.DETH.SrcQP, len(pkt.Payload))
				}
			}
			if sent != 5 {
				t.Fatalf("the sender's capture holds %d datagrams to the group, want 5", sent)
			}
		})
	}
}
