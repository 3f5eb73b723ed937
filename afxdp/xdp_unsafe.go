package afxdp

// Every use of package unsafe in afxdp lives in this file: views of the
// kernel's mmap'd rings as Go values, and the socket options whose argument
// is a struct (x/sys/unix has no typed wrapper for them).

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sizes of one ring entry as the kernel lays them out
// (include/uapi/linux/if_xdp.h): fill and completion rings hold __u64
// addresses, RX and TX rings hold struct xdp_desc.
const (
	addrEntrySize = uint64(unsafe.Sizeof(uint64(0)))
	descEntrySize = uint64(unsafe.Sizeof(Desc{}))
)

// mapRing maps one ring of fd at the given page offset and returns the
// mapping plus views of its producer, consumer and flags words. The caller
// builds the entry slice with addrEntries or descEntries.
func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, entries uint32, entrySize uint64) (mem []byte, prod, cons, flags *atomic.Uint32, err error) {
	size := off.Desc + uint64(entries)*entrySize
	mem, err = unix.Mmap(fd, pgoff, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	// atomic.Uint32 is one uint32 (its noCopy marker takes no room), and
	// the kernel aligns these words, so each view is exactly its word.
	prod = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Producer]))
	cons = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Consumer]))
	flags = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Flags]))
	return mem, prod, cons, flags, nil
}

// addrEntries views the entry area of a fill or completion ring mapping.
func addrEntries(mem []byte, off unix.XDPRingOffset, entries uint32) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), entries)
}

// descEntries views the entry area of an RX or TX ring mapping.
func descEntries(mem []byte, off unix.XDPRingOffset, entries uint32) []Desc {
	return unsafe.Slice((*Desc)(unsafe.Pointer(&mem[off.Desc])), entries)
}

func setsockoptUMEMReg(fd int, reg *unix.XDPUmemReg) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(reg)), unsafe.Sizeof(*reg), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// getsockopt reads a SOL_XDP option into the struct at p of size n and
// returns the length the kernel wrote: older kernels answer XDP_STATISTICS
// and XDP_MMAP_OFFSETS with a shorter, earlier layout.
func getsockopt(fd, opt int, p unsafe.Pointer, n uintptr) (uintptr, error) {
	l := uint32(n)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt),
		uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return 0, errno
	}
	return uintptr(l), nil
}

func getMmapOffsets(fd int) (unix.XDPMmapOffsets, uintptr, error) {
	var off unix.XDPMmapOffsets
	n, err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, n, err
}

const sizeofMmapOffsets = unsafe.Sizeof(unix.XDPMmapOffsets{})

func getStatistics(fd int) (unix.XDPStatistics, uintptr, error) {
	var st unix.XDPStatistics
	n, err := getsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, n, err
}

const sizeofStatistics = unsafe.Sizeof(unix.XDPStatistics{})

// getOptionsFlags reads struct xdp_options { __u32 flags; }.
func getOptionsFlags(fd int) (uint32, error) {
	var flags uint32
	_, err := getsockopt(fd, unix.XDP_OPTIONS, unsafe.Pointer(&flags), unsafe.Sizeof(flags))
	return flags, err
}

// umemBase returns the user virtual address of the UMEM mapping, which
// XDP_UMEM_REG takes as a number.
func umemBase(mem []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
}

// sendtoWakeup is sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0), the TX wakeup
// of Documentation/networking/af_xdp.rst. With MSG_DONTWAIT it never
// blocks (copy mode sends a bounded batch and returns), so it is a raw
// system call: free of allocation, and unseen by the runtime, which keeps
// a spinning engine from waking its sysmon thread (internal/spin's
// schedYield).
func sendtoWakeup(fd int) unix.Errno {
	_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}

// recvfromWakeup is recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL), the
// fill ring wakeup (and busy-poll driver) of af_xdp.rst; raw, as
// sendtoWakeup, since it returns at once or after the socket's bounded
// busy poll.
func recvfromWakeup(fd int) unix.Errno {
	_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}

// ppollFD is ppoll(2) on one descriptor without the slice the unix.Poll
// wrapper takes, so a waiting engine allocates nothing. A nil timeout waits
// forever.
func ppollFD(pfd *unix.PollFd, timeout *unix.Timespec) (int, unix.Errno) {
	n, _, errno := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(pfd)), 1, uintptr(unsafe.Pointer(timeout)), 0, 0, 0)
	return int(n), errno
}
