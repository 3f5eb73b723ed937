package rocev2

import (
	"encoding/binary"
	"hash/crc32"
)

// icrcSeed is crc32.ChecksumIEEE of eight 0xFF bytes, the stand-in for the
// InfiniBand LRH that RoCEv2 does not carry (ROCEV2.md 1.8 step 3). Using it
// as the starting value of crc32.Update continues the CRC after them.
const icrcSeed = 0x2144DF1C

// maxMasked is the longest span the ICRC masks: IPv6, UDP and BTH headers.
// Every masked field lies inside it, so only this much is copied.
const maxMasked = IPv6Len + UDPLen + BTHLen

var zeroPad [3]byte

// ICRC returns the invariant CRC of a RoCEv2 packet. hdr starts at the IP
// header and holds at least the IP, UDP and BTH headers, usually all
// transport headers; payload is what follows it on the wire, without pad;
// pad is the number of zero pad bytes after the payload (0-3). Splitting
// headers and payload lets the engine checksum a frame built from a header
// buffer and a separate payload buffer.
//
// The IPv4 TOS, TTL and header checksum (or the IPv6 traffic class, flow
// label and hop limit), the UDP checksum and BTH byte 4 count as all ones;
// the CRC is the IEEE CRC-32 over eight 0xFF bytes followed by the masked
// packet (IBTA Annex A17.3.3; rxe_icrc.c; ROCEV2.md 1.8). The hot path runs
// on the accelerated crc32.IEEETable implementation and copies no more than
// 60 header bytes.
func ICRC(hdr, payload []byte, pad int) (uint32, error) {
	bthOff, err := icrcBTHOffset(hdr)
	if err != nil {
		return 0, err
	}
	return icrc(hdr, bthOff, payload, pad&3), nil
}

func icrcBTHOffset(hdr []byte) (int, error) {
	if len(hdr) == 0 {
		return 0, errICRCShortHeader
	}
	var bthOff int
	switch hdr[0] >> 4 {
	case 4:
		bthOff = IPv4Len + UDPLen
	case 6:
		bthOff = IPv6Len + UDPLen
	default:
		return 0, errICRCIPVersion
	}
	if len(hdr) < bthOff+BTHLen {
		return 0, errICRCShortHeader
	}
	return bthOff, nil
}

// icrc computes the ICRC with the BTH at hdr[bthOff:]; the caller has
// checked the lengths.
func icrc(hdr []byte, bthOff int, payload []byte, pad int) uint32 {
	var m [maxMasked]byte
	n := bthOff + BTHLen
	copy(m[:n], hdr)
	if bthOff == IPv4Len+UDPLen {
		m[ipv4TOS] = 0xFF
		m[ipv4TTL] = 0xFF
		m[ipv4XSum], m[ipv4XSum+1] = 0xFF, 0xFF
		m[IPv4Len+udpXSum], m[IPv4Len+udpXSum+1] = 0xFF, 0xFF
	} else {
		// Traffic class and flow label: all of bytes 0-3 but the version.
		m[ipv6VersTCFL] |= 0x0F
		m[ipv6VersTCFL+1], m[ipv6VersTCFL+2], m[ipv6VersTCFL+3] = 0xFF, 0xFF, 0xFF
		m[ipv6HopLimit] = 0xFF
		m[IPv6Len+udpXSum], m[IPv6Len+udpXSum+1] = 0xFF, 0xFF
	}
	m[bthOff+4] = 0xFF // FECN, BECN, resv6
	crc := crcMasked(icrcSeed, m[:n])
	crc = crc32.Update(crc, crc32.IEEETable, hdr[n:])
	crc = crc32.Update(crc, crc32.IEEETable, payload)
	return crc32.Update(crc, crc32.IEEETable, zeroPad[:pad])
}

// ieee8 holds the slicing-by-8 tables of the IEEE polynomial.
var ieee8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		for k := 1; k < 8; k++ {
			t[k][i] = t[k-1][i]>>8 ^ t[0][t[k-1][i]&0xFF]
		}
	}
	return t
}()

// crcMasked continues an IEEE CRC-32 like crc32.Update over the masked copy
// of the headers. crc32.Update reaches its accelerated code through a
// function variable, which would move the caller's stack buffer to the heap;
// this loop keeps it on the stack, and for at most 60 bytes it is as fast.
func crcMasked(crc uint32, p []byte) uint32 {
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = ieee8[0][p[7]] ^ ieee8[1][p[6]] ^ ieee8[2][p[5]] ^ ieee8[3][p[4]] ^
			ieee8[4][crc>>24] ^ ieee8[5][crc>>16&0xFF] ^ ieee8[6][crc>>8&0xFF] ^ ieee8[7][crc&0xFF]
		p = p[8:]
	}
	for _, v := range p {
		crc = ieee8[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// PutICRC writes crc in wire order: least significant byte first, like the
// Ethernet FCS (ROCEV2.md 1.8 step 5).
func PutICRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// GetICRC reads a wire-order ICRC.
func GetICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
