package proto

import (
	"net/netip"
	"testing"
)

// TestSendRecordUDDest: a UD SEND's destination survives the send record
// (IPv4, IPv6 and no address alike), an RC record decodes without one, and
// the destination leaves the record's other fields as they were.
func TestSendRecordUDDest(t *testing.T) {
	for _, d := range []UDDest{
		{Set: true, IP: netip.MustParseAddr("198.18.0.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2}, QPN: 0xabcdef, QKey: 0x11111111},
		{Set: true, IP: netip.MustParseAddr("2001:2::2"), MAC: [6]byte{2, 1, 2, 3, 4, 5}, QPN: 1, QKey: 0x80000000},
		{Set: true, IP: netip.MustParseAddr("::ffff:198.18.0.2"), QPN: 7},
		{Set: true, QPN: 9}, // no address: the daemon's SendTo refuses it
		{Set: true, IP: netip.MustParseAddr("198.18.0.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2}, QPN: 3, QKey: 1, TOS: 0x6a, SetTOS: true},
		{Set: true, IP: netip.MustParseAddr("198.18.0.2"), QPN: 3, SetTOS: true}, // TOS 0 named
		{},
	} {
		in := Send{Op: OpSendImm, NSGE: 1, Flags: 0x40, Seq: 42, Imm: 0xfeed, InlineLen: 3, Dest: d,
			SGL: [MaxSGE]SGE{{Addr: 0x1000, Length: 8, Token: 5}}, Inline: [MaxInline]byte{1, 2, 3}}
		b := make([]byte, SendSize)
		in.Encode(b)
		var out Send
		out.Decode(b)
		if out.Dest != d {
			t.Errorf("destination %+v came back %+v", d, out.Dest)
		}
		if out.Op != in.Op || out.NSGE != 1 || out.Flags != in.Flags || out.Seq != 42 || out.Imm != 0xfeed || out.SGL[0] != in.SGL[0] ||
			out.InlineLen != 3 || out.Inline[2] != 3 {
			t.Errorf("record with destination %+v: %+v", d, out)
		}
	}
	rc := Send{Op: OpWrite, RemoteAddr: 0xffffffffffff, RemoteToken: 3, Compare: ^uint64(0), SwapAdd: ^uint64(0)}
	b := make([]byte, SendSize)
	for i := range b {
		b[i] = 0xff // what the slot held before
	}
	rc.Encode(b)
	var out Send
	out.Decode(b)
	if out.Dest.Set || out.RemoteAddr != rc.RemoteAddr || out.RemoteToken != 3 {
		t.Fatalf("RC record: %+v", out)
	}
}
