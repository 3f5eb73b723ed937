package afxdp

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// BindMode is how a socket moves frames between the NIC and the UMEM.
type BindMode int

const (
	// ModeAuto tries zero-copy and falls back to copy mode when the driver
	// cannot do it. Socket.Mode reports which one was bound.
	ModeAuto BindMode = iota
	// ModeCopy asks for copy mode (XDP_COPY): the kernel copies each frame.
	ModeCopy
	// ModeZeroCopy asks for zero-copy (XDP_ZEROCOPY): the NIC DMAs into the
	// UMEM. Binding fails on drivers without AF_XDP zero-copy support.
	ModeZeroCopy
)

func (m BindMode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeCopy:
		return "copy"
	case ModeZeroCopy:
		return "zero-copy"
	}
	return fmt.Sprintf("BindMode(%d)", int(m))
}

// BusyPollConfig sets the socket's busy-poll options (socket(7);
// Documentation/networking/af_xdp.rst, "preferred busy polling").
type BusyPollConfig struct {
	// Timeout is SO_BUSY_POLL, in microseconds (rounded down); 0 leaves it.
	Timeout time.Duration
	// Budget is SO_BUSY_POLL_BUDGET, packets per busy-poll round
	// (1..65535); 0 leaves the kernel default.
	Budget int
	// Prefer sets SO_PREFER_BUSY_POLL: the application's polling replaces
	// the softirq, which stays off while the application keeps polling.
	Prefer bool
}

// SocketConfig describes one AF_XDP socket: one queue of one device.
type SocketConfig struct {
	// Ifindex is the device, Queue its RX/TX queue (as in ethtool -l).
	Ifindex int
	Queue   uint32
	// RxRingSize and TxRingSize are the RX and TX ring entries (powers of
	// two, default 2048).
	RxRingSize, TxRingSize uint32
	// Mode is the requested bind mode; Socket.Mode tells the result.
	Mode BindMode
	// MultiBuffer binds with XDP_USE_SG: packets larger than one frame
	// arrive and leave as descriptor chains (see PktContd). The XDP
	// program must be loaded with frags support (xdp.frags).
	MultiBuffer bool
	// NoNeedWakeup binds without XDP_USE_NEED_WAKEUP, so the kernel never
	// asks for wakeup syscalls and polls the rings itself (costs CPU in
	// zero-copy mode). By default need-wakeup is on.
	NoNeedWakeup bool
	// BusyPoll, if set, configures busy polling on the socket.
	BusyPoll *BusyPollConfig
}

// Errors a caller may test for with errors.Is.
var (
	// ErrTxBusy: Kick retried as often as it may and the kernel still had
	// descriptors it could not take; kick again later (usually after
	// draining the completion ring).
	ErrTxBusy = errors.New("afxdp: transmit still busy after bounded retries")
	// ErrClosed: the socket or its UMEM is closed.
	ErrClosed = errors.New("afxdp: closed")
)

// Statistics are the kernel's per-socket counters (XDP_STATISTICS).
type Statistics struct {
	RxDropped      uint64 // received frames dropped for lack of space or frames
	RxInvalidDescs uint64 // invalid descriptors on the fill ring
	TxInvalidDescs uint64 // invalid descriptors on the TX ring
	// The counters below exist since Linux 5.9; Extended reports whether
	// the kernel filled them in (older kernels fold RxRingFull into
	// RxDropped).
	RxRingFull           uint64 // frames dropped because the RX ring was full
	RxFillRingEmptyDescs uint64 // times the fill ring was found empty
	TxRingEmptyDescs     uint64 // times the TX ring was found empty
	Extended             bool
}

// Socket is an AF_XDP socket bound to one queue of one device, with its
// RX and TX rings and the fill and completion rings of that queue.
//
// The ring types are not safe for concurrent use; the queue's engine
// goroutine owns them. Close may be called from any goroutine, but not
// while the engine still uses the rings.
type Socket struct {
	umem        *UMEM
	fd          int
	ifindex     int
	queue       uint32
	mode        BindMode
	multiBuffer bool
	// zeroCopyRefusal is the kernel's answer to ModeAuto's zero-copy
	// bind, when copy mode took its place.
	zeroCopyRefusal error
	// sharesUMEM: bound with XDP_SHARED_UMEM, in the mode of the UMEM's
	// first socket.
	sharesUMEM bool
	needWakeup bool
	busyPoll   bool
	kickLimit  int

	fill FillQueue
	comp CompletionQueue
	rx   RxQueue
	tx   TxQueue
	maps [][]byte // ring mappings, unmapped by Close

	pfd unix.PollFd
}

// NewSocket opens an AF_XDP socket on umem and binds it to cfg.Queue of
// cfg.Ifindex.
//
// The first open socket of a UMEM registers it (XDP_UMEM_REG). Every later
// one shares it (XDP_SHARED_UMEM, Linux 5.10+ for another queue) and gets
// its own fill and completion rings; it inherits the first socket's mode,
// need-wakeup and multi-buffer settings, and asking for different ones is
// an error. Only one socket per queue and device may use a UMEM.
func NewSocket(umem *UMEM, cfg SocketConfig) (*Socket, error) {
	if cfg.RxRingSize == 0 {
		cfg.RxRingSize = DefaultRingSize
	}
	if cfg.TxRingSize == 0 {
		cfg.TxRingSize = DefaultRingSize
	}
	where := fmt.Sprintf("queue %d of ifindex %d", cfg.Queue, cfg.Ifindex)
	if umem == nil {
		return nil, fmt.Errorf("afxdp: socket for %s: nil UMEM", where)
	}
	if err := checkSocketConfig(&cfg); err != nil {
		return nil, fmt.Errorf("afxdp: socket for %s: %w", where, err)
	}

	umem.mu.Lock()
	defer umem.mu.Unlock()
	if umem.closed {
		return nil, fmt.Errorf("afxdp: socket for %s: UMEM: %w", where, ErrClosed)
	}
	var owner *Socket // an open socket of this UMEM to share it through
	if len(umem.sockets) > 0 {
		owner = umem.sockets[0]
		if err := checkShared(owner, &cfg); err != nil {
			return nil, fmt.Errorf("afxdp: share UMEM with %s: %w", where, err)
		}
	}

	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("afxdp: open AF_XDP socket for %s: %w", where, err)
	}
	s := &Socket{
		umem:        umem,
		fd:          fd,
		ifindex:     cfg.Ifindex,
		queue:       cfg.Queue,
		multiBuffer: cfg.MultiBuffer,
		needWakeup:  !cfg.NoNeedWakeup,
		busyPoll:    cfg.BusyPoll != nil,
		pfd:         unix.PollFd{Fd: int32(fd), Events: unix.POLLIN},
	}
	if err := s.setup(umem, owner, &cfg); err != nil {
		s.release()
		return nil, fmt.Errorf("afxdp: %s: %w", where, err)
	}
	// Copy mode transmits at most 32 descriptors per sendto (TX_BATCH_SIZE
	// in net/xdp/xsk.c) and answers EAGAIN while more are queued, so a kick
	// may take a full ring's worth of calls.
	s.kickLimit = 8
	if s.mode == ModeCopy {
		s.kickLimit += int(cfg.TxRingSize / 32)
	}
	umem.sockets = append(umem.sockets, s)
	return s, nil
}

func checkSocketConfig(cfg *SocketConfig) error {
	if cfg.Ifindex <= 0 {
		return fmt.Errorf("ifindex %d: must be positive", cfg.Ifindex)
	}
	if err := checkRingSize("RX", cfg.RxRingSize); err != nil {
		return err
	}
	if err := checkRingSize("TX", cfg.TxRingSize); err != nil {
		return err
	}
	if cfg.Mode < ModeAuto || cfg.Mode > ModeZeroCopy {
		return fmt.Errorf("unknown bind mode %d", int(cfg.Mode))
	}
	if bp := cfg.BusyPoll; bp != nil {
		if bp.Timeout < 0 || bp.Timeout/time.Microsecond > math.MaxInt32 {
			return fmt.Errorf("busy-poll timeout %v: must be 0 to %d µs", bp.Timeout, math.MaxInt32)
		}
		if bp.Budget < 0 || bp.Budget > math.MaxUint16 {
			return fmt.Errorf("busy-poll budget %d: must be 0 to %d", bp.Budget, math.MaxUint16)
		}
	}
	return nil
}

// checkShared rejects settings a shared socket cannot have: the kernel
// refuses mode, need-wakeup and SG flags with XDP_SHARED_UMEM and copies
// them from the first socket (net/xdp/xsk.c xsk_bind,
// net/xdp/xsk_buff_pool.c xp_assign_dev_shared).
func checkShared(owner *Socket, cfg *SocketConfig) error {
	for _, s := range owner.umem.sockets {
		if s.ifindex == cfg.Ifindex && s.queue == cfg.Queue {
			return errors.New("this UMEM already has a socket on that queue")
		}
	}
	if cfg.Mode != ModeAuto && cfg.Mode != owner.mode {
		return fmt.Errorf("mode %v requested, but the UMEM is bound in %v mode", cfg.Mode, owner.mode)
	}
	if cfg.MultiBuffer != owner.multiBuffer {
		return fmt.Errorf("multi-buffer %v requested, but the UMEM's first socket has %v", cfg.MultiBuffer, owner.multiBuffer)
	}
	if !cfg.NoNeedWakeup != owner.needWakeup {
		return fmt.Errorf("need-wakeup %v requested, but the UMEM's first socket has %v", !cfg.NoNeedWakeup, owner.needWakeup)
	}
	return nil
}

// setup runs the steps between socket(2) and a bound socket, in the order
// the kernel requires: UMEM and ring sizes, ring mappings (only while the
// socket is unbound, xsk_mmap), bind, then options.
func (s *Socket) setup(umem *UMEM, owner *Socket, cfg *SocketConfig) error {
	if owner == nil {
		if err := umem.register(s.fd); err != nil {
			return err
		}
	}
	ucfg := umem.cfg
	for _, o := range []struct {
		name string
		opt  int
		n    uint32
	}{
		{"fill", unix.XDP_UMEM_FILL_RING, ucfg.FillRingSize},
		{"completion", unix.XDP_UMEM_COMPLETION_RING, ucfg.CompletionRingSize},
		{"RX", unix.XDP_RX_RING, cfg.RxRingSize},
		{"TX", unix.XDP_TX_RING, cfg.TxRingSize},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, o.opt, int(o.n)); err != nil {
			return fmt.Errorf("size %s ring to %d: %w", o.name, o.n, err)
		}
	}
	if err := s.mapRings(ucfg.FillRingSize, ucfg.CompletionRingSize, cfg.RxRingSize, cfg.TxRingSize); err != nil {
		return err
	}
	if err := s.bind(owner, cfg); err != nil {
		return err
	}
	if bp := cfg.BusyPoll; bp != nil {
		if err := s.setBusyPoll(bp); err != nil {
			return err
		}
	}
	return nil
}

func (s *Socket) mapRings(fillN, compN, rxN, txN uint32) error {
	off, n, err := getMmapOffsets(s.fd)
	if err != nil {
		return fmt.Errorf("read ring mmap offsets: %w", err)
	}
	if n != sizeofMmapOffsets {
		// Pre-4.19 layout without the flags word: no need-wakeup.
		return fmt.Errorf("kernel returned %d bytes of ring offsets, want %d: kernel too old for AF_XDP need-wakeup", n, sizeofMmapOffsets)
	}
	rings := []struct {
		name    string
		pgoff   int64
		off     unix.XDPRingOffset
		entries uint32
		size    uint64
		init    func(mem []byte, prod, cons, flags *atomic.Uint32)
	}{
		{"fill", unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, fillN, addrEntrySize, func(mem []byte, p, c, f *atomic.Uint32) {
			s.fill.init(p, c, f, addrEntries(mem, off.Fr, fillN))
		}},
		{"completion", unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, compN, addrEntrySize, func(mem []byte, p, c, f *atomic.Uint32) {
			s.comp.init(p, c, f, addrEntries(mem, off.Cr, compN))
		}},
		{"RX", unix.XDP_PGOFF_RX_RING, off.Rx, rxN, descEntrySize, func(mem []byte, p, c, f *atomic.Uint32) {
			s.rx.init(p, c, f, descEntries(mem, off.Rx, rxN))
		}},
		{"TX", unix.XDP_PGOFF_TX_RING, off.Tx, txN, descEntrySize, func(mem []byte, p, c, f *atomic.Uint32) {
			s.tx.init(p, c, f, descEntries(mem, off.Tx, txN))
		}},
	}
	for _, r := range rings {
		mem, prod, cons, flags, err := mapRing(s.fd, r.pgoff, r.off, r.entries, r.size)
		if err != nil {
			return fmt.Errorf("map %s ring: %w", r.name, err)
		}
		s.maps = append(s.maps, mem)
		r.init(mem, prod, cons, flags)
	}
	return nil
}

func (s *Socket) bind(owner *Socket, cfg *SocketConfig) error {
	sa := unix.SockaddrXDP{Ifindex: uint32(cfg.Ifindex), QueueID: cfg.Queue}
	if owner != nil {
		// Mode, need-wakeup and SG come from the UMEM's first socket.
		s.sharesUMEM = true
		sa.Flags = unix.XDP_SHARED_UMEM
		sa.SharedUmemFD = uint32(owner.fd)
		if err := bindBusyRetry(s.fd, &sa); err != nil {
			return fmt.Errorf("bind sharing the UMEM of queue %d of ifindex %d: %w", owner.queue, owner.ifindex, err)
		}
	} else {
		var base uint16
		if s.needWakeup {
			base |= unix.XDP_USE_NEED_WAKEUP
		}
		if s.multiBuffer {
			base |= unix.XDP_USE_SG
		}
		var err error
		switch cfg.Mode {
		case ModeCopy:
			err = s.bindFlags(&sa, base|unix.XDP_COPY)
		case ModeZeroCopy:
			err = s.bindFlags(&sa, base|unix.XDP_ZEROCOPY)
		default:
			// A failed bind leaves the socket unbound with its rings
			// intact (xsk_bind only changes state on success), so the
			// copy-mode attempt can reuse it.
			err = s.bindFlags(&sa, base|unix.XDP_ZEROCOPY)
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				if cerr := s.bindFlags(&sa, base|unix.XDP_COPY); cerr != nil {
					err = fmt.Errorf("zero-copy: %w; copy mode: %w", err, cerr)
				} else {
					s.zeroCopyRefusal, err = err, nil
				}
			}
		}
		if err != nil {
			if s.multiBuffer && errors.Is(err, unix.EOPNOTSUPP) {
				return fmt.Errorf("bind with multi-buffer (XDP_USE_SG): the device or kernel does not support it for this mode: %w", err)
			}
			return fmt.Errorf("bind (%v mode requested): %w", cfg.Mode, err)
		}
	}
	flags, err := getOptionsFlags(s.fd)
	if err != nil {
		return fmt.Errorf("read back bind mode (XDP_OPTIONS): %w", err)
	}
	s.mode = ModeCopy
	if flags&unix.XDP_OPTIONS_ZEROCOPY != 0 {
		s.mode = ModeZeroCopy
	}
	if cfg.Mode != ModeAuto && s.mode != cfg.Mode {
		return fmt.Errorf("bound in %v mode, but %v was requested", s.mode, cfg.Mode)
	}
	return nil
}

func (s *Socket) bindFlags(sa *unix.SockaddrXDP, flags uint16) error {
	sa.Flags = flags
	return bindBusyRetry(s.fd, sa)
}

// bindBusyRetry binds, retrying EBUSY for a short, bounded time. Closing an
// AF_XDP socket frees its claim on the device queue from a workqueue
// (xp_put_pool -> xp_release_deferred in net/xdp/xsk_buff_pool.c), so a
// queue closed a moment ago can still be busy; a queue another live socket
// holds stays busy and fails after the bound. The bound is a second of
// wall time: on a loaded machine the workqueue ran later than 200ms.
func bindBusyRetry(fd int, sa *unix.SockaddrXDP) error {
	const bound, pause = time.Second, 2 * time.Millisecond
	start := time.Now()
	for {
		err := unix.Bind(fd, sa)
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		if waited := time.Since(start); waited >= bound {
			return fmt.Errorf("queue busy for %v: another AF_XDP socket holds it: %w", waited.Round(time.Millisecond), err)
		}
		time.Sleep(pause)
	}
}

func (s *Socket) setBusyPoll(bp *BusyPollConfig) error {
	opts := []struct {
		name string
		opt  int
		val  int
		set  bool
	}{
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1, bp.Prefer},
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, int(bp.Timeout / time.Microsecond), bp.Timeout > 0},
		{"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, bp.Budget, bp.Budget > 0},
	}
	for _, o := range opts {
		if !o.set {
			continue
		}
		if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
			return fmt.Errorf("set %s to %d (needs CAP_NET_ADMIN to raise): %w", o.name, o.val, err)
		}
	}
	return nil
}

// FD returns the socket's descriptor, the value to store in an XSKMAP.
func (s *Socket) FD() int { return s.fd }

// Ifindex returns the device the socket is bound to.
func (s *Socket) Ifindex() int { return s.ifindex }

// Queue returns the device queue the socket is bound to.
func (s *Socket) Queue() uint32 { return s.queue }

// Mode returns the mode the kernel bound the socket in (ModeCopy or
// ModeZeroCopy), as read back with getsockopt(XDP_OPTIONS).
func (s *Socket) Mode() BindMode { return s.mode }

// ZeroCopyRefusal returns the error with which the kernel refused the
// zero-copy bind of ModeAuto (EOPNOTSUPP where the device offers no
// zero-copy, see XDPFeatures.ZeroCopy), or nil if the socket was not
// bound by falling back to copy mode.
func (s *Socket) ZeroCopyRefusal() error { return s.zeroCopyRefusal }

// SharesUMEM reports whether the socket was bound to another socket's
// UMEM (XDP_SHARED_UMEM), which takes that socket's mode.
func (s *Socket) SharesUMEM() bool { return s.sharesUMEM }

// MultiBuffer reports whether the socket was bound with XDP_USE_SG.
func (s *Socket) MultiBuffer() bool { return s.multiBuffer }

// UMEM returns the UMEM the socket uses.
func (s *Socket) UMEM() *UMEM { return s.umem }

// Fill returns the fill ring of the socket's queue.
func (s *Socket) Fill() *FillQueue { return &s.fill }

// Completion returns the completion ring of the socket's queue.
func (s *Socket) Completion() *CompletionQueue { return &s.comp }

// RX returns the socket's RX ring.
func (s *Socket) RX() *RxQueue { return &s.rx }

// TX returns the socket's TX ring.
func (s *Socket) TX() *TxQueue { return &s.tx }

// Kick asks the kernel to transmit what was submitted on the TX ring
// (sendto with MSG_DONTWAIT, Documentation/networking/af_xdp.rst).
//
// In copy mode the kernel transmits from within the call, at most 32
// descriptors at a time, so Kick calls again while it answers EAGAIN, EBUSY
// or ENOBUFS, yielding between calls, up to a bound; it skips the syscall
// when nothing is pending. In zero-copy mode the driver transmits by itself
// and Kick makes the syscall only when the TX ring asks for a wakeup.
//
// The kernel takes a TX descriptor only when it can reserve its completion
// slot, so with a full completion ring Kick returns nil and descriptors stay
// pending until the completion ring is drained. Kick returns ErrTxBusy when
// the bound is reached with the kernel still pushing back. It allocates
// nothing unless the kernel reports an error.
func (s *Socket) Kick() error {
	if s.fd < 0 {
		return ErrClosed
	}
	if s.mode == ModeZeroCopy {
		if s.needWakeup && !s.tx.NeedWakeup() {
			return nil
		}
	} else if s.tx.Pending() == 0 {
		return nil
	}
	for range s.kickLimit {
		switch errno := sendtoWakeup(s.fd); errno {
		case 0:
			return nil
		case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			runtime.Gosched()
		default:
			return fmt.Errorf("afxdp: kick TX of queue %d of ifindex %d: %w", s.queue, s.ifindex, errno)
		}
	}
	return ErrTxBusy
}

// WakeupRX lets the kernel refill from the fill ring and receive (recvfrom
// with MSG_DONTWAIT). It makes the syscall only when the fill ring asks for
// a wakeup, or when busy polling is configured, where the call itself runs
// the device's poll loop.
func (s *Socket) WakeupRX() error {
	if s.fd < 0 {
		return ErrClosed
	}
	if !s.busyPoll && !s.fill.NeedWakeup() {
		return nil
	}
	switch errno := recvfromWakeup(s.fd); errno {
	case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
		return nil
	default:
		return fmt.Errorf("afxdp: wake up RX of queue %d of ifindex %d: %w", s.queue, s.ifindex, errno)
	}
}

// Poll waits up to timeout (forever if negative) for the RX ring to hold
// packets and reports whether it does. The wait also drives copy-mode TX
// and need-wakeup (xsk_poll in net/xdp/xsk.c). An interrupted wait returns
// false and no error.
func (s *Socket) Poll(timeout time.Duration) (bool, error) {
	if s.fd < 0 {
		return false, ErrClosed
	}
	var ts *unix.Timespec
	var t unix.Timespec
	if timeout >= 0 {
		t = unix.NsecToTimespec(int64(timeout))
		ts = &t
	}
	s.pfd.Revents = 0
	n, errno := ppollFD(&s.pfd, ts)
	switch {
	case errno == unix.EINTR:
		return false, nil
	case errno != 0:
		return false, fmt.Errorf("afxdp: poll queue %d of ifindex %d: %w", s.queue, s.ifindex, errno)
	case n > 0 && s.pfd.Revents&(unix.POLLERR|unix.POLLNVAL) != 0:
		return false, fmt.Errorf("afxdp: poll queue %d of ifindex %d: revents %#x", s.queue, s.ifindex, s.pfd.Revents)
	}
	return n > 0 && s.pfd.Revents&unix.POLLIN != 0, nil
}

// Stats reads the kernel's counters for the socket.
func (s *Socket) Stats() (Statistics, error) {
	if s.fd < 0 {
		return Statistics{}, ErrClosed
	}
	st, n, err := getStatistics(s.fd)
	if err != nil {
		return Statistics{}, fmt.Errorf("afxdp: read statistics of queue %d of ifindex %d: %w", s.queue, s.ifindex, err)
	}
	return Statistics{
		RxDropped:            st.Rx_dropped,
		RxInvalidDescs:       st.Rx_invalid_descs,
		TxInvalidDescs:       st.Tx_invalid_descs,
		RxRingFull:           st.Rx_ring_full,
		RxFillRingEmptyDescs: st.Rx_fill_ring_empty_descs,
		TxRingEmptyDescs:     st.Tx_ring_empty_descs,
		Extended:             n == sizeofStatistics,
	}, nil
}

// Close unmaps the socket's rings and closes it. Frames the kernel held in
// those rings are not returned to any allocator. Close is safe to call more
// than once.
func (s *Socket) Close() error {
	u := s.umem
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, o := range u.sockets {
		if o == s {
			u.sockets = append(u.sockets[:i], u.sockets[i+1:]...)
			break
		}
	}
	return s.release()
}

// release unmaps and closes whatever setup got to, and leaves the rings
// empty so that a use after Close finds nothing instead of unmapped memory.
func (s *Socket) release() error {
	if s.fd < 0 {
		return nil
	}
	var errs []error
	s.fill, s.comp, s.rx, s.tx = FillQueue{}, CompletionQueue{}, RxQueue{}, TxQueue{}
	s.fill.init(&closedIndex, &closedIndex, &closedIndex, nil)
	s.comp.init(&closedIndex, &closedIndex, &closedIndex, nil)
	s.rx.init(&closedIndex, &closedIndex, &closedIndex, nil)
	s.tx.init(&closedIndex, &closedIndex, &closedIndex, nil)
	for _, m := range s.maps {
		if err := unix.Munmap(m); err != nil {
			errs = append(errs, fmt.Errorf("unmap ring: %w", err))
		}
	}
	s.maps = nil
	if err := unix.Close(s.fd); err != nil {
		errs = append(errs, fmt.Errorf("close socket: %w", err))
	}
	s.fd = -1
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("afxdp: close queue %d of ifindex %d: %w", s.queue, s.ifindex, err)
	}
	return nil
}

// closedIndex backs the rings of a closed socket: always zero, so they
// report no entries and no room.
var closedIndex atomic.Uint32
