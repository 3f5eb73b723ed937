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
