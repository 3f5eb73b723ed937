package rocev2

import "testing"

// TestL2L4Views reads an encoded frame back through the Ethernet, IP and UDP
// views and finds what Encode was given and what Parse reports.
func TestL2L4Views(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v6, vlan bool
	}{{"IPv4", false, false}, {"IPv4 VLAN", false, true}, {"IPv6", true, false}, {"IPv6 VLAN", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := testHeaders(RCWriteOnly, tc.v6, tc.vlan)
			payload := make([]byte, 13)
			frame := build(t, h, payload)
			var p Packet
			if err := Parse(frame, &p); err != nil {
				t.Fatal(err)
			}
			e := Ethernet(frame)
			if got := e.Fields(); got != h.Eth || got != p.Eth {
				t.Errorf("Ethernet.Fields = %+v, encoded %+v, parsed %+v", got, h.Eth, p.Eth)
			}
			l3 := h.L3Offset()
			udpLen := len(frame) - l3 - h.IP.Len()
			var ip IPFields
			if tc.v6 {
				v := IPv6(frame[l3:])
				ip = v.Fields()
				if e.EtherType() != EtherTypeIPv6 || v.Version() != 6 || int(v.PayloadLen()) != udpLen || v.NextHeader() != IPProtoUDP {
					t.Errorf("IPv6 view: ethertype %#x version %d payload %d next %d", e.EtherType(), v.Version(), v.PayloadLen(), v.NextHeader())
				}
			} else {
				v := IPv4(frame[l3:])
				ip = v.Fields()
				if e.EtherType() != EtherTypeIPv4 || v.Version() != 4 || v.IHL() != 5 || int(v.TotalLen()) != IPv4Len+udpLen ||
					v.Protocol() != IPProtoUDP || v.IsFragment() || !v.IsChecksumValid() {
					t.Errorf("IPv4 view: ethertype %#x version %d IHL %d total %d protocol %d fragment %v checksum %#x",
						e.EtherType(), v.Version(), v.IHL(), v.TotalLen(), v.Protocol(), v.IsFragment(), v.Checksum())
				}
			}
			want := h.IP
			if tc.v6 {
				want.ID, want.Flags = 0, 0 // IPv4 only
			}
			if ip != want || ip != p.IP {
				t.Errorf("IP Fields = %+v, encoded %+v, parsed %+v", ip, want, p.IP)
			}
			u := UDP(frame[l3+h.IP.Len():])
			if got := u.Fields(); got != h.UDP || got != p.UDP || u.DstPort() != UDPPort || int(u.Length()) != udpLen {
				t.Errorf("UDP view: %+v, port %d, length %d; encoded %+v, parsed %+v", got, u.DstPort(), u.Length(), h.UDP, p.UDP)
			}
			if got := BTH(frame[p.BTHOffset:]).Fields(); got != p.BTH {
				t.Errorf("BTH.Fields = %+v, Parse gave %+v", got, p.BTH)
			}
		})
	}
}
