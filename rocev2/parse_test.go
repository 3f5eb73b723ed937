package rocev2

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// testHeaders returns headers for opcode with every extended header filled.
func testHeaders(op Opcode, v6, vlan bool) *Headers {
	h := &Headers{
		Eth:  EthernetFields{Dst: MAC{2, 0, 0, 0, 0, 2}, Src: MAC{2, 0, 0, 0, 0, 1}},
		IP:   NewIPFields(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")),
		UDP:  UDPFields{SrcPort: UDPSourcePort(0, 0x11, 0x12)},
		BTH:  BTHFields{Opcode: op, PKey: DefaultPKey, DestQP: 0x12, AckReq: true, PSN: 0xFFFFFE},
		DETH: DETHFields{QKey: GSIQKey, SrcQP: 1}, FETH: FETHFields{Bits: 0x21},
		RETH:         RETHFields{VA: 0x7fee260fb000, RKey: 0x2b8, DMALen: 65536},
		AtomicETH:    AtomicETHFields{VA: 0x1000, RKey: 7, SwapAdd: 1, Compare: 2},
		AETH:         AETHFields{Syndrome: ACKSyndrome(CreditInvalid), MSN: 5},
		AtomicAckETH: AtomicAckETHFields{OrigData: 0x0102030405060708},
		ImmDt:        0xCAFEBABE, IETH: 0x1234,
	}
	if v6 {
		h.IP = NewIPFields(netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"))
		h.IP.FlowLabel = 0x12345
		h.IP.TOS = 0x8A
	}
	if vlan {
		h.Eth.HasVLAN, h.Eth.VLANTCI = true, 3<<13|100
	}
	return h
}

func build(t testing.TB, h *Headers, payload []byte) []byte {
	t.Helper()
	buf := make([]byte, h.FrameLen(len(payload)))
	n, err := h.Encode(buf, payload)
	if err != nil {
		t.Fatalf("encode %v: %v", h.BTH.Opcode, err)
	}
	if n != len(buf) {
		t.Fatalf("encode wrote %d bytes, FrameLen said %d", n, len(buf))
	}
	return buf
}

// reseal recomputes the lengths, IPv4 checksum and ICRC of an untagged IPv4
// frame after a test edited it.
func reseal(f []byte) []byte {
	binary.BigEndian.PutUint16(f[16:], uint16(len(f)-14))
	binary.BigEndian.PutUint16(f[38:], uint16(len(f)-34))
	f[24], f[25] = 0, 0
	binary.BigEndian.PutUint16(f[24:], ^ipv4Checksum(f[14:34]))
	crc, _ := ICRC(f[14:len(f)-4], nil, 0)
	PutICRC(f[len(f)-4:], crc)
	return f
}

func TestParseRejects(t *testing.T) {
	sendOnly := func(n int) []byte { return build(t, testHeaders(RCSendOnly, false, false), make([]byte, n)) }
	edit := func(f []byte, fn func([]byte)) []byte { fn(f); return f }
	withOpcode := func(f []byte, op Opcode) []byte { f[42] = byte(op); return reseal(f) }
	cases := []struct {
		name string
		in   []byte
		want *ParseError
	}{
		{"empty", nil, ErrTruncated},
		{"short Ethernet", sendOnly(8)[:13], ErrTruncated},
		{"short VLAN tag", edit(sendOnly(8)[:16], func(f []byte) { f[12], f[13] = 0x81, 0 }), ErrTruncated},
		{"short IPv4", sendOnly(8)[:30], ErrTruncated},
		{"short IPv6", build(t, testHeaders(RCAck, true, false), nil)[:50], ErrTruncated},
		{"IP length past the frame", sendOnly(8)[:60], ErrTruncated},
		{"ARP", edit(sendOnly(8), func(f []byte) { f[12], f[13] = 0x08, 0x06 }), ErrEtherType},
		{"QinQ", edit(sendOnly(8), func(f []byte) { f[12], f[13] = 0x88, 0xA8 }), ErrEtherType},
		{"IPv4 ethertype, version 6", edit(sendOnly(8), func(f []byte) { f[14] = 0x65 }), ErrIPHeader},
		{"IPv4 options", edit(sendOnly(8), func(f []byte) { f[14] = 0x46 }), ErrIPHeader},
		{"IPv4 total length < 20", edit(sendOnly(8), func(f []byte) { f[16], f[17] = 0, 19 }), ErrIPHeader},
		{"IPv4 fragment", reseal(edit(sendOnly(8), func(f []byte) { f[20] |= 0x20 })), ErrIPHeader},
		{"IPv4 fragment offset", reseal(edit(sendOnly(8), func(f []byte) { f[21] = 1 })), ErrIPHeader},
		{"IPv4 checksum", edit(sendOnly(8), func(f []byte) { f[19] ^= 1 }), ErrIPChecksum},
		{"TCP", reseal(edit(sendOnly(8), func(f []byte) { f[23] = 6 })), ErrNotUDP},
		{"IPv6 extension header", edit(build(t, testHeaders(RCAck, true, false), nil), func(f []byte) { f[20] = 0 }), ErrNotUDP},
		{"port 4792", reseal(edit(sendOnly(8), func(f []byte) { f[37] = 0xB8 })), ErrPort},
		{"UDP length", edit(sendOnly(8), func(f []byte) { f[39]-- }), ErrLengthMismatch},
		{"too short for BTH", reseal(sendOnly(0)[:34+8+8+4]), ErrTruncated},
		{"ICRC", edit(sendOnly(8), func(f []byte) { f[len(f)-5] ^= 0x80 }), ErrICRC},
		{"TVer 1", reseal(edit(sendOnly(8), func(f []byte) { f[43] |= 1 })), ErrBadVersion},
		{"reserved RC opcode 0x15", withOpcode(sendOnly(8), 0x15), ErrUnknownOpcode},
		{"RD opcode", withOpcode(sendOnly(8), 0x44), ErrUnknownOpcode},
		{"UD SEND_FIRST", withOpcode(sendOnly(8), 0x60), ErrUnknownOpcode},
		{"READ_REQUEST without room for RETH", withOpcode(sendOnly(8), RCReadRequest), ErrOpcodeLength},
		{"ACK with payload", withOpcode(sendOnly(8), RCAck), ErrOpcodeLength},
		{"CNP with 8 bytes", withOpcode(sendOnly(8), CNP), ErrOpcodeLength},
		{"ATOMIC_WRITE with 16 bytes", withOpcode(sendOnly(32), RCAtomicWrite), ErrOpcodeLength},
		{"pad on SEND_FIRST", reseal(edit(withOpcode(sendOnly(8), RCSendFirst), func(f []byte) { f[43] |= 0x10 })), ErrBadPadCount},
		{"pad on ACK", reseal(edit(build(t, testHeaders(RCAck, false, false), nil), func(f []byte) { f[43] |= 0x10 })), ErrBadPadCount},
		{"pad beyond payload", reseal(edit(sendOnly(0), func(f []byte) { f[43] |= 0x30 })), ErrBadPadCount},
		{"misaligned payload", reseal(append(sendOnly(4), 0)), ErrBadPadCount},
	}
	for _, c := range cases {
		var p Packet
		err := Parse(c.in, &p)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		if ReasonOf(err) != c.want.Reason {
			t.Errorf("%s: ReasonOf = %v, want %v", c.name, ReasonOf(err), c.want.Reason)
		}
		if err.Error() == "" || err.(*ParseError).Detail == "" {
			t.Errorf("%s: error without detail: %q", c.name, err)
		}
	}
}

func TestReasonStrings(t *testing.T) {
	seen := map[string]bool{}
	for r := ReasonNone; r < numReasons; r++ {
		s := r.String()
		if s == "" || seen[s] {
			t.Errorf("reason %d: duplicate or empty name %q", r, s)
		}
		seen[s] = true
	}
	if numReasons.String() != "unknown reason" {
		t.Errorf("out-of-range reason: %q", numReasons.String())
	}
	if ReasonOf(errors.New("other")) != ReasonNone || ReasonOf(nil) != ReasonNone {
		t.Error("ReasonOf of a foreign error is not ReasonNone")
	}
	wrapped := errors.Join(errors.New("context"), errICRC)
	if ReasonOf(wrapped) != ReasonICRC || !errors.Is(wrapped, ErrICRC) || errors.Is(wrapped, ErrTruncated) {
		t.Error("wrapped ParseError does not match its reason only")
	}
}

// TestTrailer checks that Ethernet padding after the IP datagram is kept out
// of the packet: a 60-byte minimum frame around a short packet still parses.
func TestTrailer(t *testing.T) {
	f := build(t, testHeaders(RCAck, false, false), nil) // 62 bytes: Ethernet, IPv4, UDP, BTH, AETH, ICRC
	padded := append(append([]byte(nil), f...), make([]byte, 70-len(f))...)
	var p Packet
	if err := Parse(padded, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Frame) != len(f) || len(p.Trailer) != 70-len(f) || p.BTH.Opcode != RCAck {
		t.Errorf("frame %d trailer %d", len(p.Frame), len(p.Trailer))
	}
}

// TestParseReusesPacket checks that no field of a previous parse leaks into
// the next one.
func TestParseReusesPacket(t *testing.T) {
	var p Packet
	if err := Parse(build(t, testHeaders(RCWriteOnlyImm, false, true), []byte("abcd")), &p); err != nil {
		t.Fatal(err)
	}
	if err := Parse(build(t, testHeaders(RCSendOnly, false, false), []byte("efgh")), &p); err != nil {
		t.Fatal(err)
	}
	if p.RETH != (RETHFields{}) || p.ImmDt != 0 || p.Eth.HasVLAN || string(p.Payload) != "efgh" {
		t.Errorf("stale fields: %+v", p.Headers)
	}
}
