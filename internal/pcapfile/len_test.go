package pcapfile

import (
	"bytes"
	"testing"
	"time"
)

// TestWritePacketLenKeepsTheWireLength: a packet cut before writing (a
// capture's snap length) records the length it had on the wire.
func TestWritePacketLenKeepsTheWireLength(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b, 64, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacketLen(time.Unix(1, 0), make([]byte, 64), 1500); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacketLen(time.Unix(2, 0), make([]byte, 10), 3); err != nil { // orig below the data: the data's
		t.Fatal(err)
	}
	f, err := Decode(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Packets) != 2 || f.Packets[0].OrigLen != 1500 || len(f.Packets[0].Data) != 64 || f.Packets[1].OrigLen != 10 {
		t.Fatalf("packets %+v", f.Packets)
	}
}
