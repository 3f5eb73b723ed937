package wake

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Poll is ppoll(2) on fds; a nil timeout waits forever. A wait that a
// signal interrupts (the Go runtime preempts goroutines with SIGURG)
// goes on: the raw system call writes the time still to wait back into
// *timeout (ppoll(2), NOTES), so the total wait stays the one asked for.
// It never returns EINTR.
func Poll(fds []unix.PollFd, timeout *unix.Timespec) (int, unix.Errno) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(unsafe.SliceData(fds))), uintptr(len(fds)),
			uintptr(unsafe.Pointer(timeout)), 0, 0, 0)
		if errno != unix.EINTR {
			return int(n), errno
		}
	}
}

// EventfdWrite adds v to the counter of a non-blocking eventfd
// (eventfd(2)); EAGAIN if it would overflow.
//
// The eventfds of the doorbells are non-blocking, so their reads and
// writes are raw system calls, which do not tell the runtime that the
// thread may block: that notice (entersyscall) wakes the runtime's
// monitor thread whenever it sleeps for an idle process, one more thread
// woken on another CPU for each ring of an engine or a client that
// sleeps between round trips.
func EventfdWrite(fd int, v *[8]byte) unix.Errno {
	_, _, errno := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	return errno
}

// EventfdRead reads and resets the counter of a non-blocking eventfd
// (eventfd(2)); EAGAIN if it is zero. A raw system call, as EventfdWrite.
func EventfdRead(fd int, v *[8]byte) unix.Errno {
	_, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	return errno
}
