package pcapfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"
)

// Link types this project meets (https://www.tcpdump.org/linktypes.html).
const (
	LinkTypeEthernet = 1
	LinkTypeERF      = 197
)

// DefaultSnaplen is the snapshot length NewWriter uses when given 0: the
// value tcpdump uses, larger than any frame ndkxdp moves.
const DefaultSnaplen = 262144

// Magic numbers of the file header, as read in the writer's byte order
// (pcap-savefile(5); the nanosecond variant is libpcap's
// NSEC_TCPDUMP_MAGIC).
const (
	magicMicro = 0xA1B2C3D4
	magicNano  = 0xA1B23C4D
)

const (
	fileHeaderLen   = 24
	recordHeaderLen = 16
	versionMajor    = 2
	versionMinor    = 4
)

// ErrFormat reports a file that is not a classic pcap file or is damaged.
var ErrFormat = errors.New("pcapfile: bad format")

// Writer appends packets to a capture. It is safe for concurrent use, so
// several ports may record into one file; each packet reaches the
// underlying writer in one Write call.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	snaplen uint32
	buf     []byte // record header + data, reused
	err     error  // first write error; every later call returns it
}

// NewWriter writes the file header to w and returns a Writer that appends
// packets of the given link type, truncated to snaplen bytes (0 means
// DefaultSnaplen).
func NewWriter(w io.Writer, snaplen, linkType uint32) (*Writer, error) {
	if snaplen == 0 {
		snaplen = DefaultSnaplen
	}
	var h [fileHeaderLen]byte
	le := binary.LittleEndian
	le.PutUint32(h[0:], magicNano)
	le.PutUint16(h[4:], versionMajor)
	le.PutUint16(h[6:], versionMinor)
	// h[8:16]: thiszone and sigfigs, always 0 in practice.
	le.PutUint32(h[16:], snaplen)
	le.PutUint32(h[20:], linkType)
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("pcapfile: write file header: %w", err)
	}
	return &Writer{w: w, snaplen: snaplen}, nil
}

// WritePacket appends one packet captured at ts. Data beyond the snapshot
// length is cut off; the record still states the original length. A
// timestamp pcap cannot hold (its seconds are 32 unsigned bits) is an error
// and writes nothing. After a failed write the Writer keeps returning that
// error.
func (w *Writer) WritePacket(ts time.Time, data []byte) error {
	return w.WritePacketLen(ts, data, len(data))
}

// WritePacketLen is WritePacket for data already cut from a packet of
// orig bytes (a capture that kept only the first bytes).
func (w *Writer) WritePacketLen(ts time.Time, data []byte, orig int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	sec := ts.Unix()
	if sec < 0 || sec > math.MaxUint32 {
		return fmt.Errorf("pcapfile: timestamp %v outside what pcap records (1970 to 2106)", ts)
	}
	incl := min(len(data), int(w.snaplen))
	need := recordHeaderLen + incl
	if cap(w.buf) < need {
		w.buf = make([]byte, need)
	}
	b := w.buf[:need]
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(sec))
	le.PutUint32(b[4:], uint32(ts.Nanosecond()))
	le.PutUint32(b[8:], uint32(incl))
	le.PutUint32(b[12:], uint32(max(orig, len(data))))
	copy(b[recordHeaderLen:], data[:incl])
	if _, err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("pcapfile: write %d-byte packet: %w", len(data), err)
		return w.err
	}
	return nil
}

// Err returns the first write error, or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// File is a capture read into memory.
type File struct {
	LinkType uint32
	Snaplen  uint32
	// Nanosecond reports whether the file stores nanoseconds (else
	// microseconds) in its timestamps.
	Nanosecond bool
	Packets    []Packet
}

// Packet is one captured packet.
type Packet struct {
	Index   int // 1-based, as Wireshark numbers frames
	Time    time.Time
	OrigLen int    // length on the wire; len(Data) is less if truncated
	Data    []byte // aliases the file contents
}

// ReadFile reads the whole capture at path.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pcapfile: %w", err)
	}
	f, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Read reads a whole capture from r.
func Read(r io.Reader) (*File, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("pcapfile: read capture: %w", err)
	}
	return Decode(b)
}

// Decode decodes a capture held in memory; the packets alias b.
func Decode(b []byte) (*File, error) {
	if len(b) < fileHeaderLen {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the %d-byte file header", ErrFormat, len(b), fileHeaderLen)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	f := &File{}
	switch magic := binary.LittleEndian.Uint32(b); magic {
	case magicMicro:
	case magicNano:
		f.Nanosecond = true
	default:
		bo = binary.BigEndian
		switch bo.Uint32(b) {
		case magicMicro:
		case magicNano:
			f.Nanosecond = true
		default:
			return nil, fmt.Errorf("%w: magic %#08x is not a classic pcap magic (pcapng is not supported)", ErrFormat, magic)
		}
	}
	if major := bo.Uint16(b[4:]); major != versionMajor {
		return nil, fmt.Errorf("%w: version %d.%d, want 2.x", ErrFormat, major, bo.Uint16(b[6:]))
	}
	f.Snaplen = bo.Uint32(b[16:])
	// The upper bits of the link type field carry the FCS length
	// (pcap-savefile(5), "LinkType and additional information").
	f.LinkType = bo.Uint32(b[20:]) & 0x0FFFFFFF
	fracUnit := int64(time.Microsecond)
	if f.Nanosecond {
		fracUnit = 1
	}
	off := fileHeaderLen
	for i := 1; off < len(b); i++ {
		if len(b)-off < recordHeaderLen {
			return nil, fmt.Errorf("%w: packet %d: record header truncated at offset %d", ErrFormat, i, off)
		}
		incl := int(bo.Uint32(b[off+8:]))
		if incl > len(b)-off-recordHeaderLen {
			return nil, fmt.Errorf("%w: packet %d at offset %d claims %d bytes, %d remain", ErrFormat, i, off, incl, len(b)-off-recordHeaderLen)
		}
		data := b[off+recordHeaderLen : off+recordHeaderLen+incl : off+recordHeaderLen+incl]
		f.Packets = append(f.Packets, Packet{
			Index:   i,
			Time:    time.Unix(int64(bo.Uint32(b[off:])), int64(bo.Uint32(b[off+4:]))*fracUnit),
			OrigLen: int(bo.Uint32(b[off+12:])),
			Data:    data,
		})
		off += recordHeaderLen + incl
	}
	return f, nil
}
