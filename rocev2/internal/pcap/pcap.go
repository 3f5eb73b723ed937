// Package pcap reads classic libpcap capture files (not pcapng), enough for
// tests to replay captured frames. It reads the whole file into memory.
//
// It is not a general capture library: no writing, no pcapng, no filters.
//
//	f, err := pcap.ReadFile("capture.pcap")
//	for _, r := range f.Records { ... r.Data ... }
package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// Link types this project meets (tcpdump.org/linktypes.html).
const (
	LinkTypeEthernet = 1
	LinkTypeERF      = 197
)

// File is a decoded capture.
type File struct {
	LinkType uint32
	Snaplen  uint32
	Records  []Record
}

// Record is one captured packet. Data aliases the file contents.
type Record struct {
	Index   int // 1-based, as Wireshark numbers frames
	Sec     uint32
	Frac    uint32 // microseconds, or nanoseconds for nanosecond files
	OrigLen uint32
	Data    []byte
}

// ErrFormat reports a file that is not a classic pcap file or is damaged.
var ErrFormat = errors.New("pcap: bad format")

// ReadFile reads and decodes the capture at path.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read capture: %w", err)
	}
	f, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return f, nil
}

// Decode decodes a capture held in memory.
func Decode(b []byte) (*File, error) {
	if len(b) < 24 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the 24-byte file header", ErrFormat, len(b))
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(b) {
	case 0xA1B2C3D4, 0xA1B23C4D: // microsecond, nanosecond
		bo = binary.LittleEndian
	case 0xD4C3B2A1, 0x4D3CB2A1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("%w: magic %#08x is not a classic pcap magic", ErrFormat, binary.LittleEndian.Uint32(b))
	}
	f := &File{Snaplen: bo.Uint32(b[16:]), LinkType: bo.Uint32(b[20:]) & 0x0FFFFFFF}
	off := 24
	for i := 1; off < len(b); i++ {
		if len(b)-off < 16 {
			return nil, fmt.Errorf("%w: record %d header truncated at offset %d", ErrFormat, i, off)
		}
		incl := int(bo.Uint32(b[off+8:]))
		if incl > len(b)-off-16 {
			return nil, fmt.Errorf("%w: record %d claims %d bytes, %d remain", ErrFormat, i, incl, len(b)-off-16)
		}
		f.Records = append(f.Records, Record{
			Index:   i,
			Sec:     bo.Uint32(b[off:]),
			Frac:    bo.Uint32(b[off+4:]),
			OrigLen: bo.Uint32(b[off+12:]),
			Data:    b[off+16 : off+16+incl : off+16+incl],
		})
		off += 16 + incl
	}
	return f, nil
}
