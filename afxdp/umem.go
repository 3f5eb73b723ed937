package afxdp

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Defaults for the zero fields of UMEMConfig and SocketConfig. The ring
// sizes are libxdp's (XSK_RING_PROD/CONS__DEFAULT_NUM_DESCS); 4096 frames
// of 4096 bytes keep both default fill and completion rings full at once.
const (
	DefaultFrameSize = 4096
	DefaultNumFrames = 4096
	DefaultRingSize  = 2048
)

// maxRingSize bounds ring sizes well below what the kernel would try to
// allocate (xskq_create), so a typo fails here with a clear message.
const maxRingSize = 1 << 20

// xdpPacketHeadroom is XDP_PACKET_HEADROOM: the kernel keeps this much in
// front of received data in every chunk, after the UMEM headroom.
const xdpPacketHeadroom = unix.XDP_PACKET_HEADROOM

// UMEMConfig describes a UMEM. Zero fields take the defaults above.
type UMEMConfig struct {
	// FrameSize is the chunk size: 2048 or 4096 (default).
	FrameSize uint32
	// NumFrames is the number of chunks (default 4096). The UMEM must be
	// a whole number of pages, so with 2048-byte frames it must be even.
	NumFrames uint32
	// FillRingSize and CompletionRingSize are the entries of each
	// socket's fill and completion ring (powers of two, default 2048).
	FillRingSize       uint32
	CompletionRingSize uint32
	// Headroom is reserved at the start of every chunk on receive, before
	// the kernel's own XDP_PACKET_HEADROOM (256 bytes).
	Headroom uint32
}

func (c *UMEMConfig) setDefaults() {
	if c.FrameSize == 0 {
		c.FrameSize = DefaultFrameSize
	}
	if c.NumFrames == 0 {
		c.NumFrames = DefaultNumFrames
	}
	if c.FillRingSize == 0 {
		c.FillRingSize = DefaultRingSize
	}
	if c.CompletionRingSize == 0 {
		c.CompletionRingSize = DefaultRingSize
	}
}

func (c *UMEMConfig) validate() error {
	if c.FrameSize != 2048 && c.FrameSize != 4096 {
		return fmt.Errorf("frame size %d: must be 2048 or 4096", c.FrameSize)
	}
	page := uint64(unix.Getpagesize())
	if size := uint64(c.FrameSize) * uint64(c.NumFrames); size%page != 0 {
		return fmt.Errorf("%d frames of %d bytes is %d bytes, not a whole number of %d-byte pages", c.NumFrames, c.FrameSize, size, page)
	}
	if err := checkRingSize("fill", c.FillRingSize); err != nil {
		return err
	}
	if err := checkRingSize("completion", c.CompletionRingSize); err != nil {
		return err
	}
	// net/xdp/xdp_umem.c xdp_umem_reg: headroom >= chunk_size -
	// XDP_PACKET_HEADROOM is EINVAL (newer kernels want more room still).
	if c.Headroom >= c.FrameSize-xdpPacketHeadroom {
		return fmt.Errorf("headroom %d: must be below frame size %d minus the kernel's %d-byte XDP headroom", c.Headroom, c.FrameSize, xdpPacketHeadroom)
	}
	return nil
}

func checkRingSize(name string, n uint32) error {
	if n == 0 || n&(n-1) != 0 || n > maxRingSize {
		return fmt.Errorf("%s ring size %d: must be a power of two up to %d", name, n, maxRingSize)
	}
	return nil
}

// UMEM is the packet memory shared with the kernel: NumFrames chunks of
// FrameSize bytes in one page-aligned anonymous mapping outside the Go heap.
// Descriptors name bytes in it by offset ("address").
//
// The first Socket created on a UMEM registers it with the kernel; later
// sockets share it (XDP_SHARED_UMEM).
type UMEM struct {
	cfg    UMEMConfig
	mem    []byte
	frames *FrameAllocator

	mu      sync.Mutex // guards sockets and closed; not taken per packet
	sockets []*Socket  // open sockets bound to this UMEM, oldest first
	closed  bool
}

// NewUMEM maps the memory for a UMEM. It does not talk to the kernel's
// AF_XDP code yet; NewSocket does.
func NewUMEM(cfg UMEMConfig) (*UMEM, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("afxdp: UMEM config: %w", err)
	}
	size := uint64(cfg.FrameSize) * uint64(cfg.NumFrames)
	if size > uint64(^uint(0)>>1) {
		return nil, fmt.Errorf("afxdp: UMEM of %d bytes does not fit the address space", size)
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("afxdp: map %d bytes of UMEM: %w", size, err)
	}
	return &UMEM{
		cfg:    cfg,
		mem:    mem,
		frames: newFrameAllocator(cfg.FrameSize, 0, cfg.NumFrames),
	}, nil
}

// Config returns the UMEM's configuration with defaults filled in.
func (u *UMEM) Config() UMEMConfig { return u.cfg }

// Bytes returns the whole UMEM. It is valid until Close.
func (u *UMEM) Bytes() []byte { return u.mem }

// FrameSize returns the chunk size in bytes.
func (u *UMEM) FrameSize() uint32 { return u.cfg.FrameSize }

// NumFrames returns the number of chunks.
func (u *UMEM) NumFrames() uint32 { return u.cfg.NumFrames }

// Headroom returns the configured receive headroom: received data starts
// Headroom + 256 bytes into its chunk.
func (u *UMEM) Headroom() uint32 { return u.cfg.Headroom }

// Frame returns the whole chunk (FrameSize bytes) that contains addr, or
// nil if addr lies outside the UMEM.
func (u *UMEM) Frame(addr uint64) []byte {
	if addr >= uint64(len(u.mem)) {
		return nil
	}
	base := addr &^ uint64(u.cfg.FrameSize-1)
	return u.mem[base : base+uint64(u.cfg.FrameSize) : base+uint64(u.cfg.FrameSize)]
}

// Data returns the bytes a descriptor names, or nil if they are not inside
// one chunk of the UMEM (the kernel rejects such descriptors too).
func (u *UMEM) Data(d Desc) []byte {
	end := d.Addr + uint64(d.Len)
	if end > uint64(len(u.mem)) || end < d.Addr {
		return nil
	}
	if d.Len > 0 && d.Addr&^uint64(u.cfg.FrameSize-1) != (end-1)&^uint64(u.cfg.FrameSize-1) {
		return nil
	}
	return u.mem[d.Addr:end:end]
}

// Alloc hands out a free frame from the UMEM's own allocator. See
// FrameAllocator; the same single-goroutine rule applies.
func (u *UMEM) Alloc() (addr uint64, ok bool) { return u.frames.Alloc() }

// Free returns a frame to the UMEM's own allocator. See FrameAllocator.Free.
func (u *UMEM) Free(addr uint64) error { return u.frames.Free(addr) }

// Allocator returns the UMEM's own allocator, which covers every frame
// until Partition.
func (u *UMEM) Allocator() *FrameAllocator { return u.frames }

// Partition splits the frames into n allocators over disjoint, contiguous
// ranges of (nearly) equal size, one for each queue's engine when several
// queues share the UMEM. It fails if the UMEM's own allocator has a frame
// handed out; afterwards that allocator is empty (Alloc reports none left,
// Free reports ErrFrameNotAllocated), so no frame can be handed out twice.
func (u *UMEM) Partition(n int) ([]*FrameAllocator, error) {
	total := u.cfg.NumFrames
	if n < 1 || uint64(n) > uint64(total) {
		return nil, fmt.Errorf("afxdp: partition %d frames into %d parts: need 1 to %d parts", total, n, total)
	}
	if u.frames.Available() != total {
		return nil, fmt.Errorf("afxdp: partition UMEM: %d of %d frames are handed out; partition before allocating", total-u.frames.Available(), total)
	}
	parts := make([]*FrameAllocator, n)
	first := uint32(0)
	for i := range parts {
		count := total / uint32(n)
		if uint32(i) < total%uint32(n) {
			count++
		}
		parts[i] = newFrameAllocator(u.cfg.FrameSize, first, count)
		first += count
	}
	u.frames.free = u.frames.free[:0]
	return parts, nil
}

// Close closes every socket still open on the UMEM, then unmaps it. It is
// safe to call more than once.
func (u *UMEM) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	socks := append([]*Socket(nil), u.sockets...)
	u.mu.Unlock()

	var errs []error
	for _, s := range socks {
		errs = append(errs, s.Close())
	}
	if err := unix.Munmap(u.mem); err != nil {
		errs = append(errs, fmt.Errorf("afxdp: unmap UMEM: %w", err))
	}
	u.mem = nil
	return errors.Join(errs...)
}

// register performs XDP_UMEM_REG on fd, first making sure the kernel's
// locked-memory accounting will accept the UMEM.
func (u *UMEM) register(fd int) error {
	size := uint64(len(u.mem))
	if err := ensureMemlock(size); err != nil {
		return err
	}
	reg := unix.XDPUmemReg{
		Addr:     umemBase(u.mem),
		Len:      size,
		Size:     u.cfg.FrameSize,
		Headroom: u.cfg.Headroom,
	}
	if err := setsockoptUMEMReg(fd, &reg); err != nil {
		if errors.Is(err, unix.ENOBUFS) {
			var lim unix.Rlimit
			_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
			return fmt.Errorf("register UMEM of %d bytes: locked-memory limit reached (RLIMIT_MEMLOCK %d, shared by all of this user's UMEMs); raise it (ulimit -l) or grant CAP_IPC_LOCK: %w", size, lim.Cur, err)
		}
		return fmt.Errorf("register UMEM (%d frames of %d bytes, headroom %d): %w", u.cfg.NumFrames, u.cfg.FrameSize, u.cfg.Headroom, err)
	}
	return nil
}

// ensureMemlock raises RLIMIT_MEMLOCK when the kernel would refuse to pin
// a UMEM of size bytes. Since 5.11 most BPF memory is charged to the memory
// cgroup, but a UMEM is still charged to the user's locked_vm against
// RLIMIT_MEMLOCK unless the caller has CAP_IPC_LOCK
// (net/xdp/xdp_umem.c, xdp_umem_account_pages).
func ensureMemlock(size uint64) error {
	if hasCapIPCLock() {
		return nil
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return fmt.Errorf("read RLIMIT_MEMLOCK: %w", err)
	}
	raise, err := memlockRaise(lim, size)
	if err != nil || raise == nil {
		return err
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, raise); err != nil {
		return fmt.Errorf("raise RLIMIT_MEMLOCK from %d to %d for a UMEM of %d bytes: %w", lim.Cur, raise.Cur, size, err)
	}
	return nil
}

// memlockRaise decides the new RLIMIT_MEMLOCK for pinning size more bytes:
// nil when the soft limit already allows it, the soft limit lifted to the
// hard limit when that allows it, and an error when even the hard limit is
// too small.
func memlockRaise(lim unix.Rlimit, size uint64) (*unix.Rlimit, error) {
	if lim.Cur == unix.RLIM_INFINITY || lim.Cur >= size {
		return nil, nil
	}
	if lim.Max != unix.RLIM_INFINITY && lim.Max < size {
		return nil, fmt.Errorf("UMEM of %d bytes exceeds the hard RLIMIT_MEMLOCK of %d bytes; raise it (ulimit -l, LimitMEMLOCK=) or grant CAP_IPC_LOCK", size, lim.Max)
	}
	return &unix.Rlimit{Cur: lim.Max, Max: lim.Max}, nil
}

// hasCapIPCLock reports whether CAP_IPC_LOCK is in the effective set, in
// which case the kernel does not charge UMEM pages to RLIMIT_MEMLOCK.
func hasCapIPCLock() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_IPC_LOCK/32].Effective&(1<<(unix.CAP_IPC_LOCK%32)) != 0
}
