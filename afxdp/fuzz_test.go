package afxdp

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzFrameAllocator runs arbitrary Alloc/Free sequences against a model
// of which frames are out: no frame may be handed out twice, and Free must
// accept exactly the frames that are out.
func FuzzFrameAllocator(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 0, 1, 0, 0})
	f.Add([]byte{0, 1, 0x10, 0x08, 1, 0x10, 0x08, 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const frames, size = 9, 2048
		a := newFrameAllocator(size, 2, frames) // frames 2..10
		out := map[uint64]bool{}
		for len(ops) >= 3 {
			op, arg := ops[0], uint64(binary.LittleEndian.Uint16(ops[1:3]))
			ops = ops[3:]
			if op%2 == 0 {
				addr, ok := a.Alloc()
				if ok != (len(out) < frames) {
					t.Fatalf("Alloc ok=%v with %d of %d frames out", ok, len(out), frames)
				}
				if !ok {
					continue
				}
				if addr%size != 0 || addr < 2*size || addr >= (2+frames)*size {
					t.Fatalf("Alloc returned %#x outside the allocator's chunks", addr)
				}
				if out[addr] {
					t.Fatalf("frame %#x handed out twice", addr)
				}
				out[addr] = true
				continue
			}
			addr := arg * 16 // any address, chunk-aligned or not
			chunk := addr &^ (size - 1)
			err := a.Free(addr)
			switch {
			case chunk < 2*size || chunk >= (2+frames)*size:
				if !errors.Is(err, ErrFrameOutOfRange) {
					t.Fatalf("Free(%#x) outside the range = %v", addr, err)
				}
			case out[chunk]:
				if err != nil {
					t.Fatalf("Free(%#x) of a frame out = %v", addr, err)
				}
				delete(out, chunk)
			default:
				if !errors.Is(err, ErrFrameNotAllocated) {
					t.Fatalf("Free(%#x) of a free frame = %v", addr, err)
				}
			}
			if int(a.Available())+len(out) != frames {
				t.Fatalf("%d available + %d out != %d frames", a.Available(), len(out), frames)
			}
		}
	})
}

// FuzzUMEMViews checks that Frame and Data never panic and never view
// bytes outside one chunk, whatever the descriptor says.
func FuzzUMEMViews(f *testing.F) {
	u, err := NewUMEM(UMEMConfig{FrameSize: 2048, NumFrames: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { u.Close() })
	mem := u.Bytes()
	f.Add(uint64(2048+256), uint32(100))
	f.Add(uint64(2000), uint32(100))
	f.Add(^uint64(0)-5, uint32(10))
	f.Fuzz(func(t *testing.T, addr uint64, n uint32) {
		if fr := u.Frame(addr); fr != nil {
			if addr >= uint64(len(mem)) || len(fr) != 2048 || &fr[0] != &mem[addr&^2047] {
				t.Fatalf("Frame(%#x) is not the chunk holding it", addr)
			}
		} else if addr < uint64(len(mem)) {
			t.Fatalf("Frame(%#x) nil inside the UMEM", addr)
		}
		d := u.Data(Desc{Addr: addr, Len: n})
		if d == nil {
			return
		}
		if len(d) != int(n) || addr+uint64(n) > uint64(len(mem)) {
			t.Fatalf("Data(%#x, %d) = %d bytes beyond the UMEM", addr, n, len(d))
		}
		if n > 0 && addr/2048 != (addr+uint64(n)-1)/2048 {
			t.Fatalf("Data(%#x, %d) crosses a chunk boundary", addr, n)
		}
	})
}
