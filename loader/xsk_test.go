package loader

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// testXSK is the smallest AF_XDP socket that can receive: a UMEM, a fill
// ring and an RX ring, bound in copy mode to one queue. Package afxdp is the
// real implementation; the loader must not depend on it, so its tests carry
// this one (layout per include/uapi/linux/if_xdp.h and
// Documentation/networking/af_xdp.rst).
type testXSK struct {
	fd   int
	umem []byte
	fill []byte
	rx   []byte
	off  unix.XDPMmapOffsets
	rxc  uint32 // cached RX consumer index
}

const (
	xskFrames    = 16
	xskFrameSize = 4096
)

// newTestXSK creates the socket and binds it to (ifindex, queue); call it in
// the namespace that holds the interface.
func newTestXSK(ifindex int, queue uint32) (_ *testXSK, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket(AF_XDP): %w", err)
	}
	x := &testXSK{fd: fd}
	defer func() {
		if err != nil {
			x.Close()
		}
	}()
	x.umem, err = unix.Mmap(-1, 0, xskFrames*xskFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap umem: %w", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: xskFrameSize}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("XDP_UMEM_REG: %w", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		n := uint32(xskFrames)
		if err := setsockopt(fd, opt, unsafe.Pointer(&n), 4); err != nil {
			return nil, fmt.Errorf("ring size option %d: %w", opt, err)
		}
	}
	optlen := uint32(unsafe.Sizeof(x.off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&x.off)), uintptr(unsafe.Pointer(&optlen)), 0); e != 0 {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", e)
	}
	x.fill, err = unix.Mmap(fd, unix.XDP_UMEM_PGOFF_FILL_RING, int(x.off.Fr.Desc)+xskFrames*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap fill ring: %w", err)
	}
	x.rx, err = unix.Mmap(fd, unix.XDP_PGOFF_RX_RING, int(x.off.Rx.Desc)+xskFrames*int(unsafe.Sizeof(unix.XDPDesc{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap rx ring: %w", err)
	}
	// Hand every frame to the kernel for receiving.
	for i := range xskFrames {
		*(*uint64)(unsafe.Pointer(&x.fill[int(x.off.Fr.Desc)+8*i])) = uint64(i * xskFrameSize)
	}
	atomic.StoreUint32(x.index(x.fill, x.off.Fr.Producer), xskFrames)

	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: queue}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, fmt.Errorf("bind to ifindex %d queue %d: %w", ifindex, queue, err)
	}
	return x, nil
}

func setsockopt(fd, opt int, val unsafe.Pointer, size uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(val), size, 0); e != 0 {
		return e
	}
	return nil
}

func (x *testXSK) index(ring []byte, off uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&ring[off]))
}

// receive waits up to timeout for the next frame and returns a copy of it.
func (x *testXSK) receive(timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		if prod := atomic.LoadUint32(x.index(x.rx, x.off.Rx.Producer)); prod != x.rxc {
			i := x.rxc % xskFrames
			d := (*unix.XDPDesc)(unsafe.Pointer(&x.rx[int(x.off.Rx.Desc)+int(i)*int(unsafe.Sizeof(unix.XDPDesc{}))]))
			frame := append([]byte(nil), x.umem[d.Addr:d.Addr+uint64(d.Len)]...)
			x.rxc++
			atomic.StoreUint32(x.index(x.rx, x.off.Rx.Consumer), x.rxc)
			return frame, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, errors.New("no frame on the AF_XDP socket")
		}
		fds := []unix.PollFd{{Fd: int32(x.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("poll: %w", err)
		}
	}
}

func (x *testXSK) Close() {
	for _, b := range [][]byte{x.rx, x.fill, x.umem} {
		if b != nil {
			unix.Munmap(b)
		}
	}
	unix.Close(x.fd)
}
