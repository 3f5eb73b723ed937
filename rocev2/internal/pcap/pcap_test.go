package pcap

import (
	"encoding/binary"
	"errors"
	"testing"
)

func header(magic uint32, link uint32) []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint32(b, magic)
	binary.LittleEndian.PutUint16(b[4:], 2)
	binary.LittleEndian.PutUint16(b[6:], 4)
	binary.LittleEndian.PutUint32(b[16:], 65535)
	binary.LittleEndian.PutUint32(b[20:], link)
	return b
}

func record(data []byte) []byte {
	b := make([]byte, 16, 16+len(data))
	binary.LittleEndian.PutUint32(b, 7)
	binary.LittleEndian.PutUint32(b[4:], 9)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(b[12:], uint32(len(data)+2))
	return append(b, data...)
}

func TestDecode(t *testing.T) {
	b := header(0xA1B2C3D4, LinkTypeEthernet)
	b = append(b, record([]byte{1, 2, 3})...)
	b = append(b, record([]byte{4})...)
	f, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.LinkType != LinkTypeEthernet || f.Snaplen != 65535 || len(f.Records) != 2 {
		t.Fatalf("got link %d snaplen %d records %d", f.LinkType, f.Snaplen, len(f.Records))
	}
	r := f.Records[0]
	if r.Index != 1 || r.Sec != 7 || r.Frac != 9 || r.OrigLen != 5 || string(r.Data) != "\x01\x02\x03" {
		t.Fatalf("record 1 = %+v", r)
	}
	if f.Records[1].Index != 2 || string(f.Records[1].Data) != "\x04" {
		t.Fatalf("record 2 = %+v", f.Records[1])
	}
}

func TestDecodeRejects(t *testing.T) {
	good := append(header(0xA1B2C3D4, 1), record([]byte{1, 2, 3})...)
	for name, b := range map[string][]byte{
		"short file":       good[:10],
		"bad magic":        append([]byte{1, 2, 3, 4}, good[4:]...),
		"truncated header": good[:24+8],
		"truncated data":   good[:len(good)-1],
	} {
		if _, err := Decode(b); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}
