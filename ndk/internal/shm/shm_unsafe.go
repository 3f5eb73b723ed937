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
