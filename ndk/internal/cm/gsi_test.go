package cm_test

import (
	"errors"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

func testMAD() *[rocev2.MADLen]byte {
	var b [rocev2.MADLen]byte
	m := rocev2.NewCMMAD(42, &rocev2.CMRtu{LocalCommID: 1, RemoteCommID: 2})
	if err := m.Encode(b[:]); err != nil {
		panic(err)
	}
	return &b
}

// TestGSIFrame builds GSI frames and checks every header field against
// what rxe sends (ROCEV2.md 3.1) and that CheckGSI reads them back.
func TestGSIFrame(t *testing.T) {
	// rxe: 0xC000 + hash_32(qpn, 14), GOLDEN_RATIO_32 = 0x61C88647.
	if h := uint32(rocev2.GSIQP) * 0x61C88647 >> 18; cm.GSIUDPSourcePort != 0xC000+h || cm.GSIUDPSourcePort != 55410 {
		t.Fatalf("GSI UDP source port %d", cm.GSIUDPSourcePort)
	}
	var f cm.GSIFramer
	mad := testMAD()
	for _, tc := range []struct {
		name  string
		local string
		want  int
	}{{"IPv4", "198.18.0.1", cm.GSIFrameLen4}, {"IPv6", "2001:2::1", cm.GSIFrameLen6}} {
		path := cm.PathInfo{LocalMAC: rocev2.MAC{2, 0, 0, 0, 0, 1}, RemoteMAC: rocev2.MAC{2, 0, 0, 0, 0, 2}}
		if tc.name == "IPv4" {
			path.LocalIP, path.RemoteIP = ipA, ipB
		} else {
			path.LocalIP, path.RemoteIP = ip6A, ip6B
		}
		for i := 0; i < 3; i++ {
			buf := make([]byte, cm.GSIFrameLen6)
			n, err := f.Build(buf, &path, mad)
			if err != nil || n != tc.want {
				t.Fatalf("%s: %d bytes, %v", tc.name, n, err)
			}
			var p rocev2.Packet
			reply, srcQP, got, err := cm.ParseGSI(buf[:n], &p)
			if err != nil {
				t.Fatal(err)
			}
			seq := i
			if tc.name == "IPv6" {
				seq = i + 3
			}
			b := p.BTH
			if b.Opcode != rocev2.UDSendOnly || b.DestQP != 1 || !b.AckReq || b.PKey != rocev2.DefaultPKey || b.PSN != rocev2.PSN(seq) || b.SE || b.MigReq {
				t.Errorf("%s: BTH %+v", tc.name, b)
			}
			if p.DETH.QKey != rocev2.GSIQKey || p.DETH.SrcQP != 1 || srcQP != 1 || p.UDP.SrcPort != 55410 || p.UDP.Checksum != 0 {
				t.Errorf("%s: DETH %+v UDP %+v", tc.name, p.DETH, p.UDP)
			}
			if tc.name == "IPv4" && (p.IP.ID != uint16(i) || p.IP.TTL != 64 || p.IP.Flags != rocev2.IPv4FlagDF) {
				t.Errorf("IPv4 header %+v", p.IP)
			}
			if reply.LocalIP != path.RemoteIP || reply.RemoteIP != path.LocalIP || reply.RemoteMAC != path.LocalMAC || reply.PeerQP != 1 {
				t.Errorf("%s: reply path %+v", tc.name, reply)
			}
			if string(got) != string(mad[:]) {
				t.Errorf("%s: MAD changed", tc.name)
			}
		}
	}
	if _, err := f.Build(make([]byte, 10), &cm.PathInfo{LocalIP: ipA, RemoteIP: ipB}, mad); !errors.Is(err, rocev2.ErrBufferTooSmall) {
		t.Errorf("short buffer: %v", err)
	}
	if _, err := f.Build(make([]byte, cm.GSIFrameLen6), &cm.PathInfo{LocalIP: ipA}, mad); err == nil {
		t.Error("path without a remote address accepted")
	}
}

// TestCheckGSIRejects: frames that are RoCE but not CM datagrams for QP1.
func TestCheckGSIRejects(t *testing.T) {
	base := rocev2.Headers{
		IP:   rocev2.NewIPFields(ipA, ipB),
		UDP:  rocev2.UDPFields{SrcPort: 55410},
		BTH:  rocev2.BTHFields{Opcode: rocev2.UDSendOnly, PKey: 0xFFFF, DestQP: 1},
		DETH: rocev2.DETHFields{QKey: rocev2.GSIQKey, SrcQP: 1},
	}
	mad := testMAD()[:]
	cases := []struct {
		name    string
		mod     func(h *rocev2.Headers)
		payload []byte
	}{
		{"wrong Q_Key", func(h *rocev2.Headers) { h.DETH.QKey = 0x11111111 }, mad},
		{"wrong QP", func(h *rocev2.Headers) { h.BTH.DestQP = 2 }, mad},
		{"RC opcode", func(h *rocev2.Headers) { h.BTH.Opcode = rocev2.RCSendOnly }, mad},
		{"short MAD", func(*rocev2.Headers) {}, mad[:200]},
	}
	for _, c := range cases {
		h := base
		c.mod(&h)
		buf := make([]byte, 512)
		n, err := h.Encode(buf, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		var p rocev2.Packet
		if _, _, _, err := cm.ParseGSI(buf[:n], &p); !errors.Is(err, cm.ErrNotGSI) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	var p rocev2.Packet
	if _, _, _, err := cm.ParseGSI([]byte{1, 2, 3}, &p); err == nil || errors.Is(err, cm.ErrNotGSI) {
		t.Errorf("garbage: %v", err)
	}
}

// TestGSIAllocs: framing and checking run per MAD without allocating.
func TestGSIAllocs(t *testing.T) {
	var f cm.GSIFramer
	mad := testMAD()
	path := cm.PathInfo{LocalIP: ipA, RemoteIP: ipB}
	buf := make([]byte, cm.GSIFrameLen6)
	n, _ := f.Build(buf, &path, mad)
	var p rocev2.Packet
	if a := testing.AllocsPerRun(100, func() { _, _ = f.Build(buf, &path, mad) }); a != 0 {
		t.Errorf("Build: %v allocs", a)
	}
	if a := testing.AllocsPerRun(100, func() { _, _, _, _ = cm.ParseGSI(buf[:n], &p) }); a != 0 {
		t.Errorf("ParseGSI: %v allocs", a)
	}
}
