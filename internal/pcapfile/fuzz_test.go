package pcapfile

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDecode feeds Decode arbitrary bytes: it must not panic, and whatever it
// accepts must survive a write and a second read unchanged.
func FuzzDecode(f *testing.F) {
	f.Add(classic(binary.LittleEndian, magicMicro))
	f.Add(classic(binary.BigEndian, magicNano))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, math.MaxUint32, c.LinkType)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.Packets {
			err := w.WritePacket(p.Time, p.Data)
			if p.Time.Unix() > math.MaxUint32 {
				// A file may state 0xFFFFFFFF seconds plus a fraction
				// past one second; no writer can express that time.
				if err == nil {
					t.Fatalf("packet %d: WritePacket accepted %v", p.Index, p.Time)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		again, err := Decode(buf.Bytes())
		if err != nil {
			t.Fatalf("rewritten capture does not decode: %v", err)
		}
		if again.LinkType != c.LinkType || len(again.Packets) != len(c.Packets) {
			t.Fatalf("rewritten: link %d, %d packets; want %d, %d", again.LinkType, len(again.Packets), c.LinkType, len(c.Packets))
		}
		for i, p := range c.Packets {
			q := again.Packets[i]
			if !q.Time.Equal(p.Time) || !bytes.Equal(q.Data, p.Data) {
				t.Fatalf("packet %d changed: %v %x -> %v %x", i+1, p.Time, p.Data, q.Time, q.Data)
			}
		}
	})
}
