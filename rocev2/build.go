package rocev2

import (
	"encoding/binary"
	"errors"
)

// Errors Encode and EncodeHeaders return. They describe a caller mistake in
// Headers or the buffer; each is allocated once.
var (
	ErrBufferTooSmall = errors.New("rocev2: encode: buffer too small for the frame")
	ErrEncodeOpcode   = errors.New("rocev2: encode: opcode is not in the opcode table")
	ErrEncodeAddr     = errors.New("rocev2: encode: IP source and destination must both be IPv4 or both IPv6")
	ErrEncodePayload  = errors.New("rocev2: encode: payload length not allowed for the opcode")
	ErrEncodeTooLong  = errors.New("rocev2: encode: packet exceeds the IP length field")
)

// L3Offset returns where the IP header starts.
func (h *Headers) L3Offset() int { return h.Eth.Len() }

// HeaderLen returns how many bytes EncodeHeaders writes: link, IP, UDP, BTH
// and extended transport headers.
func (h *Headers) HeaderLen() int {
	return h.Eth.Len() + h.IP.Len() + UDPLen + BTHLen + opTable[h.BTH.Opcode].HeaderLen
}

// FrameLen returns the length of a frame carrying payloadLen bytes: headers,
// payload, pad and ICRC.
func (h *Headers) FrameLen(payloadLen int) int {
	return h.HeaderLen() + payloadLen + PadCount(payloadLen) + ICRCLen
}

// EncodeHeaders writes the headers of a packet carrying payloadLen payload
// bytes into buf and returns how many bytes it wrote. It derives PadCnt, the
// IP and UDP lengths and the IPv4 checksum from payloadLen, so the caller
// only appends the payload, the pad and the ICRC (see ICRC and PutICRC), or
// calls Encode to do all of it. It does not allocate.
func (h *Headers) EncodeHeaders(buf []byte, payloadLen int) (int, error) {
	info := &opTable[h.BTH.Opcode]
	if !info.Valid {
		return 0, ErrEncodeOpcode
	}
	pad := PadCount(payloadLen)
	switch {
	case payloadLen < 0,
		!info.Payload && payloadLen != 0,
		info.FixedPayload != 0 && payloadLen != info.FixedPayload,
		pad != 0 && !info.Padded:
		return 0, ErrEncodePayload
	}
	v4, ok := sameFamily(h.IP.Src, h.IP.Dst)
	if !ok {
		return 0, ErrEncodeAddr
	}
	n := h.HeaderLen()
	if len(buf) < n {
		return 0, ErrBufferTooSmall
	}
	udpLen := UDPLen + BTHLen + info.HeaderLen + payloadLen + pad + ICRCLen
	// The IPv4 total length is the tighter bound; IPv6 allows 20 bytes more.
	if udpLen+IPv4Len > 0xFFFF {
		return 0, ErrEncodeTooLong
	}

	off := h.Eth.Len()
	if v4 {
		Ethernet(buf[:off]).Encode(&h.Eth, EtherTypeIPv4)
		IPv4(buf[off:off+IPv4Len]).Encode(&h.IP, udpLen)
		off += IPv4Len
	} else {
		Ethernet(buf[:off]).Encode(&h.Eth, EtherTypeIPv6)
		IPv6(buf[off:off+IPv6Len]).Encode(&h.IP, udpLen)
		off += IPv6Len
	}
	UDP(buf[off:off+UDPLen]).Encode(&h.UDP, udpLen)
	off += UDPLen

	bth := h.BTH
	bth.PadCnt = uint8(pad)
	BTH(buf[off : off+BTHLen]).Encode(&bth)
	off += BTHLen
	if hs := info.Headers; hs != 0 {
		if hs&HasDETH != 0 {
			DETH(buf[off : off+DETHLen]).Encode(&h.DETH)
			off += DETHLen
		}
		if hs&HasFETH != 0 {
			FETH(buf[off : off+FETHLen]).Encode(&h.FETH)
			off += FETHLen
		}
		if hs&HasRETH != 0 {
			RETH(buf[off : off+RETHLen]).Encode(&h.RETH)
			off += RETHLen
		}
		if hs&HasAtomicETH != 0 {
			AtomicETH(buf[off : off+AtomicETHLen]).Encode(&h.AtomicETH)
			off += AtomicETHLen
		}
		if hs&HasAETH != 0 {
			AETH(buf[off : off+AETHLen]).Encode(&h.AETH)
			off += AETHLen
		}
		if hs&HasAtomicAckETH != 0 {
			AtomicAckETH(buf[off : off+AtomicAckETHLen]).Encode(&h.AtomicAckETH)
			off += AtomicAckETHLen
		}
		if hs&HasImmDt != 0 {
			binary.BigEndian.PutUint32(buf[off:], h.ImmDt)
			off += ImmDtLen
		}
		if hs&HasIETH != 0 {
			binary.BigEndian.PutUint32(buf[off:], h.IETH)
			off += IETHLen
		}
	}
	return off, nil
}

// Encode writes a complete frame into buf: the headers, payload, zero pad
// and ICRC. It returns the frame length. payload may already sit in buf at
// HeaderLen(); the copy is then a no-op move. It does not allocate.
func (h *Headers) Encode(buf, payload []byte) (int, error) {
	n, err := h.EncodeHeaders(buf, len(payload))
	if err != nil {
		return 0, err
	}
	pad := PadCount(len(payload))
	total := n + len(payload) + pad + ICRCLen
	if len(buf) < total {
		return 0, ErrBufferTooSmall
	}
	copy(buf[n:], payload)
	end := n + len(payload)
	copy(buf[end:end+pad], zeroPad[:pad])
	l3 := h.L3Offset()
	crc := icrc(buf[l3:end+pad], h.IP.Len()+UDPLen, nil, 0)
	PutICRC(buf[end+pad:], crc)
	return total, nil
}
