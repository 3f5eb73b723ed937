package port

// Every use of package unsafe in port lives in this file (the wait's system
// calls are in internal/wake).

import (
	"unsafe"
)

// umemOffset returns where b starts in mem, or false when b is empty or
// not wholly inside mem: Transmit references only bytes of the UMEM, the
// one memory the kernel can read descriptors from.
func umemOffset(mem, b []byte) (uint64, bool) {
	if len(b) == 0 || len(mem) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p-base >= uintptr(len(mem)) || uintptr(len(b)) > uintptr(len(mem))-(p-base) {
		return 0, false
	}
	return uint64(p - base), true
}
