package rocev2

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// Golden frames from ROCEV2.md section 1.8, Ethernet through ICRC, as
// published (spaces separate header groups).
const (
	goldenCNP = "e41d2dab2bc27cfe90643b32080045c2003c718c4000401191610a0011010a00120100 0012b700280000 " +
		"8100ffff4000011800000000 00000000000000000000000000000000 82fd002a"
	goldenHuaweiACK = "183d5ebf4371183d5ebf51920800450200300000400040112d60c0a84606c0a84604004812b7001c0000 " +
		"1140ffff0000004500000000 06000001 259cc216"
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// checkRebuild asserts that the parsed fields rebuild the frame byte for byte.
func checkRebuild(t *testing.T, name string, p *Packet) {
	t.Helper()
	buf := make([]byte, len(p.Frame)+64)
	n, err := p.Encode(buf, p.Payload)
	if err != nil {
		t.Fatalf("%s: encode: %v", name, err)
	}
	if !bytes.Equal(buf[:n], p.Frame) {
		t.Fatalf("%s: rebuilt\n %x\nwant\n %x", name, buf[:n], p.Frame)
	}
}

func TestGoldenCNP(t *testing.T) {
	frame := mustHex(goldenCNP)
	var p Packet
	if err := Parse(frame, &p); err != nil {
		t.Fatal(err)
	}
	// ConnectX-4 Lx: opcode 0x81, P_Key 0xFFFF, BECN, DestQP 0x118, PSN 0,
	// DSCP 48 with ECT(0), UDP sport 0, 16 zero bytes, ICRC bytes 82 fd 00 2a.
	switch {
	case p.BTH.Opcode != CNP, p.BTH.PKey != 0xFFFF, !p.BTH.BECN, p.BTH.FECN, p.BTH.DestQP != 0x118,
		p.BTH.PSN != 0, p.BTH.AckReq:
		t.Errorf("BTH %+v", p.BTH)
	case p.IP.TOS != 0xC2, p.IP.TOS>>2 != 48, p.UDP.SrcPort != 0, p.UDP.Checksum != 0:
		t.Errorf("IP/UDP %+v %+v", p.IP, p.UDP)
	case !bytes.Equal(p.Payload, make([]byte, 16)):
		t.Errorf("CNP body %x", p.Payload)
	case p.ICRC != 0x2A00FD82:
		t.Errorf("ICRC %#x, want 0x2a00fd82 (wire 82 fd 00 2a)", p.ICRC)
	}
	checkRebuild(t, "CNP", &p)
}

func TestGoldenHuaweiACK(t *testing.T) {
	frame := mustHex(goldenHuaweiACK)
	var p Packet
	if err := Parse(frame, &p); err != nil {
		t.Fatal(err)
	}
	// oferby__proxy/roce.pcap frame 16: ACK with credit code 6 (8 credits),
	// MSN 1, MigReq set, IP ID 0, TOS ECT(0), sport = QPN 72.
	if p.BTH.Opcode != RCAck || !p.BTH.MigReq || p.BTH.DestQP != 0x45 || p.IP.ID != 0 || p.IP.TOS != 0x02 ||
		p.UDP.SrcPort != 72 || p.IP.Src != netip.MustParseAddr("192.168.70.6") {
		t.Errorf("headers %+v", p.Headers)
	}
	s := p.AETH.Syndrome
	if n, ok := s.CreditCode().Credits(); s.Type() != AckTypeACK || s.CreditCode() != 6 || !ok || n != 8 || p.AETH.MSN != 1 {
		t.Errorf("AETH %+v: %v", p.AETH, s)
	}
	if want := GetICRC(mustHex("259cc216")); p.ICRC != want {
		t.Errorf("ICRC %#x, want %#x", p.ICRC, want)
	}
	checkRebuild(t, "Huawei ACK", &p)
}

// TestGoldenCapturedFrames checks the two golden frames ROCEV2.md takes from
// the captures by their ICRC bytes.
func TestGoldenCapturedFrames(t *testing.T) {
	frames := loadCaptures(t)
	find := func(file string, index int) capturedFrame {
		for _, c := range frames {
			if c.file == file && c.index == index {
				return c
			}
		}
		t.Fatalf("%s frame %d not found", file, index)
		return capturedFrame{}
	}

	// rxe RDMA WRITE_ONLY of 18 bytes, so PadCnt 2 (montybeatnik frame 4).
	c := find("montybeatnik__rdma-roce-lab/roce_capture_read-write-ecn.pcap", 4)
	var p Packet
	if err := Parse(c.data, &p); err != nil {
		t.Fatal(err)
	}
	if p.BTH.Opcode != RCWriteOnly || p.BTH.PadCnt != 2 || len(p.Payload) != 18 || p.RETH.DMALen != 18 {
		t.Errorf("%v: %v pad %d payload %d RETH %+v", c, p.BTH.Opcode, p.BTH.PadCnt, len(p.Payload), p.RETH)
	}
	if !bytes.Equal(p.Frame[len(p.Frame)-4:], mustHex("961a4bd6")) {
		t.Errorf("%v: ICRC bytes %x, want 961a4bd6", c, p.Frame[len(p.Frame)-4:])
	}
	checkRebuild(t, c.String(), &p)

	// PcapPlusPlus READ_REQUEST: AckReq, PSN 5557091, RETH VA 0x7fee260fb000,
	// R_Key 0x2b8, length 65536, sport 0xdf94 (older rxe, QPN 0x11).
	c = find("from-hex/pcapplusplus_InfiniBandPacket_read-req.pcap", 1)
	if err := Parse(c.data, &p); err != nil {
		t.Fatal(err)
	}
	want := RETHFields{VA: 0x7fee260fb000, RKey: 0x2b8, DMALen: 65536}
	if p.BTH.Opcode != RCReadRequest || !p.BTH.AckReq || p.BTH.PSN != 5557091 || p.RETH != want || p.UDP.SrcPort != 0xdf94 {
		t.Errorf("%v: BTH %+v RETH %+v sport %#x", c, p.BTH, p.RETH, p.UDP.SrcPort)
	}
	if !bytes.Equal(p.Frame[len(p.Frame)-4:], mustHex("08c6154a")) {
		t.Errorf("%v: ICRC bytes %x, want 08c6154a", c, p.Frame[len(p.Frame)-4:])
	}
	checkRebuild(t, c.String(), &p)
}

// maskedBits returns, per frame offset, the bits the ICRC masks, taken from
// ROCEV2.md 1.8 rather than from the implementation.
func maskedBits(l3 int, v4 bool) map[int]byte {
	m := map[int]byte{}
	var udp int
	if v4 {
		for _, o := range []int{1, 8, 10, 11} { // TOS, TTL, header checksum
			m[l3+o] = 0xFF
		}
		udp = l3 + 20
	} else {
		// Traffic class and flow label (bytes 0-3 become 6F FF FF FF), hop limit.
		m[l3], m[l3+1], m[l3+2], m[l3+3], m[l3+7] = 0x0F, 0xFF, 0xFF, 0xFF, 0xFF
		udp = l3 + 40
	}
	m[udp+6], m[udp+7] = 0xFF, 0xFF // UDP checksum
	m[udp+8+4] = 0xFF               // BTH byte 4
	return m
}

// TestBitFlips flips, one at a time, every bit the ICRC covers in one frame
// of each opcode of each capture (and the golden frames): outside the masked
// fields every flip must fail the ICRC and Parse; inside them the ICRC must
// still match. IPv6 (no capture exists) is covered by a built frame.
func TestBitFlips(t *testing.T) {
	type sample struct {
		name  string
		frame []byte
	}
	samples := []sample{{"golden CNP", mustHex(goldenCNP)}, {"golden Huawei ACK", mustHex(goldenHuaweiACK)}}
	v6 := testHeaders(RCWriteOnlyImm, true, true)
	buf := make([]byte, 512)
	n, err := v6.Encode(buf, []byte("an IPv6 frame with a VLAN tag, padded"))
	if err != nil {
		t.Fatal(err)
	}
	samples = append(samples, sample{"built IPv6+VLAN", buf[:n]})
	// Without captures the built-in samples still run (strict mode fails in loadCaptures).
	if _, err := os.Stat(captureDir); !testing.Short() && (err == nil || testenv.Strict()) {
		seen := map[string]bool{}
		for _, c := range loadCaptures(t) {
			key := c.file + "/" + Opcode(c.data[14+20+8]).String()
			if !seen[key] {
				seen[key] = true
				samples = append(samples, sample{c.String(), c.data})
			}
		}
	}
	flips := 0
	for _, s := range samples {
		var p Packet
		if err := Parse(s.frame, &p); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		f := bytes.Clone(p.Frame)
		icrcOff := len(f) - ICRCLen
		masked := maskedBits(p.L3Offset, p.IP.Is4())
		for i := p.L3Offset; i < len(f); i++ {
			for bit := 0; bit < 8; bit++ {
				f[i] ^= 1 << bit
				crc, err := ICRC(f[p.L3Offset:icrcOff], nil, 0)
				match := err == nil && crc == GetICRC(f[icrcOff:])
				if masked[i]&(1<<bit) != 0 {
					if !match {
						t.Errorf("%s: flipping masked byte %d bit %d changed the ICRC", s.name, i, bit)
					}
				} else {
					if match {
						t.Errorf("%s: flipping byte %d bit %d left the ICRC valid", s.name, i, bit)
					}
					var q Packet
					if Parse(f, &q) == nil {
						t.Errorf("%s: flipping byte %d bit %d still parses", s.name, i, bit)
					}
					flips++
				}
				f[i] ^= 1 << bit
			}
		}
	}
	t.Logf("%d frames, %d covered bit flips all detected", len(samples), flips)
}
