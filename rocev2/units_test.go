package rocev2

import (
	"bytes"
	"errors"
	"hash/crc32"
	"net/netip"
	"testing"
	"time"
)

func TestPSN(t *testing.T) {
	const max = PSN(PSNMask)
	if got := max.Add(1); got != 0 {
		t.Errorf("0xFFFFFF+1 = %#x", got)
	}
	if got := max.Add(5); got != 4 {
		t.Errorf("0xFFFFFF+5 = %#x", got)
	}
	if got := max.Next(); got != 0 {
		t.Errorf("Next(0xFFFFFF) = %#x", got)
	}
	cases := []struct {
		a, b PSN
		diff int32
	}{
		{5, 5, 0},
		{6, 5, 1},
		{5, 6, -1},
		{0, max, 1},              // wrapped: 0 is after 0xFFFFFF
		{max, 0, -1},             // and 0xFFFFFF before 0
		{1 << 23, 0, -(1 << 23)}, // exactly half a window away counts as before
		{1<<23 - 1, 0, 1<<23 - 1},
		{0, 1<<23 + 1, 1<<23 - 1},
	}
	for _, c := range cases {
		if got := c.a.Diff(c.b); got != c.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", c.a, c.b, got, c.diff)
		}
		want := 0
		if c.diff < 0 {
			want = -1
		} else if c.diff > 0 {
			want = 1
		}
		if got := c.a.Compare(c.b); got != want {
			t.Errorf("%#x.Compare(%#x) = %d, want %d", c.a, c.b, got, want)
		}
		if got := c.a.Less(c.b); got != (want < 0) {
			t.Errorf("%#x.Less(%#x) = %v", c.a, c.b, got)
		}
	}
	if d := PSN(0xFFFFF0).Distance(0x10); d != 0x20 {
		t.Errorf("Distance across wrap = %#x, want 0x20", d)
	}
	if d := PSN(0x10).Distance(0xFFFFF0); d != 0xFFFFE0 {
		t.Errorf("Distance backwards = %#x, want 0xFFFFE0", d)
	}
}

func TestAETH(t *testing.T) {
	// Huawei hardware sent syndromes 0x05 and 0x06: 6 and 8 credits.
	for code, want := range map[Syndrome]uint32{0x05: 6, 0x06: 8, 0x00: 0, 0x1E: 32768} {
		n, ok := code.CreditCode().Credits()
		if code.Type() != AckTypeACK || !ok || n != want {
			t.Errorf("syndrome %#x: type %v credits %d %v, want %d", uint8(code), code.Type(), n, ok, want)
		}
	}
	if _, ok := Syndrome(0x1F).CreditCode().Credits(); ok || ACKSyndrome(CreditInvalid) != 0x1F {
		t.Error("credit code 31 must mean no credit information")
	}
	for i := 1; i < len(creditTable); i++ {
		if creditTable[i] <= creditTable[i-1] {
			t.Fatalf("credit table not increasing at %d", i)
		}
	}
	for n, want := range map[uint32]CreditCode{0: 0, 5: 4, 6: 5, 7: 5, 8: 6, 32768: 30, 1 << 20: 30} {
		if got := CreditCodeFor(n); got != want {
			t.Errorf("CreditCodeFor(%d) = %d, want %d", n, got, want)
		}
	}

	// IB_RNR_TIMER_*: code 0 is the longest, 25 is 61.44 ms (rxe has 61410).
	rnr := map[RNRTimer]uint32{0: 655360, 1: 10, 2: 20, 8: 160, 14: 1280, 24: 40960, 25: 61440, 31: 491520}
	for code, us := range rnr {
		if got := code.Microseconds(); got != us {
			t.Errorf("RNR timer %d = %d us, want %d", code, got, us)
		}
	}
	if RNRTimer(18).Duration() != 5120*time.Microsecond {
		t.Error("RNR timer 18 duration")
	}
	for d, want := range map[time.Duration]RNRTimer{
		0: 1, 10 * time.Microsecond: 1, 11 * time.Microsecond: 2, time.Millisecond: 14,
		61 * time.Millisecond: 25, 500 * time.Millisecond: 0, time.Second: 0,
	} {
		if got := RNRTimerFor(d); got != want {
			t.Errorf("RNRTimerFor(%v) = %d, want %d", d, got, want)
		}
	}
	if s := RNRNAKSyndrome(14); s != 0x2E || s.Type() != AckTypeRNRNAK || s.RNRTimer() != 14 {
		t.Errorf("RNR NAK syndrome %#x", uint8(s))
	}

	naks := map[NAKCode]Syndrome{
		NAKPSNSequenceError: 0x60, NAKInvalidRequest: 0x61, NAKRemoteAccessError: 0x62,
		NAKRemoteOperationalError: 0x63, NAKInvalidRDRequest: 0x64,
	}
	names := map[string]bool{}
	for code, syn := range naks {
		s := NAKSyndrome(code)
		if s != syn || s.Type() != AckTypeNAK || s.NAKCode() != code {
			t.Errorf("NAK %v: syndrome %#x, want %#x", code, uint8(s), uint8(syn))
		}
		names[code.String()] = true
	}
	if len(names) != len(naks) || NAKCode(9).String() != "reserved NAK code 9" {
		t.Errorf("NAK names %v", names)
	}
	if Syndrome(0x40).Type() != AckTypeReserved || Syndrome(0x60).String() != "NAK PSN sequence error" {
		t.Errorf("syndrome strings: %v, %v", Syndrome(0x40), Syndrome(0x60))
	}
}

func TestUDPSourcePort(t *testing.T) {
	cases := []struct {
		fl, lqpn, rqpn uint32
		want           uint16
	}{
		// 0x11*0x12 = 0x132: no high bits to fold, so 0xC000|0x132.
		{0, 0x11, 0x12, 0xC132},
		// 0xABCDEF*0x123456 = 0xC379A59BA4A; v^=v>>20 gives 0xC379A9AC3EF;
		// v^=v>>40 gives ...AC3E3; fl = 0xAC3E3; 0x3E3 ^ (0xAC3E3>>14 = 0x2B)
		// = 0x3C8, so 0xC3C8.
		{0, 0xABCDEF, 0x123456, 0xC3C8},
		// An explicit flow label wins over the QPNs: rping.pcap's REQ carries
		// flow label 461757, and newer rxe sent its RC packets from port 52129.
		{461757, 0x2b, 0x2c, 52129},
	}
	for _, c := range cases {
		if got := UDPSourcePort(c.fl, c.lqpn, c.rqpn); got != c.want {
			t.Errorf("UDPSourcePort(%d, %#x, %#x) = %#x, want %#x", c.fl, c.lqpn, c.rqpn, got, c.want)
		}
	}
	if FlowLabel(0xABCDEF, 0x123456) != 0xAC3E3 {
		t.Errorf("FlowLabel = %#x", FlowLabel(0xABCDEF, 0x123456))
	}
	// cma's flow label for the montybeatnik connection: ports 37847 -> 7471.
	if CMAFlowLabel(37847, 7471) != 132152 {
		t.Errorf("CMAFlowLabel = %d", CMAFlowLabel(37847, 7471))
	}
}

func TestMTU(t *testing.T) {
	for netdev, want := range map[int]MTU{1500: MTU1024, 9000: MTU4096, 4192: MTU4096, 4191: MTU2048, 352: MTU256, 1120: MTU1024, 1119: MTU512} {
		if got, ok := MTUForNetdev(netdev); !ok || got != want {
			t.Errorf("MTUForNetdev(%d) = %v %v, want %v", netdev, got, ok, want)
		}
	}
	if _, ok := MTUForNetdev(351); ok {
		t.Error("MTUForNetdev(351) found an MTU")
	}
	for m, n := range map[MTU]int{MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096, 0: 0, 6: 0} {
		if m.Bytes() != n {
			t.Errorf("%d.Bytes() = %d, want %d", m, m.Bytes(), n)
		}
		if got, ok := MTUFromBytes(n); ok != (n != 0) || (ok && got != m) {
			t.Errorf("MTUFromBytes(%d) = %v %v", n, got, ok)
		}
	}
	if MTU(6).String() != "MTU(6)" || MTU1024.String() != "1024" {
		t.Error("MTU strings")
	}
	for n, pad := range map[int]int{0: 0, 1: 3, 2: 2, 3: 1, 4: 0, 18: 2, 1021: 3} {
		if PadCount(n) != pad {
			t.Errorf("PadCount(%d) = %d, want %d", n, PadCount(n), pad)
		}
	}
}

func TestOpcodeTable(t *testing.T) {
	valid := 0
	for i := 0; i < 256; i++ {
		o := Opcode(i)
		info := o.Info()
		if !info.Valid {
			continue
		}
		valid++
		if info.HeaderLen != info.Headers.Len() {
			t.Errorf("%v: HeaderLen %d != %d", o, info.HeaderLen, info.Headers.Len())
		}
		if info.Padded && (!info.Payload || info.Position&PosLast == 0) {
			t.Errorf("%v: padded but not a last packet with payload", o)
		}
		if o.Transport() == TransportRD || o.Transport() > TransportCNP {
			t.Errorf("%v: transport %v should not be valid", o, o.Transport())
		}
	}
	// 12 SEND/WRITE opcodes for RC and UC, 13 more for RC, 2 UD, CNP.
	if valid != 12+12+13+2+1 {
		t.Errorf("%d valid opcodes", valid)
	}
	cases := []struct {
		op      Opcode
		name    string
		hdr     HeaderSet
		hdrLen  int
		payload bool
		padded  bool
		se      bool
	}{
		{RCSendFirst, "RC_SEND_FIRST", 0, 0, true, false, false},
		{RCSendLastImm, "RC_SEND_LAST_WITH_IMMEDIATE", HasImmDt, 4, true, true, true},
		{RCWriteFirst, "RC_RDMA_WRITE_FIRST", HasRETH, 16, true, false, false},
		{RCWriteLast, "RC_RDMA_WRITE_LAST", 0, 0, true, true, false},
		{RCWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt, 20, true, true, true},
		{RCReadRequest, "RC_RDMA_READ_REQUEST", HasRETH, 16, false, false, false},
		{RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 0, 0, true, false, false},
		{RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", HasAETH, 4, true, true, false},
		{RCAck, "RC_ACKNOWLEDGE", HasAETH, 4, false, false, false},
		{RCAtomicAck, "RC_ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, 12, false, false, false},
		{RCCompareSwap, "RC_COMPARE_SWAP", HasAtomicETH, 28, false, false, false},
		{RCSendOnlyInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", HasIETH, 4, true, true, true},
		{RCFlush, "RC_FLUSH", HasFETH | HasRETH, 20, false, false, false},
		{RCAtomicWrite, "RC_ATOMIC_WRITE", HasRETH, 16, true, false, false},
		{UCWriteOnly, "UC_RDMA_WRITE_ONLY", HasRETH, 16, true, true, false},
		{UDSendOnly, "UD_SEND_ONLY", HasDETH, 8, true, true, true},
		{UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", HasDETH | HasImmDt, 12, true, true, true},
		{CNP, "CNP", 0, 0, true, false, false},
	}
	for _, c := range cases {
		i := c.op.Info()
		if !c.op.Valid() || i.Name != c.name || c.op.String() != c.name || i.Headers != c.hdr || i.HeaderLen != c.hdrLen ||
			i.Payload != c.payload || i.Padded != c.padded || i.SolicitedEvent != c.se {
			t.Errorf("%#x: %+v", uint8(c.op), *i)
		}
	}
	if RCAtomicWrite.Info().FixedPayload != 8 || CNP.Info().FixedPayload != 16 {
		t.Error("fixed payload lengths")
	}
	if !RCReadResponseFirst.Info().Response || !RCAck.Info().Response || RCReadRequest.Info().Response || UCSendOnly.Info().Response {
		t.Error("Response flags")
	}
	if Opcode(0x15).Valid() || Opcode(0x15).String() != "opcode(0x15)" || Opcode(0x2C).Valid() {
		t.Error("reserved opcodes must be invalid")
	}
	if TransportUD.String() != "UD" || Transport(0xA0).String() != "transport(0xa0)" {
		t.Error("transport strings")
	}
}

// referenceICRC is ROCEV2.md 1.8 done the slow, obvious way: copy the
// packet, set the masked fields to ones, prepend eight 0xFF bytes, CRC-32.
func referenceICRC(ipToPad []byte) uint32 {
	c := append(bytes.Repeat([]byte{0xFF}, 8), ipToPad...)
	m := c[8:]
	var udp int
	if m[0]>>4 == 4 {
		m[1], m[8], m[10], m[11] = 0xFF, 0xFF, 0xFF, 0xFF
		udp = 20
	} else {
		m[0] |= 0x0F
		m[1], m[2], m[3], m[7] = 0xFF, 0xFF, 0xFF, 0xFF
		udp = 40
	}
	m[udp+6], m[udp+7], m[udp+8+4] = 0xFF, 0xFF, 0xFF
	return crc32.ChecksumIEEE(c)
}

func TestCRCMasked(t *testing.T) {
	b := make([]byte, 61)
	for i := range b {
		b[i] = byte(i*37 + 11)
	}
	for n := 0; n <= len(b); n++ {
		if got, want := crcMasked(icrcSeed, b[:n]), crc32.Update(icrcSeed, crc32.IEEETable, b[:n]); got != want {
			t.Errorf("%d bytes: %#x, want %#x", n, got, want)
		}
	}
}

func TestICRC(t *testing.T) {
	// The seed is the CRC state after eight 0xFF bytes; its complement is
	// the 0xDEBB20E3 rxe starts from.
	if got := crc32.ChecksumIEEE(bytes.Repeat([]byte{0xFF}, 8)); got != icrcSeed || ^uint32(icrcSeed) != 0xDEBB20E3 {
		t.Fatalf("seed %#x", got)
	}
	for _, v6 := range []bool{false, true} {
		h := testHeaders(RCWriteOnly, v6, v6)
		payload := []byte("eighteen bytes!!!!")[:18]
		f := build(t, h, payload)
		l3, hdrEnd := h.L3Offset(), h.HeaderLen()
		icrcOff := len(f) - 4
		want := referenceICRC(f[l3:icrcOff])
		if GetICRC(f[icrcOff:]) != want {
			t.Errorf("v6=%v: Encode wrote %#x, reference %#x", v6, GetICRC(f[icrcOff:]), want)
		}
		// Split: headers, payload without pad, pad count.
		if got, err := ICRC(f[l3:hdrEnd], payload, PadCount(len(payload))); err != nil || got != want {
			t.Errorf("v6=%v: split ICRC %#x %v, want %#x", v6, got, err, want)
		}
		// Split at the end of the masked part, the minimum header.
		min := l3 + h.IP.Len() + UDPLen + BTHLen
		if got, _ := ICRC(f[l3:min], f[min:icrcOff], 0); got != want {
			t.Errorf("v6=%v: ICRC split after BTH %#x, want %#x", v6, got, want)
		}
	}
	for name, in := range map[string][]byte{"empty": nil, "short": make([]byte, 30), "version 5": append([]byte{0x50}, make([]byte, 60)...)} {
		if _, err := ICRC(in, nil, 0); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := ICRC(append([]byte{0x45}, make([]byte, 38)...), nil, 0); !errors.Is(err, ErrTruncated) {
		t.Errorf("IPv4 without a full BTH: %v", err)
	}
}

// TestBuildParseAllOpcodes builds every opcode over IPv4 and IPv6, with and
// without a VLAN tag, parses it back and compares every field.
func TestBuildParseAllOpcodes(t *testing.T) {
	for i := 0; i < 256; i++ {
		op := Opcode(i)
		info := op.Info()
		if !info.Valid {
			continue
		}
		for _, v6 := range []bool{false, true} {
			for _, vlan := range []bool{false, true} {
				h := testHeaders(op, v6, vlan)
				var payload []byte
				switch {
				case info.FixedPayload != 0:
					payload = bytes.Repeat([]byte{0}, info.FixedPayload)
				case info.Padded:
					payload = []byte("odd-sized payload")
				case info.Payload:
					payload = []byte("a full PMTU, 4-aligned...")[:24]
				}
				f := build(t, h, payload)
				var p Packet
				if err := Parse(f, &p); err != nil {
					t.Fatalf("%v v6=%v vlan=%v: %v", op, v6, vlan, err)
				}
				want := *h
				want.BTH.PadCnt = uint8(PadCount(len(payload)))
				// Parse zeroes the headers the opcode does not carry.
				hs := info.Headers
				if hs&HasDETH == 0 {
					want.DETH = DETHFields{}
				}
				if hs&HasFETH == 0 {
					want.FETH = FETHFields{}
				}
				if hs&HasRETH == 0 {
					want.RETH = RETHFields{}
				}
				if hs&HasAtomicETH == 0 {
					want.AtomicETH = AtomicETHFields{}
				}
				if hs&HasAETH == 0 {
					want.AETH = AETHFields{}
				}
				if hs&HasAtomicAckETH == 0 {
					want.AtomicAckETH = AtomicAckETHFields{}
				}
				if hs&HasImmDt == 0 {
					want.ImmDt = 0
				}
				if hs&HasIETH == 0 {
					want.IETH = 0
				}
				if v6 {
					want.IP.Flags = 0 // IPv6 has no flags
				}
				if p.Headers != want {
					t.Errorf("%v v6=%v vlan=%v:\n got %+v\nwant %+v", op, v6, vlan, p.Headers, want)
				}
				if !bytes.Equal(p.Payload, payload) {
					t.Errorf("%v: payload %q", op, p.Payload)
				}
				if p.PayloadOffset != h.HeaderLen() || p.L3Offset != h.L3Offset() {
					t.Errorf("%v: offsets %d/%d", op, p.PayloadOffset, p.L3Offset)
				}
			}
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	buf := make([]byte, 2048)
	ok := testHeaders(RCSendOnly, false, false)
	cases := []struct {
		name    string
		h       func(h *Headers)
		buf     []byte
		payload []byte
		want    error
	}{
		{"unknown opcode", func(h *Headers) { h.BTH.Opcode = 0x15 }, buf, nil, ErrEncodeOpcode},
		{"mixed families", func(h *Headers) { h.IP.Dst = netip.MustParseAddr("2001:db8::1") }, buf, nil, ErrEncodeAddr},
		{"no addresses", func(h *Headers) { h.IP = IPFields{} }, buf, nil, ErrEncodeAddr},
		{"payload on ACK", func(h *Headers) { h.BTH.Opcode = RCAck }, buf, []byte{1, 2, 3, 4}, ErrEncodePayload},
		{"odd SEND_FIRST", func(h *Headers) { h.BTH.Opcode = RCSendFirst }, buf, []byte{1, 2, 3}, ErrEncodePayload},
		{"CNP without its 16 bytes", func(h *Headers) { h.BTH.Opcode = CNP }, buf, nil, ErrEncodePayload},
		{"buffer too small for headers", func(h *Headers) {}, buf[:40], nil, ErrBufferTooSmall},
		{"buffer too small for payload", func(h *Headers) {}, buf[:60], make([]byte, 8), ErrBufferTooSmall},
		{"too long", func(h *Headers) {}, make([]byte, 70000), make([]byte, 65500), ErrEncodeTooLong},
	}
	for _, c := range cases {
		h := *ok
		c.h(&h)
		if _, err := h.Encode(c.buf, c.payload); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := ok.EncodeHeaders(buf, -1); !errors.Is(err, ErrEncodePayload) {
		t.Errorf("negative payload length: %v", err)
	}
}

// TestEncodeInPlace builds the way the engine does: headers into the TX
// buffer, payload already in place behind them.
func TestEncodeInPlace(t *testing.T) {
	h := testHeaders(RCWriteOnly, false, false)
	payload := []byte("payload placed first")
	want := build(t, h, payload)
	buf := make([]byte, len(want))
	copy(buf[h.HeaderLen():], payload)
	n, err := h.Encode(buf, buf[h.HeaderLen():h.HeaderLen()+len(payload)])
	if err != nil || !bytes.Equal(buf[:n], want) {
		t.Fatalf("in-place encode differs: %v", err)
	}
}

func TestHeaderViews(t *testing.T) {
	b := make(BTH, BTHLen)
	b.SetOpcode(RCSendLastImm)
	b.SetSE(true)
	b.SetMigReq(true)
	b.SetPadCnt(3)
	b.SetTVer(0)
	b.SetPKey(0xFFFF)
	b.SetFECN(true)
	b.SetBECN(true)
	b.SetDestQP(0x1ABCDEF) // truncated to 24 bits
	b.SetAckReq(true)
	b.SetPSN(0xFFFFFF)
	want := []byte{0x03, 0xF0, 0xFF, 0xFF, 0xC0, 0xAB, 0xCD, 0xEF, 0x80, 0xFF, 0xFF, 0xFF}
	if !bytes.Equal(b, want) {
		t.Errorf("BTH % x, want % x", []byte(b), want)
	}
	f := b.Fields()
	var b2 = make(BTH, BTHLen)
	b2.Encode(&f)
	if !bytes.Equal(b, b2) || f.DestQP != 0xABCDEF || f.PadCnt != 3 || !f.SE || !f.FECN {
		t.Errorf("BTH fields %+v", f)
	}
	b.SetSE(false)
	b.SetFECN(false)
	if b.SE() || b.FECN() || !b.BECN() || b.PadCnt() != 3 {
		t.Error("clearing bits")
	}

	r := make(RETH, RETHLen)
	r.SetVA(0x0102030405060708)
	r.SetRKey(0x0A0B0C0D)
	r.SetDMALen(4096)
	if r.Fields() != (RETHFields{0x0102030405060708, 0x0A0B0C0D, 4096}) || r[0] != 1 || r[15] != 0 || r[14] != 0x10 {
		t.Errorf("RETH % x", []byte(r))
	}
	a := make(AETH, AETHLen)
	a.SetSyndrome(NAKSyndrome(NAKPSNSequenceError))
	a.SetMSN(0x123456)
	if !bytes.Equal(a, []byte{0x60, 0x12, 0x34, 0x56}) || a.Fields().MSN != 0x123456 {
		t.Errorf("AETH % x", []byte(a))
	}
	d := make(DETH, DETHLen)
	d.SetQKey(GSIQKey)
	d.SetSrcQP(1)
	if !bytes.Equal(d, []byte{0x80, 0x01, 0, 0, 0, 0, 0, 1}) {
		t.Errorf("DETH % x", []byte(d))
	}
	at := make(AtomicETH, AtomicETHLen)
	at.Encode(&AtomicETHFields{VA: 1, RKey: 2, SwapAdd: 3, Compare: 4})
	if at[7] != 1 || at[11] != 2 || at[19] != 3 || at[27] != 4 || at.Fields().Compare != 4 {
		t.Errorf("AtomicETH % x", []byte(at))
	}
	im := make(ImmDt, ImmDtLen)
	im.SetValue(0xDEADBEEF)
	ie := make(IETH, IETHLen)
	ie.SetRKey(0x1234)
	if im.Value() != 0xDEADBEEF || ie.RKey() != 0x1234 || im[0] != 0xDE {
		t.Error("ImmDt/IETH")
	}
	if (FETHFields{Bits: 0x2B}).PlacementType() != 0xB || (FETHFields{Bits: 0x2B}).SelectivityLevel() != 2 {
		t.Error("FETH bits")
	}
}

func TestEncapHelpers(t *testing.T) {
	e := EthernetFields{HasVLAN: true, VLANTCI: 5<<13 | 1<<12 | 100}
	if e.VLANID() != 100 || e.VLANPriority() != 5 || e.Len() != 18 {
		t.Errorf("VLAN %d %d %d", e.VLANID(), e.VLANPriority(), e.Len())
	}
	if (MAC{0x18, 0x3d, 0x5e, 0xbf, 0x43, 0x71}).String() != "18:3d:5e:bf:43:71" {
		t.Error("MAC string")
	}
	ip := NewIPFields(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"))
	if ip.Flags != IPv4FlagDF || ip.TTL != 64 || !ip.Is4() || ip.Len() != 20 {
		t.Errorf("NewIPFields %+v", ip)
	}
}
