package interop

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestTsharkCheckFlagsBrokenFrames shows what the frame check of the
// interop cases catches and what it lets through: a WRITE whose payload
// tshark would guess to be an Ethertype (06 00 00 00) and a 4-byte SEND it
// would guess to be RPC over RDMA pass, as does a CM REQ to QP1; the WRITE
// cut inside its RETH and the REQ cut inside its DETH are flagged. (tshark
// does not flag a MAD cut short after its DETH: the byte-exact MAD checks
// are test/cm's and rocev2's.)
func TestTsharkCheckFlagsBrokenFrames(t *testing.T) {
	tshark := testenv.RequireTool(t, "tshark")
	h := func(op rocev2.Opcode, qp uint32) *rocev2.Headers {
		return &rocev2.Headers{
			Eth:  rocev2.EthernetFields{Dst: rocev2.MAC{2, 0, 0, 0, 0, 2}, Src: rocev2.MAC{2, 0, 0, 0, 0, 1}},
			IP:   rocev2.NewIPFields(netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2")),
			UDP:  rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, 0x11, 0x12)},
			BTH:  rocev2.BTHFields{Opcode: op, PKey: rocev2.DefaultPKey, DestQP: qp, AckReq: true, PSN: 100},
			DETH: rocev2.DETHFields{QKey: rocev2.GSIQKey, SrcQP: 1},
			RETH: rocev2.RETHFields{VA: 0x562d0f51c000, RKey: 0x7303, DMALen: 1},
		}
	}
	frame := func(hd *rocev2.Headers, payload []byte) []byte {
		buf := make([]byte, hd.FrameLen(len(payload)))
		n, err := hd.Encode(buf, payload)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	write := frame(h(rocev2.RCWriteOnly, 0x6e), []byte{6})
	send := frame(h(rocev2.RCSendOnly, 0x6e), []byte{0, 0, 0, 1})
	mad := make([]byte, rocev2.MADLen)
	mad[0], mad[1], mad[2], mad[3] = 1, 7, 2, 3 // base version 1, CM class 7, version 2, Send
	mad[16], mad[17] = 0, 0x10                  // attribute ID: REQ
	req := frame(h(rocev2.UDSendOnly, rocev2.GSIQP), mad)
	// Cut frames keep a valid Ethernet/IP/UDP view of their own length.
	cut := func(f []byte, n int) []byte {
		c := append([]byte(nil), f[:n]...)
		ipLen, udpLen := n-14, n-34
		c[16], c[17] = byte(ipLen>>8), byte(ipLen)
		c[38], c[39] = byte(udpLen>>8), byte(udpLen)
		c[24], c[25] = 0, 0 // IPv4 header checksum is not checked by tshark by default
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(name string, frames ...[]byte) string {
		var fs []Frame
		for _, f := range frames {
			fs = append(fs, Frame{Time: time.Unix(1, 0), Outgoing: true, Data: f})
		}
		path := filepath.Join(t.TempDir(), name+".pcap")
		if err := writePcap(path, fs); err != nil {
			t.Fatal(err)
		}
		lines, err := tsharkMalformed(ctx, tshark, path)
		if err != nil {
			t.Fatal(err)
		}
		return lines
	}
	if lines := check("guesses", write, send, req); lines != "" {
		t.Fatalf("payload guesses are flagged:\n%s", lines)
	}
	for _, tc := range []struct {
		name string
		f    []byte
	}{
		{"write_cut_in_reth", cut(write, 14+20+8+12+8)},
		{"mad_cut_in_deth", cut(req, 14+20+8+12+4)},
	} {
		lines := check(tc.name, tc.f)
		if !strings.HasPrefix(lines, "1\t") {
			t.Errorf("%s: not flagged (tshark said %q)", tc.name, lines)
		}
	}
}

// TestResultRow: the perftest result row is found by size and iterations;
// void measures (inf, -nan, or all zero) pass only with perftest's own
// clock calibration failure in the output that would carry it, or, for a
// -nan t_stdev alone, with the deviation in the row that overflows
// perftest's int arithmetic.
func TestResultRow(t *testing.T) {
	p := perftest.Params{Size: 4096, Iterations: 10}
	const head = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	good := head + " 4096    10          386.04        4675.75      2115.91  	       2013.47     	921.72 		4675.75 		4675.75\n"
	void := head + " 4096    10          inf            inf          inf      	       inf         	-nan   		inf     		inf    \n"
	const bwHead = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	bw := bwHead + " 4096       10               0.00               34.60  \t\t   0.000554\n"
	zero := bwHead + " 4096       10               0.00               0.00  \t\t   0.000000\n"
	warn := "Correlation coefficient r^2: 0.889544 < 0.9\n"
	// Debian 13's rxe client of a 1 MiB ib_read_lat under TCG: samples
	// 25 ms to 115 ms apart, perftest's squared distance overflows an
	// int (stdevOverflowed).
	stdevNaN := head + " 4096    10          24953.93        115246.80      45997.45  	       53498.25     	-nan   		115246.80 		115246.80\n"
	stdevNaNNarrow := head + " 4096    10          24953.93        71246.80      45997.45  	       53498.25     	-nan   		71246.80 		71246.80\n"
	for _, tc := range []struct {
		name         string
		out, calib   string
		ok, uncalibr bool
	}{
		{"measured", good, good, true, false},
		{"uncalibrated", void + warn, void + warn, true, true},
		{"inf without the warning", void, void, false, false},
		{"no peak, an average", bw, bw, true, false},
		{"zero bandwidth without the warning", zero, zero, false, false},
		{"zero bandwidth, the warning elsewhere", zero, warn, true, true},
		{"header only", head, head, false, false},
		{"stdev overflowed by a 2.2 s outlier", head + " 4096    10          28183.84        2221601.19      31440.26  	       346488.07     	-nan   		2221601.19 		2221601.19\n", "", true, false},
		{"stdev -nan with every deviation under 46 ms", strings.Replace(good, "921.72", "-nan", 1), good, false, false},
		{"stdev -nan beside another void measure", head + " 4096    10          28183.84        inf      31440.26  	       346488.07     	-nan   		2221601.19 		2221601.19\n", "", false, false},
		{"other size", strings.Replace(good, " 4096 ", " 4095 ", 1), good, false, false},
		{"other iterations", strings.Replace(good, "    10    ", "    11    ", 1), good, false, false},
		{"t_stdev overflowed", stdevNaN, stdevNaN, true, false},
		{"t_stdev void, spread too small", stdevNaNNarrow, stdevNaNNarrow, false, false},
		{"t_stdev and t_avg void", strings.Replace(stdevNaN, "53498.25", "-nan", 1), stdevNaN, false, false},
	} {
		row, uncal, err := resultRow(tc.out, tc.calib, p)
		if (err == nil) != tc.ok || uncal != tc.uncalibr {
			t.Errorf("%s: row %v uncalibrated %v err %v; want ok %v uncalibrated %v", tc.name, row, uncal, err, tc.ok, tc.uncalibr)
		}
	}
	// ib_atomic_bw has no size option: its rows are 8 bytes.
	atomic := bwHead + " 8          20               0.01               0.01   \t\t   0.000764\n"
	if _, _, err := resultRow(atomic, atomic, perftest.Params{Verb: perftest.Atomic, Iterations: 20}); err != nil {
		t.Errorf("atomic row: %v", err)
	}
}
