package rocev2

import (
	"net/netip"
	"testing"
)

func TestMulticastMAC(t *testing.T) {
	for _, c := range []struct {
		group string
		want  MAC
		ok    bool
	}{
		{"239.129.2.3", MAC{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, true}, // the 24th bit is not mapped
		{"224.0.0.1", MAC{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}, true},
		{"::ffff:239.1.1.1", MAC{0x01, 0x00, 0x5e, 0x01, 0x01, 0x01}, true},
		{"ff0e::1:ff12:3456", MAC{0x33, 0x33, 0xff, 0x12, 0x34, 0x56}, true},
		{"198.18.0.1", MAC{}, false},
		{"2001:2::1", MAC{}, false},
	} {
		got, ok := MulticastMAC(netip.MustParseAddr(c.group))
		if got != c.want || ok != c.ok {
			t.Errorf("MulticastMAC(%s) = %v, %v; want %v, %v", c.group, got, ok, c.want, c.ok)
		}
	}
}
