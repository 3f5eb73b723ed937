package rocev2

import (
	"encoding/binary"
	"net/netip"
)

// Headers is everything a RoCEv2 frame carries apart from its payload. Parse
// fills it; Encode turns it back into the same bytes. Which extended
// transport headers are present is decided by BTH.Opcode through the opcode
// table; the others are ignored when encoding and zero after parsing.
// Lengths, the IPv4 checksum and the ICRC are derived, never stored;
// BTH.PadCnt is filled by Parse and ignored by Encode, which derives it
// from the payload length.
type Headers struct {
	Eth          EthernetFields
	IP           IPFields
	UDP          UDPFields
	BTH          BTHFields
	DETH         DETHFields
	FETH         FETHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH AtomicAckETHFields
	// ImmDt is the immediate data of *_WITH_IMMEDIATE opcodes.
	ImmDt uint32
	// IETH is the R_Key a SEND_WITH_INVALIDATE invalidates.
	IETH uint32
}

// Packet is a parsed RoCEv2 frame. Its slices alias the frame passed to
// Parse; nothing is copied.
type Packet struct {
	Headers
	// Payload is the payload without pad bytes.
	Payload []byte
	// ICRC is the ICRC as received (and verified).
	ICRC uint32
	// Frame is the frame up to the end of the IP datagram (the ICRC's last byte).
	Frame []byte
	// Trailer holds bytes after the IP datagram, such as Ethernet padding to
	// the 60-byte minimum. They are not part of the packet.
	Trailer []byte
	// Offsets into Frame, for in-place access with the header views.
	L3Offset, BTHOffset, PayloadOffset int
}

// Parse decodes a RoCEv2 frame (Ethernet, optional 802.1Q tag, IPv4 or IPv6,
// UDP to port 4791, BTH, extended headers, payload, pad, ICRC) into p, in
// one pass and without allocating. It verifies the ICRC and every length
// the opcode implies, and rejects with a *ParseError whose Reason says why.
// It does not validate the UDP source port or checksum (receivers must
// accept any, ROCEV2.md 1.7) nor PSN, QP or P_Key, which are the engine's.
func Parse(frame []byte, p *Packet) error {
	return parse(frame, p, true)
}

// ParseVerified is Parse without the ICRC check, for a copy of a frame that
// Parse already accepted in this process (an engine handing a frame to
// another, say): every length is still checked, the ICRC is read but not
// recomputed.
func ParseVerified(frame []byte, p *Packet) error {
	return parse(frame, p, false)
}

func parse(frame []byte, p *Packet, verifyICRC bool) error {
	*p = Packet{}
	if len(frame) < EthernetLen {
		return errShortEthernet
	}
	copy(p.Eth.Dst[:], frame[0:6])
	copy(p.Eth.Src[:], frame[6:12])
	etherType := binary.BigEndian.Uint16(frame[12:])
	l3 := EthernetLen
	if etherType == EtherTypeVLAN {
		if len(frame) < EthernetLen+VLANTagLen {
			return errShortEthernet
		}
		p.Eth.HasVLAN = true
		p.Eth.VLANTCI = binary.BigEndian.Uint16(frame[14:])
		etherType = binary.BigEndian.Uint16(frame[16:])
		l3 += VLANTagLen
	}

	var end, udp int // end of the IP datagram; offset of the UDP header
	switch etherType {
	case EtherTypeIPv4:
		if len(frame) < l3+IPv4Len {
			return errShortIPv4
		}
		ip := frame[l3 : l3+IPv4Len]
		if ip[0]>>4 != 4 {
			return errIPv4Version
		}
		if ip[0]&0x0F != 5 {
			return errIPv4Options
		}
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if total < IPv4Len {
			return errIPv4TotalLen
		}
		end = l3 + total
		if end > len(frame) {
			return errIPLenBeyond
		}
		frag := binary.BigEndian.Uint16(ip[6:])
		if frag&0x3FFF != 0 { // MF or a fragment offset
			return errIPv4Fragment
		}
		if ip[9] != IPProtoUDP {
			return errNotUDP
		}
		if ipv4Checksum(ip) != 0xFFFF {
			return errIPv4Checksum
		}
		p.IP = IPFields{
			Src:   netip.AddrFrom4([4]byte(ip[12:16])),
			Dst:   netip.AddrFrom4([4]byte(ip[16:20])),
			TOS:   ip[1],
			TTL:   ip[8],
			ID:    binary.BigEndian.Uint16(ip[4:]),
			Flags: uint8(frag >> 13),
		}
		udp = l3 + IPv4Len
	case EtherTypeIPv6:
		if len(frame) < l3+IPv6Len {
			return errShortIPv6
		}
		ip := frame[l3 : l3+IPv6Len]
		if ip[0]>>4 != 6 {
			return errIPv6Version
		}
		end = l3 + IPv6Len + int(binary.BigEndian.Uint16(ip[4:]))
		if end > len(frame) {
			return errIPLenBeyond
		}
		// A RoCEv2 sender puts UDP right after the fixed header; extension
		// headers are not used (IBTA Annex A17.4.4).
		if ip[6] != IPProtoUDP {
			return errNotUDP
		}
		vtf := binary.BigEndian.Uint32(ip)
		p.IP = IPFields{
			Src:       netip.AddrFrom16([16]byte(ip[8:24])),
			Dst:       netip.AddrFrom16([16]byte(ip[24:40])),
			TOS:       uint8(vtf >> 20),
			TTL:       ip[7],
			FlowLabel: vtf & 0xFFFFF,
		}
		udp = l3 + IPv6Len
	default:
		return errEtherType
	}

	// UDP header, BTH and ICRC are the least a RoCEv2 packet holds.
	if end-udp < UDPLen+BTHLen+ICRCLen {
		return errShortUDP
	}
	u := frame[udp : udp+UDPLen]
	if binary.BigEndian.Uint16(u[2:]) != UDPPort {
		return errPort
	}
	if int(binary.BigEndian.Uint16(u[4:])) != end-udp {
		return errUDPLength
	}
	p.UDP = UDPFields{
		SrcPort:  binary.BigEndian.Uint16(u),
		Checksum: binary.BigEndian.Uint16(u[6:]),
	}

	bthOff := udp + UDPLen
	icrcOff := end - ICRCLen
	p.ICRC = GetICRC(frame[icrcOff:end])
	// The ICRC is checked before the transport headers are interpreted, so
	// a corrupted opcode or length reports as corruption.
	if verifyICRC && icrc(frame[l3:icrcOff], bthOff-l3, nil, 0) != p.ICRC {
		return errICRC
	}

	bth := BTH(frame[bthOff : bthOff+BTHLen])
	if bth.TVer() != 0 {
		return errTVer
	}
	p.BTH = bth.Fields()
	info := &opTable[p.BTH.Opcode]
	if !info.Valid {
		return errUnknownOpcode
	}
	off := bthOff + BTHLen
	if icrcOff-off < info.HeaderLen {
		return errOpcodeShort
	}
	if h := info.Headers; h != 0 {
		if h&HasDETH != 0 {
			p.DETH = DETH(frame[off : off+DETHLen]).Fields()
			off += DETHLen
		}
		if h&HasFETH != 0 {
			p.FETH = FETH(frame[off : off+FETHLen]).Fields()
			off += FETHLen
		}
		if h&HasRETH != 0 {
			p.RETH = RETH(frame[off : off+RETHLen]).Fields()
			off += RETHLen
		}
		if h&HasAtomicETH != 0 {
			p.AtomicETH = AtomicETH(frame[off : off+AtomicETHLen]).Fields()
			off += AtomicETHLen
		}
		if h&HasAETH != 0 {
			p.AETH = AETH(frame[off : off+AETHLen]).Fields()
			off += AETHLen
		}
		if h&HasAtomicAckETH != 0 {
			p.AtomicAckETH = AtomicAckETH(frame[off : off+AtomicAckETHLen]).Fields()
			off += AtomicAckETHLen
		}
		if h&HasImmDt != 0 {
			p.ImmDt = binary.BigEndian.Uint32(frame[off:])
			off += ImmDtLen
		}
		if h&HasIETH != 0 {
			p.IETH = binary.BigEndian.Uint32(frame[off:])
			off += IETHLen
		}
	}

	wire := icrcOff - off // payload plus pad
	pad := int(p.BTH.PadCnt)
	switch {
	case !info.Payload && wire != 0:
		return errOpcodePayload
	case pad != 0 && !info.Padded:
		return errPadNotAllowed
	case pad > wire:
		return errPadBeyond
	case wire&3 != 0:
		return errPadMisaligned
	case info.FixedPayload != 0 && wire != info.FixedPayload:
		return errOpcodeFixed
	}
	p.Payload = frame[off : off+wire-pad : off+wire-pad]
	p.Frame = frame[:end:end]
	p.Trailer = frame[end:]
	p.L3Offset, p.BTHOffset, p.PayloadOffset = l3, bthOff, off
	return nil
}

// ipv4Checksum returns the one's-complement sum of a 20-byte header; it is
// 0xFFFF when the header checksum is correct (RFC 1071).
func ipv4Checksum(h []byte) uint16 {
	_ = h[19]
	var s uint32
	for i := 0; i < IPv4Len; i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	s = s>>16 + s&0xFFFF
	s += s >> 16
	return uint16(s)
}
