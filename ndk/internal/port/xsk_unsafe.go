package port

// Every use of package unsafe in port lives in this file: raw system calls
// whose x/sys/unix wrappers take slices or allocate, kept off the engine's
// per-packet and per-wait paths.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ppoll is ppoll(2) on a fixed array of descriptors; a nil timeout waits
// forever.
func ppoll(fds *[2]unix.PollFd, timeout *unix.Timespec) (int, unix.Errno) {
	n, _, errno := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(timeout)), 0, 0, 0)
	return int(n), errno
}

// eventfdWrite adds v to an eventfd counter (eventfd(2)).
func eventfdWrite(fd int, v *[8]byte) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	return errno
}

// eventfdRead reads and resets an eventfd counter (eventfd(2)).
func eventfdRead(fd int, v *[8]byte) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	return errno
}

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
