package rocev2

import "encoding/binary"

// UDPFields holds the UDP header. The destination port is always UDPPort
// and the length is derived when encoding.
type UDPFields struct {
	// SrcPort is a per-QP flow identifier (see UDPSourcePort); receivers
	// must not validate it.
	SrcPort uint16
	// Checksum is sent as given. Every observed RoCEv2 sender sends 0, and
	// the field is masked out of the ICRC.
	Checksum uint16
}

// UDP is a UDP header, a view over 8 bytes (RFC 768):
//
//	bytes 0-1  source port
//	bytes 2-3  destination port
//	bytes 4-5  length, header included
//	bytes 6-7  checksum
type UDP []byte

// Offsets in a UDP header.
const (
	udpSrcPort = 0
	udpDstPort = 2
	udpLength  = 4
	udpXSum    = 6
)

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u[udpSrcPort:]) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[udpDstPort:]) }

// Length returns the length of header and payload.
func (u UDP) Length() uint16 { return binary.BigEndian.Uint16(u[udpLength:]) }

// Checksum returns the checksum.
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[udpXSum:]) }

// Fields decodes u.
func (u UDP) Fields() UDPFields { return UDPFields{SrcPort: u.SrcPort(), Checksum: u.Checksum()} }

// Encode writes f into u, with destination port UDPPort and length, the
// header's included.
func (u UDP) Encode(f *UDPFields, length int) {
	_ = u[UDPLen-1]
	binary.BigEndian.PutUint16(u[udpSrcPort:], f.SrcPort)
	binary.BigEndian.PutUint16(u[udpDstPort:], UDPPort)
	binary.BigEndian.PutUint16(u[udpLength:], uint16(length))
	binary.BigEndian.PutUint16(u[udpXSum:], f.Checksum)
}

// FlowLabel returns rdma_calc_flow_label(lqpn, rqpn): a 20-bit hash of the QP
// pair (torvalds/linux include/rdma/ib_verbs.h).
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// UDPSourcePort returns rdma_get_udp_sport(fl, lqpn, rqpn), the UDP source
// port Linux RoCE drivers (mlx5, irdma, hns, rxe) use for a QP: the flow
// label, derived from the QP numbers when fl is 0, folded to 14 bits and
// placed in 0xC000-0xFFFF (torvalds/linux include/rdma/ib_verbs.h; ROCEV2.md 1.7).
func UDPSourcePort(fl, lqpn, rqpn uint32) uint16 {
	if fl == 0 {
		fl = FlowLabel(lqpn, rqpn)
	}
	low := fl & 0x3FFF
	low ^= (fl & 0xFC000) >> 14
	return uint16(low | 0xC000)
}
