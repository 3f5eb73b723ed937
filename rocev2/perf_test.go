package rocev2

import (
	"testing"
)

// frame4KiB is an RC RDMA WRITE_ONLY carrying 4096 bytes: the largest PMTU.
func frame4KiB(t testing.TB) (*Headers, []byte, []byte) {
	h := testHeaders(RCWriteOnly, false, false)
	payload := make([]byte, 4096)
	for i := range payload {
		payload[i] = byte(i)
	}
	return h, payload, build(t, h, payload)
}

// TestNoAllocs proves the per-packet paths allocate nothing.
func TestNoAllocs(t *testing.T) {
	h, payload, frame := frame4KiB(t)
	buf := make([]byte, len(frame))
	var p Packet
	bad := append([]byte(nil), frame...)
	bad[100] ^= 1
	l3, hdrEnd := h.L3Offset(), h.HeaderLen()
	cases := map[string]func(){
		"Parse":         func() { _ = Parse(frame, &p) },
		"Parse reject":  func() { _ = ReasonOf(Parse(bad, &p)) },
		"ParseVerified": func() { _ = ParseVerified(frame, &p) },
		"EncodeHeaders": func() { _, _ = h.EncodeHeaders(buf, len(payload)) },
		"Encode":        func() { _, _ = h.Encode(buf, payload) },
		"ICRC":          func() { _, _ = ICRC(frame[l3:hdrEnd], payload, 0) },
	}
	for name, f := range cases {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %.1f allocations per run, want 0", name, n)
		}
	}
	if err := Parse(bad, &p); ReasonOf(err) != ReasonICRC {
		t.Fatalf("reject case: %v", err)
	}
}

// TestParseVerified: the same packet as Parse, without recomputing the
// ICRC (a frame whose ICRC is wrong passes), and every length still checked.
func TestParseVerified(t *testing.T) {
	_, _, frame := frame4KiB(t)
	var want, got Packet
	if err := Parse(frame, &want); err != nil {
		t.Fatal(err)
	}
	if err := ParseVerified(frame, &got); err != nil || got.BTH != want.BTH || got.PayloadOffset != want.PayloadOffset ||
		len(got.Payload) != len(want.Payload) || got.ICRC != want.ICRC {
		t.Fatalf("ParseVerified = %+v, %v; Parse gave %+v", got, err, want)
	}
	bad := append([]byte(nil), frame...)
	bad[len(bad)-1] ^= 1 // the ICRC itself
	if err := ParseVerified(bad, &got); err != nil {
		t.Fatalf("ParseVerified recomputed the ICRC: %v", err)
	}
	if err := ParseVerified(frame[:60], &got); err == nil {
		t.Fatal("ParseVerified accepted a cut frame")
	}
}

// BenchmarkParse4KiB parses a 4 KiB-payload frame, ICRC check included.
func BenchmarkParse4KiB(b *testing.B) {
	_, _, frame := frame4KiB(b)
	var p Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(frame, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseVerified parses the headers of a 4 KiB RDMA WRITE_ONLY
// without the ICRC check: the per-layer work of Parse alone.
func BenchmarkParseVerified(b *testing.B) {
	for _, tc := range []struct {
		name     string
		v6, vlan bool
	}{{"IPv4", false, false}, {"IPv6VLAN", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			frame := build(b, testHeaders(RCWriteOnly, tc.v6, tc.vlan), make([]byte, 4096))
			var p Packet
			b.ReportAllocs()
			for b.Loop() {
				if err := ParseVerified(frame, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildHeaders writes the headers of a 4 KiB RDMA WRITE_FIRST,
// what the engine does per TX frame before attaching the payload.
func BenchmarkBuildHeaders(b *testing.B) {
	h := testHeaders(RCWriteFirst, false, false)
	buf := make([]byte, 128)
	b.SetBytes(int64(h.HeaderLen()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.EncodeHeaders(buf, 4096); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildHeadersIPv6VLAN is BenchmarkBuildHeaders over a tagged
// IPv6 link.
func BenchmarkBuildHeadersIPv6VLAN(b *testing.B) {
	h := testHeaders(RCWriteFirst, true, true)
	buf := make([]byte, 128)
	b.SetBytes(int64(h.HeaderLen()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.EncodeHeaders(buf, 4096); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode4KiB builds a complete 4 KiB frame: headers, payload copy, ICRC.
func BenchmarkEncode4KiB(b *testing.B) {
	h, payload, frame := frame4KiB(b)
	buf := make([]byte, len(frame))
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Encode(buf, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkICRC4KiB is the ICRC alone over split header and payload.
func BenchmarkICRC4KiB(b *testing.B) {
	h, payload, frame := frame4KiB(b)
	hdr := frame[h.L3Offset():h.HeaderLen()]
	b.SetBytes(int64(len(hdr) + len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ICRC(hdr, payload, 0); err != nil {
			b.Fatal(err)
		}
	}
}
