package rocev2

import "encoding/binary"

// MAC is an Ethernet address. It is a value so that Packet holds no pointers
// into, or copies of, anything but the frame.
type MAC [6]byte

func (m MAC) String() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 17)
	for i, v := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[v>>4], hex[v&0xF])
	}
	return string(b)
}

// EthernetFields holds the link header. With HasVLAN the frame carries one
// 802.1Q tag (TPID 0x8100) whose TCI is VLANTCI: PCP(15:13) DEI(12) VID(11:0).
type EthernetFields struct {
	Dst, Src MAC
	HasVLAN  bool
	VLANTCI  uint16
}

// VLANID returns the VLAN identifier of the tag.
func (e *EthernetFields) VLANID() uint16 { return e.VLANTCI & 0x0FFF }

// VLANPriority returns the PCP of the tag, which PFC uses for lossless RoCE.
func (e *EthernetFields) VLANPriority() uint8 { return uint8(e.VLANTCI >> 13) }

// Len returns the link header length, tag included.
func (e *EthernetFields) Len() int {
	if e.HasVLAN {
		return EthernetLen + VLANTagLen
	}
	return EthernetLen
}

// Ethernet is the link header, a view over 14 bytes, or 18 when it carries
// one 802.1Q tag:
//
//	bytes 0-5    destination MAC
//	bytes 6-11   source MAC
//	bytes 12-13  EtherType, or the tag's TPID 0x8100
//	bytes 14-15  tag TCI: PCP(15:13) DEI(12) VID(11:0)   (tagged only)
//	bytes 16-17  EtherType                              (tagged only)
type Ethernet []byte

// Offsets in an Ethernet header.
const (
	ethDst      = 0
	ethSrc      = 6
	ethType     = 12
	ethVLANTCI  = 14
	ethVLANType = 16
)

// Dst returns the destination MAC.
func (e Ethernet) Dst() MAC { return MAC(e[ethDst : ethDst+6]) }

// Src returns the source MAC.
func (e Ethernet) Src() MAC { return MAC(e[ethSrc : ethSrc+6]) }

// HasVLAN reports whether an 802.1Q tag follows the source MAC; e then
// holds 18 bytes.
func (e Ethernet) HasVLAN() bool { return binary.BigEndian.Uint16(e[ethType:]) == EtherTypeVLAN }

// VLANTCI returns the tag's TCI; e must be tagged.
func (e Ethernet) VLANTCI() uint16 { return binary.BigEndian.Uint16(e[ethVLANTCI:]) }

// EtherType returns the type of the payload, the one after the tag if
// there is one.
func (e Ethernet) EtherType() uint16 {
	if e.HasVLAN() {
		return binary.BigEndian.Uint16(e[ethVLANType:])
	}
	return binary.BigEndian.Uint16(e[ethType:])
}

// Fields decodes e.
func (e Ethernet) Fields() EthernetFields {
	f := EthernetFields{Dst: e.Dst(), Src: e.Src(), HasVLAN: e.HasVLAN()}
	if f.HasVLAN {
		f.VLANTCI = e.VLANTCI()
	}
	return f
}

// Encode writes f into e, with etherType as the type of the payload; e
// holds f.Len() bytes.
func (e Ethernet) Encode(f *EthernetFields, etherType uint16) {
	copy(e[ethDst:ethDst+6], f.Dst[:])
	copy(e[ethSrc:ethSrc+6], f.Src[:])
	if f.HasVLAN {
		binary.BigEndian.PutUint16(e[ethType:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(e[ethVLANTCI:], f.VLANTCI)
		binary.BigEndian.PutUint16(e[ethVLANType:], etherType)
		return
	}
	binary.BigEndian.PutUint16(e[ethType:], etherType)
}
