package rc

import (
	"net/netip"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The destination cases of TestHostilePeer: a request with the live
// connection's QPN, PSN, source and R_Key, addressed to another IP or MAC
// than B's. B must not run it: a host whose NIC hands it frames for other
// addresses (promiscuous mode, a bridge, a hub) would otherwise execute a
// WRITE meant for a neighbour or forged for one. Each has a control: the
// same frame addressed to B executes.
func destinationCases() []hostileCase {
	counter := func(s Stats) uint64 { return s.WrongDestination }
	// write builds a WRITE_ONLY of 16 bytes at MR, read a READ of 64, and
	// let f change their headers.
	write := func(f func(h *hostile, hd *rocev2.Headers)) func(h *hostile) []answer {
		return func(h *hostile) []answer {
			hd := h.hdr(rocev2.RCWriteOnly, e0)
			hd.RETH = rocev2.RETHFields{VA: h.mr.addr(0), RKey: mrKey(h), DMALen: 16}
			f(h, &hd)
			h.inj.inject(h.frame(hd, payloadOf(16, 21)))
			return nil
		}
	}
	read := func(f func(h *hostile, hd *rocev2.Headers)) func(h *hostile) []answer {
		return func(h *hostile) []answer {
			hd := h.hdr(rocev2.RCReadRequest, e0)
			hd.RETH = rocev2.RETHFields{VA: h.mr.addr(0), RKey: mrKey(h), DMALen: 64}
			f(h, &hd)
			h.inj.inject(h.frame(hd, nil))
			return nil
		}
	}
	toIP := func(ip string) func(h *hostile, hd *rocev2.Headers) {
		return func(h *hostile, hd *rocev2.Headers) { hd.IP.Dst = netip.MustParseAddr(ip) }
	}
	toMAC := func(m rocev2.MAC) func(h *hostile, hd *rocev2.Headers) {
		return func(h *hostile, hd *rocev2.Headers) { hd.Eth.Dst = m }
	}
	v6 := hostileOptions{ipv6: true}
	var cs []hostileCase
	for _, c := range []struct {
		name string
		opts hostileOptions
		f    func(h *hostile, hd *rocev2.Headers)
	}{
		{"ipv4-other-host", hostileOptions{}, toIP("198.18.0.9")},
		{"ipv4-the-peer-itself", hostileOptions{}, toIP("198.18.0.1")},
		{"ipv4-broadcast", hostileOptions{}, toIP("255.255.255.255")},
		{"ipv6-other-host", v6, toIP("2001:2::9")},
		{"ipv6-link-local", v6, toIP("fe80::2")},
		{"ipv6-multicast", v6, toIP("ff02::1")},
		{"ipv6-header-mapped-ipv4-of-b", hostileOptions{}, func(h *hostile, hd *rocev2.Headers) {
			hd.IP = rocev2.NewIPFields(netip.MustParseAddr("2001:2::1"), netip.AddrFrom16(h.b.ip.As16()))
		}},
		{"mac-other-host", hostileOptions{}, toMAC(rocev2.MAC{2, 0, 0, 0, 0, 9})},
		{"mac-broadcast", hostileOptions{}, toMAC(rocev2.MAC{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})},
		{"mac-multicast-ipv6", v6, toMAC(rocev2.MAC{0x33, 0x33, 0, 0, 0, 2})},
	} {
		cs = append(cs,
			hostileCase{name: "dest/write-" + c.name, opts: c.opts, live: true, counter: counter, run: write(c.f)},
			hostileCase{name: "dest/read-" + c.name, opts: c.opts, live: true, counter: counter, run: read(c.f)})
	}
	same := func(*hostile, *rocev2.Headers) {}
	for _, o := range []struct {
		name string
		opts hostileOptions
	}{{"ipv4", hostileOptions{}}, {"ipv6", v6}} {
		cs = append(cs,
			hostileCase{name: "dest/write-to-b-" + o.name, opts: o.opts, live: true, run: func(h *hostile) []answer {
				write(same)(h)
				h.expect(h.mr, 0, payloadOf(16, 21))
				return []answer{ackAt(e0)}
			}},
			hostileCase{name: "dest/read-to-b-" + o.name, opts: o.opts, live: true, run: func(h *hostile) []answer {
				read(same)(h)
				return []answer{readResp(rocev2.RCReadResponseOnly, e0, 64)}
			}})
	}
	return cs
}
