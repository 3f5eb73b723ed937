package demo

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// TestCaptureEachFrameOnce: of the two hosts' streams, the shared
// capture keeps one file header and each frame once, from its sender.
func TestCaptureEachFrameOnce(t *testing.T) {
	macA, macB := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	var file bytes.Buffer
	c := &sharedCapture{w: &file}
	sa, sb := c.stream(macA), c.stream(macB)
	header := bytes.Repeat([]byte{0xa1}, 24)
	record := func(dst, src net.HardwareAddr, tag byte) []byte {
		b := make([]byte, pcapRecordHeader, pcapRecordHeader+15)
		b = append(append(append(b, dst...), src...), 0x08, 0x00, tag)
		return b
	}
	for _, w := range []struct {
		s io.Writer
		b []byte
	}{
		{sa, header}, {sb, header},
		{sa, record(macB, macA, 1)}, {sb, record(macB, macA, 1)}, // A -> B, seen by both
		{sb, record(macA, macB, 2)}, {sa, record(macA, macB, 2)}, // B -> A
	} {
		if _, err := w.s.Write(w.b); err != nil {
			t.Fatal(err)
		}
	}
	want := append(append(append([]byte{}, header...), record(macB, macA, 1)...), record(macA, macB, 2)...)
	if !bytes.Equal(file.Bytes(), want) || c.Frames() != 2 {
		t.Errorf("capture holds %d frames, %x; want each frame once", c.Frames(), file.Bytes())
	}
}
