package shm

// Every use of package unsafe in shm lives in this file: views of shared
// words in a segment as atomics (the doorbell's system calls are in
// internal/wake).

import (
	"sync/atomic"
	"unsafe"
)

// word views the 4 bytes at off in mem as an atomic word. The caller has
// checked that off is 4-aligned and inside mem; mappings are page-aligned,
// so the word is aligned in memory too.
func word(mem []byte, off int) *atomic.Uint32 {
	_ = mem[off+3]
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

// Word32 views the 4 bytes at off in the segment as an atomic word shared
// with the peer; off must be 4-aligned and inside the segment.
func (s *Segment) Word32(off int) *atomic.Uint32 {
	if off%4 != 0 {
		panic("shm: Word32 at an unaligned offset")
	}
	return word(s.mem, off)
}

// Word64 views the 8 bytes at off as an atomic 64-bit word; off must be
// 8-aligned and inside the segment.
func (s *Segment) Word64(off int) *atomic.Uint64 {
	if off%8 != 0 {
		panic("shm: Word64 at an unaligned offset")
	}
	_ = s.mem[off+7]
	return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off]))
}
