package rocev2

import (
	"encoding/binary"
	"net/netip"
)

// IPFields holds the network header. Src and Dst decide the version: both
// must be IPv4 (not IPv4-mapped IPv6) or both IPv6. Lengths and the IPv4
// checksum are derived when encoding.
type IPFields struct {
	Src, Dst netip.Addr
	// TOS is the IPv4 TOS or the IPv6 traffic class: DSCP(7:2) ECN(1:0).
	TOS uint8
	// TTL is the IPv4 TTL or the IPv6 hop limit.
	TTL uint8
	// ID is the IPv4 identification (rxe counts up, Huawei sends 0).
	ID uint16
	// Flags holds the three IPv4 flag bits (reserved, DF, MF). Set
	// IPv4FlagDF; NewIPFields does.
	Flags uint8
	// FlowLabel is the 20-bit IPv6 flow label.
	FlowLabel uint32
}

// NewIPFields returns the network header RoCEv2 senders use between src and
// dst: DF set on IPv4, TTL/hop limit 64, everything else zero.
func NewIPFields(src, dst netip.Addr) IPFields {
	return IPFields{Src: src, Dst: dst, TTL: DefaultTTL, Flags: IPv4FlagDF}
}

// sameFamily reports whether a and b are both IPv4 or both IPv6 (IPv4-mapped
// IPv6 counts as IPv6), and whether that is IPv4.
func sameFamily(a, b netip.Addr) (v4, ok bool) {
	if a.Is4() && b.Is4() {
		return true, true
	}
	return false, a.Is6() && b.Is6()
}

// Is4 reports whether f describes IPv4.
func (f *IPFields) Is4() bool { return f.Src.Is4() }

// Len returns the IP header length.
func (f *IPFields) Len() int {
	if f.Is4() {
		return IPv4Len
	}
	return IPv6Len
}

// IPv4 is an IPv4 header without options, a view over 20 bytes (RFC 791
// 3.1):
//
//	byte 0       Version(7:4) IHL(3:0)
//	byte 1       TOS: DSCP(7:2) ECN(1:0)
//	bytes 2-3    total length
//	bytes 4-5    identification
//	bytes 6-7    flags(15:13) fragment offset(12:0)
//	byte 8       TTL
//	byte 9       protocol
//	bytes 10-11  header checksum
//	bytes 12-15  source address
//	bytes 16-19  destination address
type IPv4 []byte

// Offsets in an IPv4 header.
const (
	ipv4VersIHL   = 0
	ipv4TOS       = 1
	ipv4TotalLen  = 2
	ipv4ID        = 4
	ipv4FlagsFrag = 6
	ipv4TTL       = 8
	ipv4Protocol  = 9
	ipv4XSum      = 10
	ipv4Src       = 12
	ipv4Dst       = 16
)

// Version returns the IP version (4).
func (b IPv4) Version() uint8 { return b[ipv4VersIHL] >> 4 }

// IHL returns the header length in 32-bit words (5 without options).
func (b IPv4) IHL() uint8 { return b[ipv4VersIHL] & 0x0F }

// TOS returns the type of service byte.
func (b IPv4) TOS() uint8 { return b[ipv4TOS] }

// TotalLen returns the length of the datagram, header included.
func (b IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(b[ipv4TotalLen:]) }

// ID returns the identification.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[ipv4ID:]) }

// Flags returns the three flag bits: reserved, DF, MF.
func (b IPv4) Flags() uint8 { return uint8(binary.BigEndian.Uint16(b[ipv4FlagsFrag:]) >> 13) }

// IsFragment reports whether b is part of a fragmented datagram: MF set or
// a nonzero fragment offset.
func (b IPv4) IsFragment() bool { return binary.BigEndian.Uint16(b[ipv4FlagsFrag:])&0x3FFF != 0 }

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[ipv4TTL] }

// Protocol returns the protocol of the payload.
func (b IPv4) Protocol() uint8 { return b[ipv4Protocol] }

// Checksum returns the header checksum.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[ipv4XSum:]) }

// Src returns the source address.
func (b IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(b[ipv4Src : ipv4Src+4])) }

// Dst returns the destination address.
func (b IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(b[ipv4Dst : ipv4Dst+4])) }

// IsChecksumValid reports whether the header checksum verifies.
func (b IPv4) IsChecksumValid() bool { return ipv4Checksum(b) == 0xFFFF }

// Fields decodes b.
func (b IPv4) Fields() IPFields {
	var f IPFields
	b.decode(&f)
	return f
}

// decode is Fields into f, for Parse (see BTH.decode).
func (b IPv4) decode(f *IPFields) {
	*f = IPFields{Src: b.Src(), Dst: b.Dst(), TOS: b.TOS(), TTL: b.TTL(), ID: b.ID(), Flags: b.Flags()}
}

// Encode writes f into b for a datagram carrying payloadLen bytes after
// the header, the checksum included. The checksum is summed from the
// values as they are written: reading them back from b would wait on the
// stores.
func (b IPv4) Encode(f *IPFields, payloadLen int) {
	_ = b[IPv4Len-1]
	total := uint16(IPv4Len + payloadLen)
	flags := uint16(f.Flags&7) << 13
	src, dst := f.Src.As4(), f.Dst.As4()
	s, d := binary.BigEndian.Uint32(src[:]), binary.BigEndian.Uint32(dst[:])
	b[ipv4VersIHL] = 4<<4 | IPv4Len/4
	b[ipv4TOS] = f.TOS
	binary.BigEndian.PutUint16(b[ipv4TotalLen:], total)
	binary.BigEndian.PutUint16(b[ipv4ID:], f.ID)
	binary.BigEndian.PutUint16(b[ipv4FlagsFrag:], flags)
	b[ipv4TTL] = f.TTL
	b[ipv4Protocol] = IPProtoUDP
	binary.BigEndian.PutUint32(b[ipv4Src:], s)
	binary.BigEndian.PutUint32(b[ipv4Dst:], d)
	sum := uint32(4<<4|IPv4Len/4)<<8 | uint32(f.TOS)
	sum += uint32(total) + uint32(f.ID) + uint32(flags) + (uint32(f.TTL)<<8 | IPProtoUDP)
	sum += s>>16 + s&0xFFFF + d>>16 + d&0xFFFF
	binary.BigEndian.PutUint16(b[ipv4XSum:], ^foldChecksum(sum))
}

// ipv4Checksum returns the one's-complement sum of a 20-byte header; it is
// 0xFFFF when the header checksum is correct (RFC 1071).
func ipv4Checksum(h []byte) uint16 {
	_ = h[19]
	var s uint32
	for i := 0; i < IPv4Len; i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	return foldChecksum(s)
}

// foldChecksum folds the carries of a sum of at most 2^16 16-bit words
// back into 16 bits (RFC 1071 4.1).
func foldChecksum(s uint32) uint16 {
	s = s>>16 + s&0xFFFF
	s += s >> 16
	return uint16(s)
}

// IPv6 is the fixed IPv6 header, a view over 40 bytes (RFC 8200 3):
//
//	bytes 0-3    Version(31:28) traffic class(27:20) flow label(19:0)
//	bytes 4-5    payload length
//	byte 6       next header
//	byte 7       hop limit
//	bytes 8-23   source address
//	bytes 24-39  destination address
type IPv6 []byte

// Offsets in an IPv6 header.
const (
	ipv6VersTCFL   = 0
	ipv6PayloadLen = 4
	ipv6NextHeader = 6
	ipv6HopLimit   = 7
	ipv6Src        = 8
	ipv6Dst        = 24
)

// Version returns the IP version (6).
func (b IPv6) Version() uint8 { return b[ipv6VersTCFL] >> 4 }

// TrafficClass returns the traffic class: DSCP(7:2) ECN(1:0).
func (b IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint32(b[ipv6VersTCFL:]) >> 20) }

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(b[ipv6VersTCFL:]) & 0xFFFFF }

// PayloadLen returns the length of what follows the fixed header.
func (b IPv6) PayloadLen() uint16 { return binary.BigEndian.Uint16(b[ipv6PayloadLen:]) }

// NextHeader returns the type of the header after the fixed one.
func (b IPv6) NextHeader() uint8 { return b[ipv6NextHeader] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[ipv6HopLimit] }

// Src returns the source address.
func (b IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(b[ipv6Src : ipv6Src+16])) }

// Dst returns the destination address.
func (b IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(b[ipv6Dst : ipv6Dst+16])) }

// Fields decodes b.
func (b IPv6) Fields() IPFields {
	var f IPFields
	b.decode(&f)
	return f
}

// decode is Fields into f, for Parse (see BTH.decode).
func (b IPv6) decode(f *IPFields) {
	*f = IPFields{Src: b.Src(), Dst: b.Dst(), TOS: b.TrafficClass(), TTL: b.HopLimit(), FlowLabel: b.FlowLabel()}
}

// Encode writes f into b for a datagram carrying payloadLen bytes after
// the header.
func (b IPv6) Encode(f *IPFields, payloadLen int) {
	// Dst first: its bounds check covers every later store.
	*(*[16]byte)(b[ipv6Dst:]) = f.Dst.As16()
	*(*[16]byte)(b[ipv6Src:]) = f.Src.As16()
	binary.BigEndian.PutUint32(b[ipv6VersTCFL:], 6<<28|uint32(f.TOS)<<20|f.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(b[ipv6PayloadLen:], uint16(payloadLen))
	b[ipv6NextHeader] = IPProtoUDP
	b[ipv6HopLimit] = f.TTL
}
