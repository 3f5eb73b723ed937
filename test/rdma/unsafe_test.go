package rdma

import "unsafe"

// addr is the address of b's first byte, as an NDK_SGE names memory.
func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
