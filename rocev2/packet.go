package rocev2

import "encoding/binary"

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

// parse takes the frame apart layer by layer, each layer checking its own
// header and bounding the next: link, IP, UDP, then, once the ICRC
// verified, the InfiniBand transport.
func parse(frame []byte, p *Packet, verifyICRC bool) error {
	*p = Packet{}
	etherType, l3, err := parseEthernet(frame, &p.Eth)
	if err != nil {
		return err
	}
	var udp, end int // offset of the UDP header; end of the IP datagram
	switch etherType {
	case EtherTypeIPv4:
		udp, end, err = parseIPv4(frame, l3, &p.IP)
	case EtherTypeIPv6:
		udp, end, err = parseIPv6(frame, l3, &p.IP)
	default:
		return errEtherType
	}
	if err != nil {
		return err
	}
	if err := parseUDP(frame[udp:end], &p.UDP); err != nil {
		return err
	}

	bthOff := udp + UDPLen
	icrcOff := end - ICRCLen
	p.ICRC = GetICRC(frame[icrcOff:end])
	// The ICRC is checked before the transport headers are interpreted, so
	// a corrupted opcode or length reports as corruption.
	if verifyICRC && icrc(frame[l3:icrcOff], bthOff-l3, nil, 0) != p.ICRC {
		return errICRC
	}
	off, err := parseTransport(frame[:icrcOff], bthOff, p)
	if err != nil {
		return err
	}
	p.Frame = frame[:end:end]
	p.Trailer = frame[end:]
	p.L3Offset, p.BTHOffset, p.PayloadOffset = l3, bthOff, off
	return nil
}

// parseEthernet decodes the link header into f and returns the EtherType
// of its payload and where that payload starts.
func parseEthernet(frame []byte, f *EthernetFields) (etherType uint16, l3 int, err error) {
	if len(frame) < EthernetLen {
		return 0, 0, errShortEthernet
	}
	e := Ethernet(frame)
	f.Dst, f.Src = e.Dst(), e.Src()
	if !e.HasVLAN() {
		return e.EtherType(), EthernetLen, nil
	}
	if len(frame) < EthernetLen+VLANTagLen {
		return 0, 0, errShortEthernet
	}
	f.HasVLAN, f.VLANTCI = true, e.VLANTCI()
	return e.EtherType(), EthernetLen + VLANTagLen, nil
}

// parseIPv4 decodes the IPv4 header at frame[l3:] into f and returns where
// the UDP header starts and the datagram ends.
func parseIPv4(frame []byte, l3 int, f *IPFields) (udp, end int, err error) {
	if len(frame) < l3+IPv4Len {
		return 0, 0, errShortIPv4
	}
	ip := IPv4(frame[l3 : l3+IPv4Len])
	if ip.Version() != 4 {
		return 0, 0, errIPv4Version
	}
	if ip.IHL() != IPv4Len/4 {
		return 0, 0, errIPv4Options
	}
	total := int(ip.TotalLen())
	if total < IPv4Len {
		return 0, 0, errIPv4TotalLen
	}
	end = l3 + total
	if end > len(frame) {
		return 0, 0, errIPLenBeyond
	}
	if ip.IsFragment() {
		return 0, 0, errIPv4Fragment
	}
	if ip.Protocol() != IPProtoUDP {
		return 0, 0, errNotUDP
	}
	if !ip.IsChecksumValid() {
		return 0, 0, errIPv4Checksum
	}
	ip.decode(f)
	return l3 + IPv4Len, end, nil
}

// parseIPv6 decodes the IPv6 header at frame[l3:] into f and returns where
// the UDP header starts and the datagram ends.
func parseIPv6(frame []byte, l3 int, f *IPFields) (udp, end int, err error) {
	if len(frame) < l3+IPv6Len {
		return 0, 0, errShortIPv6
	}
	ip := IPv6(frame[l3 : l3+IPv6Len])
	if ip.Version() != 6 {
		return 0, 0, errIPv6Version
	}
	end = l3 + IPv6Len + int(ip.PayloadLen())
	if end > len(frame) {
		return 0, 0, errIPLenBeyond
	}
	// A RoCEv2 sender puts UDP right after the fixed header; extension
	// headers are not used (IBTA Annex A17.4.4).
	if ip.NextHeader() != IPProtoUDP {
		return 0, 0, errNotUDP
	}
	ip.decode(f)
	return l3 + IPv6Len, end, nil
}

// parseUDP decodes the UDP header at the start of the IP payload seg into f.
func parseUDP(seg []byte, f *UDPFields) error {
	// UDP header, BTH and ICRC are the least a RoCEv2 packet holds.
	if len(seg) < UDPLen+BTHLen+ICRCLen {
		return errShortUDP
	}
	u := UDP(seg[:UDPLen])
	if u.DstPort() != UDPPort {
		return errPort
	}
	if int(u.Length()) != len(seg) {
		return errUDPLength
	}
	*f = u.Fields()
	return nil
}

// parseTransport decodes the BTH at frame[bthOff:], the extended headers
// its opcode implies and the payload, which with its pad runs to the end
// of frame, where the ICRC starts. It returns the payload's offset.
func parseTransport(frame []byte, bthOff int, p *Packet) (int, error) {
	bth := BTH(frame[bthOff : bthOff+BTHLen])
	if bth.TVer() != 0 {
		return 0, errTVer
	}
	bth.decode(&p.BTH)
	info := &opTable[p.BTH.Opcode]
	if !info.Valid {
		return 0, errUnknownOpcode
	}
	off := bthOff + BTHLen
	if len(frame)-off < info.HeaderLen {
		return 0, errOpcodeShort
	}
	if hs := info.Headers; hs != 0 {
		if hs&HasDETH != 0 {
			p.DETH = DETH(frame[off : off+DETHLen]).Fields()
			off += DETHLen
		}
		if hs&HasFETH != 0 {
			p.FETH = FETH(frame[off : off+FETHLen]).Fields()
			off += FETHLen
		}
		if hs&HasRETH != 0 {
			p.RETH = RETH(frame[off : off+RETHLen]).Fields()
			off += RETHLen
		}
		if hs&HasAtomicETH != 0 {
			p.AtomicETH = AtomicETH(frame[off : off+AtomicETHLen]).Fields()
			off += AtomicETHLen
		}
		if hs&HasAETH != 0 {
			p.AETH = AETH(frame[off : off+AETHLen]).Fields()
			off += AETHLen
		}
		if hs&HasAtomicAckETH != 0 {
			p.AtomicAckETH = AtomicAckETH(frame[off : off+AtomicAckETHLen]).Fields()
			off += AtomicAckETHLen
		}
		if hs&HasImmDt != 0 {
			p.ImmDt = binary.BigEndian.Uint32(frame[off:])
			off += ImmDtLen
		}
		if hs&HasIETH != 0 {
			p.IETH = binary.BigEndian.Uint32(frame[off:])
			off += IETHLen
		}
	}

	wire := len(frame) - off // payload plus pad
	pad := int(p.BTH.PadCnt)
	switch {
	case !info.Payload && wire != 0:
		return 0, errOpcodePayload
	case pad != 0 && !info.Padded:
		return 0, errPadNotAllowed
	case pad > wire:
		return 0, errPadBeyond
	case wire&3 != 0:
		return 0, errPadMisaligned
	case info.FixedPayload != 0 && wire != info.FixedPayload:
		return 0, errOpcodeFixed
	}
	p.Payload = frame[off : off+wire-pad : off+wire-pad]
	return off, nil
}
