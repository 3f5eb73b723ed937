package inproc

import (
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
)

// TestLossyPortDropsItsShare: of 20,000 frames a 10% lossy port passes
// about 18,000, every frame it passes arrived intact and in order, and
// the frames it drops go back to the link like the others.
func TestLossyPortDropsItsShare(t *testing.T) {
	pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 64})
	if err != nil {
		t.Fatal(err)
	}
	rx := newLossyPort(pipe.B(), 0.1, 1)
	out := make([][]byte, 64)
	got, next := 0, 0
	for sent := 0; sent < 20000; {
		for k := 0; k < 32 && sent < 20000; k++ {
			f := []byte{byte(sent >> 8), byte(sent), 0xAB}
			if err := pipe.A().Transmit([][]byte{f}); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		n := rx.Receive(out)
		for _, f := range out[:n] {
			i := int(f[0])<<8 | int(f[1])
			if len(f) != 3 || f[2] != 0xAB || i < next {
				t.Fatalf("frame %x after frame %d", f, next)
			}
			next = i + 1
		}
		got += n
		rx.Release()
	}
	if got < 17600 || got > 18400 || uint64(got)+rx.dropped != 20000 {
		t.Fatalf("%d passed, %d dropped of 20,000", got, rx.dropped)
	}
	if newLossyPort(pipe.B(), 1, 1).threshold != ^uint64(0) || newLossyPort(pipe.B(), 0, 1).threshold != 0 {
		t.Fatal("thresholds at 0 and 1")
	}
}
