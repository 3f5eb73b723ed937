package shm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// MaxSegmentSize bounds a segment, ours or a peer's, so that a size read
// from a message cannot make us map the address space away.
const MaxSegmentSize int64 = 1 << 32

// requiredSeals are the seals a segment must carry before it is shared:
// without F_SEAL_SHRINK a peer could ftruncate it under our mapping, and
// our next access past the new end would take SIGBUS. F_SEAL_GROW keeps
// its size what both sides agreed on.
const requiredSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// Segment is a memfd mapped shared and read-write: memory one process
// creates and others map from its descriptor. Rings and doorbells live in
// it at offsets both sides agree on.
type Segment struct {
	fd  int
	mem []byte
}

// NewSegment creates a segment of size bytes, rounded up to whole pages.
// name shows in /proc/PID/fd and /proc/PID/maps as memfd:name. The memory
// starts zeroed, and the segment is sealed against shrinking and growing
// before NewSegment returns, so it can be handed to peers as it is.
func NewSegment(name string, size int) (*Segment, error) {
	page := unix.Getpagesize()
	if size <= 0 || int64(size) > MaxSegmentSize {
		return nil, fmt.Errorf("shm: segment %q of %d bytes: size must be 1 to %d", name, size, MaxSegmentSize)
	}
	size = (size + page - 1) &^ (page - 1)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: create segment %q: memfd_create: %w", name, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: size segment %q to %d bytes: %w", name, size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, requiredSeals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: seal segment %q: %w", name, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: map segment %q of %d bytes: %w", name, size, err)
	}
	return &Segment{fd: fd, mem: mem}, nil
}

// MapSegment maps a segment from a descriptor a peer sent, claimed to hold
// size bytes. It takes ownership of fd: the Segment closes it, and so does
// MapSegment when it fails. It refuses a descriptor that is not a memfd
// sealed against shrinking, or one smaller than size: either could fault
// our accesses later. A larger segment is mapped only up to size.
func MapSegment(fd int, size int) (*Segment, error) {
	if err := checkSegment(fd, size); err != nil {
		unix.Close(fd)
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: map peer segment of %d bytes: %w", size, err)
	}
	return &Segment{fd: fd, mem: mem}, nil
}

// checkSegment is MapSegment's defence against a hostile peer. The seal is
// checked before the size: once F_SEAL_SHRINK is on, it stays on, so the
// size fstat reports afterwards can only stay or grow.
func checkSegment(fd int, size int) error {
	if size <= 0 || int64(size) > MaxSegmentSize {
		return fmt.Errorf("shm: peer segment of %d bytes: size must be 1 to %d", size, MaxSegmentSize)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("shm: peer segment: read seals (not a memfd?): %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("shm: peer segment is not sealed against shrinking (seals %#x): refused", seals)
	}
	if seals&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0 {
		return fmt.Errorf("shm: peer segment is sealed against writing (seals %#x): refused", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("shm: peer segment: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("shm: peer segment is not a regular file (mode %#o): refused", st.Mode)
	}
	if st.Size < int64(size) {
		return fmt.Errorf("shm: peer segment holds %d bytes, %d claimed: refused", st.Size, size)
	}
	return nil
}

// FD returns the segment's descriptor, to send to a peer (SendFDs). It is
// valid until Close or TakeFD, and -1 after.
func (s *Segment) FD() int { return s.fd }

// TakeFD hands the descriptor to the caller, who closes it (SendFDs' caller
// after sending, say); the mapping stays until Close. A segment holds no
// descriptor after it is shared: thousands of QPs, each with a segment,
// would otherwise keep thousands of descriptors open on both sides.
func (s *Segment) TakeFD() int {
	fd := s.fd
	s.fd = -1
	return fd
}

// Bytes returns the whole mapping. It is valid until Close.
func (s *Segment) Bytes() []byte { return s.mem }

// Size returns the mapped size in bytes.
func (s *Segment) Size() int { return len(s.mem) }

// Close unmaps the segment and closes its descriptor. Rings and doorbells
// over it must not be used afterwards. It is safe to call more than once.
func (s *Segment) Close() error {
	if s.mem == nil {
		return nil
	}
	var errs []error
	if err := unix.Munmap(s.mem); err != nil {
		errs = append(errs, fmt.Errorf("shm: unmap segment: %w", err))
	}
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil {
			errs = append(errs, fmt.Errorf("shm: close segment: %w", err))
		}
	}
	s.mem, s.fd = nil, -1
	return errors.Join(errs...)
}

// region checks that [off, off+n) lies in the segment and that off is
// aligned to align (a power of two).
func (s *Segment) region(what string, off, n, align int) error {
	switch {
	case off < 0 || off&(align-1) != 0:
		return fmt.Errorf("shm: %s at offset %d: must be a non-negative multiple of %d", what, off, align)
	case n < 0 || off > len(s.mem) || n > len(s.mem)-off:
		return fmt.Errorf("shm: %s of %d bytes at offset %d does not fit a segment of %d bytes", what, n, off, len(s.mem))
	}
	return nil
}
