package demo

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemoWireRoundTrips: a request, a reply and a note read back as they
// were written.
func TestDemoWireRoundTrips(t *testing.T) {
	req := demoRequest{Op: opWrite, Last: true, Size: 8192, Count: 40}
	if got, err := decodeDemoRequest(req.encode()); err != nil || got != req {
		t.Errorf("request %+v read back as %+v, %v", req, got, err)
	}
	rep := demoReply{Addr: 0x7f00_1234_5678, Token: 0xdeadbeef}
	if got, err := decodeDemoReply(rep.encode()); err != nil || got != rep {
		t.Errorf("reply %+v read back as %+v, %v", rep, got, err)
	}
	b := make([]byte, demoNoteLen)
	n := demoNote{Failed: true, Value: 7, Text: "message 3 arrived wrong"}
	n.put(b)
	if got, err := decodeDemoNote(b); err != nil || got != n {
		t.Errorf("note %+v read back as %+v, %v", n, got, err)
	}
	if why, ok := rejectText(rejectData(strings.Repeat("x", 500))); !ok || len(why) != 144 {
		t.Errorf("a long REJ sentence reads back as %d bytes (%v), want cut to 144", len(why), ok)
	}
	if _, ok := rejectText(make([]byte, 148)); ok {
		t.Error("a REJ without the demo's magic read as the demo's")
	}
}

// TestDemoRequestRefusals: the server refuses what it does not serve,
// saying what.
func TestDemoRequestRefusals(t *testing.T) {
	enc := func(r demoRequest) []byte { return r.encode() }
	other := enc(demoRequest{Op: opSend, Size: 64, Count: 1})
	other[4] = 2
	for _, tc := range []struct {
		b    []byte
		want string
	}{
		{nil, "no demo request"},
		{make([]byte, 56), "no demo request"},
		{other, "version 2"},
		{enc(demoRequest{Op: 0, Size: 64, Count: 1}), "unknown phase 0"},
		{enc(demoRequest{Op: opSend, Size: 4, Count: 1}), "SEND of 4 bytes: this server serves 8..1048576"},
		{enc(demoRequest{Op: opRead, Size: 1, Count: 0}), "READ count 0: this server serves 1..1000000"},
		{enc(demoRequest{Op: opPingPong, Size: 65, Count: 1}), "ping-pong of 65 bytes"},
		{enc(demoRequest{Op: opSend, Size: 64, Count: 10_000_001}), "SEND count 10000001"},
	} {
		if _, err := decodeDemoRequest(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("request %x: %v, want %q", tc.b, err, tc.want)
		}
	}
	if _, err := decodeDemoReply(make([]byte, 196)); err == nil || !strings.Contains(err.Error(), "-peer-kind rping") {
		t.Errorf("a REP without a demo reply: %v, want the hint to -peer-kind rping", err)
	}
	if _, err := decodeDemoNote(make([]byte, 16)); err == nil {
		t.Error("a 16-byte SEND read as a note")
	}
}

// FuzzDemoWire: the decoders of what a peer sends never panic, and what
// they accept encodes back to the same fields.
func FuzzDemoWire(f *testing.F) {
	f.Add(demoRequest{Op: opSend, Size: 64, Count: 10}.encode())
	f.Add(demoReply{Addr: 1, Token: 2}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeDemoRequest(b); err == nil {
			if again, err := decodeDemoRequest(r.encode()); err != nil || again != r {
				t.Fatalf("request %+v does not read back (%+v, %v)", r, again, err)
			}
		}
		if r, err := decodeDemoReply(b); err == nil && !bytes.Equal(r.encode()[8:], b[8:demoReplyLen]) {
			t.Fatalf("reply %+v encodes otherwise than %x", r, b)
		}
		_, _ = decodeDemoNote(b)
		_, _ = rejectText(b)
	})
}

// TestWrittenSlots: what writtenSlots expects is what writeSlots's fills
// leave, op i into slot i mod rdmaSlots, for fewer ops than slots, as
// many, and more.
func TestWrittenSlots(t *testing.T) {
	const size = 24
	for _, n := range []int{1, 5, rdmaSlots, rdmaSlots + 3, 40} {
		mem := make([]byte, size*rdmaSlots)
		for i := range n {
			slot := i % rdmaSlots
			fillMessage(mem[slot*size:(slot+1)*size], uint64(i))
		}
		if !bytes.Equal(writtenSlots(n, size), mem) {
			t.Errorf("n=%d: writtenSlots differs from the memory the WRITEs leave", n)
		}
	}
	if bytes.Equal(writtenSlots(40, size), writtenSlots(39, size)) {
		t.Error("writtenSlots does not tell 39 WRITEs from 40")
	}
}

// TestDemoOnDev: -dev in any of the flag package's spellings makes
// -daemon a socket; a -dev after "--", or a flag that only starts with
// "dev", does not.
func TestDemoOnDev(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"-dev", "eth0"}, true},
		{[]string{"--dev", "eth0"}, true},
		{[]string{"-dev=eth0", "-peer", "x"}, true},
		{[]string{"-daemon"}, false},
		{[]string{"-devx"}, false},
		{[]string{"---dev", "eth0"}, false},
		{[]string{"--", "-dev", "eth0"}, false},
	} {
		if got := demoOnDev(tc.args); got != tc.want {
			t.Errorf("demoOnDev(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestSplitPeer: -peer takes an address, a host name, and either with a
// port.
func TestSplitPeer(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port uint16
	}{
		{"198.18.0.1", "198.18.0.1", 0},
		{"198.18.0.1:7175", "198.18.0.1", 7175},
		{"2001:2::1", "2001:2::1", 0},
		{"[2001:2::1]", "2001:2::1", 0},
		{"[2001:2::1]:9", "2001:2::1", 9},
		{"peer.example", "peer.example", 0},
		{"peer.example:80", "peer.example", 80},
	} {
		if host, port, err := splitPeer(tc.in); err != nil || host != tc.host || port != tc.port {
			t.Errorf("splitPeer(%q) = %q, %d, %v; want %q, %d", tc.in, host, port, err, tc.host, tc.port)
		}
	}
	for _, bad := range []string{"198.18.0.1:0", "198.18.0.1:65536", ":7174", "198.18.0.1:x"} {
		if _, _, err := splitPeer(bad); err == nil {
			t.Errorf("splitPeer(%q) accepted", bad)
		}
	}
}
