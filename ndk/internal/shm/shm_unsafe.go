package shm

// Every use of package unsafe in shm lives in this file: views of shared
// words in a segment as atomics, and raw system calls whose x/sys/unix
// wrappers take slices, kept off the posting and waiting paths.

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// word views the 4 bytes at off in mem as an atomic word. The caller has
// checked that off is 4-aligned and inside mem; mappings are page-aligned,
// so the word is aligned in memory too.
func word(mem []byte, off int) *atomic.Uint32 {
	_ = mem[off+3]
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

// ppoll is ppoll(2) on fds; a nil timeout waits forever.
func ppoll(fds []unix.PollFd, timeout *unix.Timespec) (int, unix.Errno) {
	n, _, errno := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(unsafe.SliceData(fds))), uintptr(len(fds)),
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
