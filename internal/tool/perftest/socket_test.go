package perftest

import (
	"errors"
	"strings"
	"testing"
)

// TestKeyText: a pingpong_dest as ethernet_write_keys prints it
// (KEY_PRINT_FMT_GID: 107 characters and a NUL) and as ethernet_read_keys
// reads it back; malformed text is a protocol error.
func TestKeyText(t *testing.T) {
	d := Dest{OutReads: 16, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000, SRQN: 7,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 1}}
	b := EncodeKey(&d)
	want := "0000:0010:000011:abcdef:00001234:00007f0000001000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:01:00000007:"
	if got := string(b[:len(want)]); got != want || len(want) != KeyMsgLen-1 || b[KeyMsgLen-1] != 0 {
		t.Fatalf("encoded %q, want %q and a NUL", b, want)
	}
	back, err := DecodeKey(b[:])
	if err != nil || back != d {
		t.Fatalf("decoded %+v, %v; want %+v", back, err, d)
	}
	for _, bad := range []string{"", "0000:0010:000011", strings.Replace(want, "abcdef", "abcdeg", 1), strings.Replace(want, "c6", "1c6", 1)} {
		if _, err := DecodeKey([]byte(bad)); !errors.Is(err, ErrProtocol) {
			t.Errorf("DecodeKey(%q): %v, want ErrProtocol", bad, err)
		}
	}
}

// TestPrintDest: the address lines as rxe's perftest printed them in a
// live run (ctx_print_pingpong_data: %#06x counts the 0x; a read test
// adds OUT, send and atomic tests print no RKey).
func TestPrintDest(t *testing.T) {
	d := Dest{QPN: 0x15, PSN: 0xc29b70, OutReads: 0x80, RKey: 0x633, VAddr: 0x5559656bc000}
	for verb, want := range map[Verb]string{
		Read:   " local address: LID 0000 QPN 0x0015 PSN 0xc29b70 OUT 0x80 RKey 0x000633 VAddr 0x005559656bc000\n",
		Write:  " local address: LID 0000 QPN 0x0015 PSN 0xc29b70 RKey 0x000633 VAddr 0x005559656bc000\n",
		Send:   " local address: LID 0000 QPN 0x0015 PSN 0xc29b70\n",
		Atomic: " local address: LID 0000 QPN 0x0015 PSN 0xc29b70\n",
	} {
		var b strings.Builder
		printDest(&b, "local", &Params{Verb: verb}, &d)
		if got, _, _ := strings.Cut(b.String(), " GID"); got != want {
			t.Errorf("%v: %q, want %q", verb, got, want)
		}
	}
}
