package afxdp

import "errors"

// Errors from FrameAllocator.Free. They are plain values (no wrapping) so
// the per-packet path that frees frames allocates nothing.
var (
	// ErrFrameNotAllocated: the frame is not currently handed out by this
	// allocator: a double free, or a frame that belongs to another
	// allocator of the same UMEM range.
	ErrFrameNotAllocated = errors.New("afxdp: frame not handed out by this allocator (double free?)")
	// ErrFrameOutOfRange: the address lies outside this allocator's frames.
	ErrFrameOutOfRange = errors.New("afxdp: address outside this allocator's frames")
)

// FrameAllocator hands out UMEM frames (chunks) by address and takes them
// back. It never hands out a frame twice: Free of a frame it does not
// currently hold out returns an error and changes nothing.
//
// A FrameAllocator is not safe for concurrent use. Each queue's engine
// goroutine owns one; a UMEM shared by several queues is split with
// UMEM.Partition so that no two goroutines touch one allocator.
type FrameAllocator struct {
	frameShift uint32
	first      uint32   // index of the first frame this allocator covers
	count      uint32   // number of frames it covers
	free       []uint32 // stack of free frame indices, relative to first
	out        []uint64 // bit i set: frame first+i is handed out
}

func newFrameAllocator(frameSize, first, count uint32) *FrameAllocator {
	a := &FrameAllocator{
		frameShift: log2(frameSize),
		first:      first,
		count:      count,
		free:       make([]uint32, count),
		out:        make([]uint64, (count+63)/64),
	}
	// Fill the stack so that the lowest frame comes out first.
	for i := range a.free {
		a.free[i] = count - 1 - uint32(i)
	}
	return a
}

// Alloc returns the UMEM address of a free frame (the start of its chunk),
// or ok == false when none is left.
func (a *FrameAllocator) Alloc() (addr uint64, ok bool) {
	n := len(a.free)
	if n == 0 {
		return 0, false
	}
	i := a.free[n-1]
	a.free = a.free[:n-1]
	a.out[i/64] |= 1 << (i % 64)
	return uint64(a.first+i) << a.frameShift, true
}

// Free returns the frame that contains addr. Any address inside the chunk
// is accepted, so RX and completion descriptors (which point past the
// headroom) can be freed as they are.
func (a *FrameAllocator) Free(addr uint64) error {
	frame := addr >> a.frameShift
	if frame < uint64(a.first) || frame-uint64(a.first) >= uint64(a.count) {
		return ErrFrameOutOfRange
	}
	i := uint32(frame) - a.first
	bit := uint64(1) << (i % 64)
	if a.out[i/64]&bit == 0 {
		return ErrFrameNotAllocated
	}
	a.out[i/64] &^= bit
	a.free = append(a.free, i) // within capacity: at most count frames are free
	return nil
}

// Available returns how many frames Alloc can still hand out.
func (a *FrameAllocator) Available() uint32 { return uint32(len(a.free)) }

// Frames returns how many frames the allocator covers.
func (a *FrameAllocator) Frames() uint32 { return a.count }

// Range returns the UMEM address range [lo, hi) of the allocator's frames.
func (a *FrameAllocator) Range() (lo, hi uint64) {
	return uint64(a.first) << a.frameShift, uint64(a.first+a.count) << a.frameShift
}

func log2(v uint32) uint32 {
	var s uint32
	for v > 1 {
		v >>= 1
		s++
	}
	return s
}
