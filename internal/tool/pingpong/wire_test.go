package pingpong

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// The literals below are what rdma-core's C code writes (lines of
// libibverbs/examples at 691953d8d, which v44 and v56 share): the message
// is sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, gid) into
// char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"]
// (rc_pingpong.c:171, 207, 319) with the GID from gid_to_wire_gid, which
// prints each 32-bit word as htobe32 and "%08x" (pingpong.c:79), and the
// whole array is written, NUL included (write(sockfd, msg, sizeof msg)).
func TestEncodeMatchesC(t *testing.T) {
	for _, tc := range []struct {
		d    Dest
		want string
	}{
		// rxe with -g 1 on 198.18.1.2: ::ffff:198.18.1.2.
		{Dest{LID: 0, QPN: 0x11, PSN: 0x3a5c01, GID: netip.MustParseAddr("::ffff:198.18.1.2").As16()},
			"0000:000011:3a5c01:00000000000000000000ffffc6120102\x00"},
		// Without -g: the zero GID (memset(&my_dest.gid, 0, ...)).
		{Dest{LID: 0x1a, QPN: 0xffffff, PSN: 0}, "001a:ffffff:000000:00000000000000000000000000000000\x00"},
		// The default GID, fe80:: and the EUI-64 of 52:54:00:12:34:56.
		{Dest{QPN: 0x1234, PSN: 0xabcdef, GID: netip.MustParseAddr("fe80::5054:ff:fe12:3456").As16()},
			"0000:001234:abcdef:fe80000000000000505400fffe123456\x00"},
	} {
		got := tc.d.Encode()
		if string(got[:]) != tc.want || len(got) != 52 {
			t.Errorf("%+v: %q, want %q (52 bytes)", tc.d, got[:], tc.want)
		}
		back, err := ParseDest(got[:])
		if err != nil || back != tc.d {
			t.Errorf("ParseDest(%q) = %+v, %v; want %+v", got[:], back, err, tc.d)
		}
	}
}

// ParseDest refuses what is not a peer's address, rather than reading a
// zero GID or QPN out of it (sscanf would leave fields unset).
func TestParseDestRefuses(t *testing.T) {
	for _, s := range []string{
		"",
		"done\x00",
		"0000:000011:3a5c01\x00",
		"0000:000011:3a5c01:00000000000000000000ffffc612010\x00",    // 31 digits
		"0000:000011:3a5c01:00000000000000000000ffffc61201zz\x00",   // not hex
		"0000:1000000:3a5c01:00000000000000000000ffffc6120102\x00",  // QPN over 24 bits
		"10000:000011:3a5c01:00000000000000000000ffffc6120102\x00",  // LID over 16 bits
		"0000::3a5c01:00000000000000000000ffffc6120102\x00",         // empty QPN
		"0000:000011:3a5c01:00000000000000000000ffffc6120102:1\x00", // a fifth field
	} {
		if d, err := ParseDest([]byte(s)); err == nil {
			t.Errorf("ParseDest(%q) = %+v, want an error", s, d)
		}
	}
}

// The address lines as the C tools print them (rc_pingpong.c:1085, 1099;
// ud_pingpong.c:724 has a colon before GID in its local line, 737 a
// comma), the GID through inet_ntop(AF_INET6).
func TestAddressLines(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0x3a5c01, GID: netip.MustParseAddr("::ffff:198.18.1.2").As16()}
	for _, tc := range []struct {
		which string
		ud    bool
		want  string
	}{
		{"local", false, "  local address:  LID 0x0000, QPN 0x000011, PSN 0x3a5c01, GID ::ffff:198.18.1.2\n"},
		{"remote", false, "  remote address: LID 0x0000, QPN 0x000011, PSN 0x3a5c01, GID ::ffff:198.18.1.2\n"},
		{"local", true, "  local address:  LID 0x0000, QPN 0x000011, PSN 0x3a5c01: GID ::ffff:198.18.1.2\n"},
		{"remote", true, "  remote address: LID 0x0000, QPN 0x000011, PSN 0x3a5c01, GID ::ffff:198.18.1.2\n"},
	} {
		if got := AddressLine(tc.which, d, tc.ud); got != tc.want {
			t.Errorf("%s ud=%v: %q, want %q", tc.which, tc.ud, got, tc.want)
		}
	}
	if got := AddressLine("local", Dest{}, false); got != "  local address:  LID 0x0000, QPN 0x000000, PSN 0x000000, GID ::\n" {
		t.Errorf("zero GID: %q", got)
	}
}

// The closing lines (rc_pingpong.c:1228-1231): bytes = size * iters * 2.
func TestResultLines(t *testing.T) {
	want := "8192000 bytes in 0.12 seconds = 530.84 Mbit/sec\n1000 iters in 0.12 seconds = 123.46 usec/iter\n"
	if got := ResultLines(4096, 1000, 123456); got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// The exchange over a socket: the client writes its 52 bytes, reads the
// server's and writes "done\0"; the server reads, answers, and reads the
// 5 bytes of done (rc_pingpong.c:207-216, 303-325).
func TestExchange(t *testing.T) {
	c, s := net.Pipe()
	cli := Dest{QPN: 0x11, PSN: 0x22, GID: netip.MustParseAddr("::ffff:198.18.0.1").As16()}
	srv := Dest{QPN: 0x33, PSN: 0x44, GID: netip.MustParseAddr("::ffff:198.18.0.2").As16()}
	type res struct {
		d   Dest
		err error
	}
	ch := make(chan res, 1)
	go func() {
		d, err := clientExchange(c, []Dest{cli})
		if err != nil {
			ch <- res{err: err}
			return
		}
		ch <- res{d[0], err}
	}()
	got, err := serverRead(s, 1)
	if err != nil || got[0] != cli {
		t.Fatalf("server read %+v, %v", got, err)
	}
	if err := serverReply(s, []Dest{srv}); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.err != nil || r.d != srv {
		t.Fatalf("client got %+v, %v", r.d, r.err)
	}
	// A C client's bytes, literally: srq_pingpong's two QPs, one message each.
	var buf bytes.Buffer
	buf.WriteString("0000:000011:3a5c01:00000000000000000000ffffc6120102\x00")
	buf.WriteString("0000:000012:000001:00000000000000000000ffffc6120102\x00")
	if d, err := serverRead(&buf, 2); err != nil || d[0].QPN != 0x11 || d[0].PSN != 0x3a5c01 || gidAddr(d[0].GID) != netip.MustParseAddr("198.18.1.2") || d[1].QPN != 0x12 || d[1].PSN != 1 {
		t.Fatalf("%+v, %v", d, err)
	}
	// A server whose client sends something else than done.
	var rw struct {
		bytes.Buffer
	}
	rw.WriteString("nope!")
	if err := serverReply(&rw, []Dest{srv}); err == nil || !strings.Contains(err.Error(), "done") {
		t.Fatalf("a client that sent no done: %v", err)
	}
}

// GIDTable numbers the entries as rxe's GID table does (test/interop's
// gid_table case reads rxe0's): the default GID (EUI-64 link-local) at 0,
// then the IPv4 address, then IPv6 ones, each once (rxe is RoCE v2 only);
// a link-local address equal to the default GID adds nothing.
func TestGIDTable(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	tab := GIDTable(mac, []netip.Addr{
		netip.MustParseAddr("fe80::5054:ff:fe12:3456"),
		netip.MustParseAddr("2001:2:0:1::2"),
		netip.MustParseAddr("198.18.1.2"),
	})
	want := []string{"fe80::5054:ff:fe12:3456", "::ffff:198.18.1.2", "2001:2:0:1::2"}
	if len(tab) != len(want) {
		t.Fatalf("%d entries: %+v", len(tab), tab)
	}
	for i, w := range want {
		if GIDString(tab[i].GID) != w || tab[i].Index != i || tab[i].Type() != "RoCE v2" {
			t.Errorf("entry %d: %s %s, want %s", i, GIDString(tab[i].GID), tab[i].Type(), w)
		}
	}
	local := netip.MustParseAddr("198.18.1.2")
	if g, err := PickGID(tab, 1, local); err != nil || GIDString(g) != "::ffff:198.18.1.2" {
		t.Errorf("-g 1: %v, %v", GIDString(g), err)
	}
	if g, err := PickGID(tab, -1, local); err != nil || g != ([16]byte{}) {
		t.Errorf("no -g: %v, %v", g, err)
	}
	for idx, want := range map[int]string{0: "not the GID of the address", 2: "not the GID of the address", 9: "can't read sgid of index 9"} {
		if _, err := PickGID(tab, idx, local); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-g %d: %v, want an error naming %q", idx, err, want)
		}
	}
}
