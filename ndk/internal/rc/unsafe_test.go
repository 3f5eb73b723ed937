package rc

import "unsafe"

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func ptrAt(b []byte, off int) unsafe.Pointer { return unsafe.Pointer(&b[off]) }
