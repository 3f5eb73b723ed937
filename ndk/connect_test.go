package ndk

import (
	"net"
	"net/netip"
	"testing"
)

func TestEndpointStringRoundTrip(t *testing.T) {
	for _, e := range []Endpoint{
		{IP: netip.MustParseAddr("198.18.0.1"), MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, QPN: 0x100, PSN: 0xABCDEF},
		{IP: netip.MustParseAddr("2001:2::2"), QPN: 0xFFFFFF, PSN: 0},
	} {
		got, err := ParseEndpoint(e.String())
		if err != nil {
			t.Fatalf("%v: %v", e, err)
		}
		if got.IP != e.IP || got.MAC.String() != e.MAC.String() || got.QPN != e.QPN || got.PSN != e.PSN {
			t.Fatalf("%v -> %q -> %v", e, e.String(), got)
		}
	}
	for _, bad := range []string{"", "198.18.0.1", "198.18.0.1//0x100", "x//1/2", "198.18.0.1/zz/1/2", "198.18.0.1//0x1000000/0", "198.18.0.1//1/-1"} {
		if _, err := ParseEndpoint(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseEndpoint(f *testing.F) {
	f.Add("198.18.0.1/02:00:00:00:00:01/0x000100/0x3a5c01")
	f.Add("2001:2::1//256/0")
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEndpoint(s)
		if err != nil {
			return
		}
		if e.QPN > 0xFFFFFF || e.PSN > 0xFFFFFF {
			t.Fatalf("%q: 24-bit fields out of range: %+v", s, e)
		}
		again, err := ParseEndpoint(e.String())
		if err != nil || again.IP != e.IP || again.QPN != e.QPN || again.PSN != e.PSN || again.MAC.String() != e.MAC.String() {
			t.Fatalf("%q -> %v does not round-trip: %v %v", s, e, again, err)
		}
	})
}
