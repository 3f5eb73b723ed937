package shm

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/wake"
)

// DoorbellSize is the bytes a doorbell's flags take in a segment: one
// cache line, at a CacheLine-aligned offset.
const DoorbellSize = CacheLine

// Offsets of the flags in a doorbell's cache line.
const (
	bellPending  = 0
	bellSleeping = 4
)

// Doorbell wakes a sleeper in another process. The sleeper owns an eventfd
// and sends it to the ringer; both attach a Doorbell over the same flags in
// a shared segment, the sleeper with its eventfd, the ringer with the
// descriptor it received. A ring costs the ringer two atomic operations
// while the sleeper is awake; only a ring that finds it asleep writes the
// eventfd.
//
// The protocol is ndk/internal/port.Bell's, with its two flags in shared
// memory (the "announce, then re-check" handshake of futexes):
//
//	ringer:  post work; pending = 1; if sleeping == 1 { write the eventfd }
//	sleeper: sleeping = 1; if swap(pending, 0) == 1 { don't sleep } else { poll }
//
// Both sides' atomics are sequentially consistent, in one process or in
// two mapping the same page, so either the sleeper's swap sees the ring or
// the ringer's load sees the sleeper. A ring that finds pending already set
// returns at once: the earlier ring is not consumed yet, and the work check
// the sleeper makes after Wait covers this ringer's post too.
//
// A hostile peer can only cost CPU or withhold its own wake-ups: a ringer
// that keeps pending set keeps the sleeper from sleeping (as writing the
// eventfd in a loop would), and a sleeper that keeps sleeping set makes
// every ring write the eventfd.
//
// Ring may be called from any number of goroutines; Wait, Watch and Ready
// from one; Close must not run concurrently with any of them.
type Doorbell struct {
	pending  *atomic.Uint32
	sleeping *atomic.Uint32
	efd      int
	pfds     []unix.PollFd // [0] the eventfd, then watched descriptors
	ts       unix.Timespec
	one      [8]byte // the eventfd increment
	drained  [8]byte // where Wait reads the eventfd counter
	writes   atomic.Uint64
	sleeps   atomic.Uint64
	// WaitFile's: the file it reads through, its raw connection, and the
	// read the runtime's poller retries (a method value made once).
	waitFile *os.File
	waitConn syscall.RawConn
	drainFn  func(fd uintptr) bool
	drainErr unix.Errno
}

// NewEventfd returns a non-blocking, close-on-exec eventfd for a sleeper's
// Doorbell.
func NewEventfd() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("shm: doorbell eventfd: %w", err)
	}
	return fd, nil
}

// NewDoorbell attaches a doorbell whose flags sit at off in s (DoorbellSize
// bytes, CacheLine-aligned) and whose eventfd is efd. The Doorbell owns
// efd from then on and closes it in Close (not when NewDoorbell fails).
// The flags start zero in a fresh segment; a doorbell finds whatever is
// there, which at worst costs one spurious wake-up.
func NewDoorbell(s *Segment, off int, efd int) (*Doorbell, error) {
	if err := s.region("doorbell", off, DoorbellSize, CacheLine); err != nil {
		return nil, err
	}
	d := &Doorbell{
		pending:  word(s.Bytes(), off+bellPending),
		sleeping: word(s.Bytes(), off+bellSleeping),
		efd:      efd,
		pfds:     []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}},
	}
	binary.NativeEndian.PutUint64(d.one[:], 1) // eventfd counters are host-endian
	return d, nil
}

// FD returns the doorbell's eventfd: the sleeper sends it to the ringer.
func (d *Doorbell) FD() int { return d.efd }

// Ring wakes the sleeper if it sleeps, or makes its next Wait return at
// once. It reports whether it wrote the eventfd.
func (d *Doorbell) Ring() bool {
	if d.pending.Load() != 0 {
		return false // an unconsumed ring is already on its way
	}
	if d.pending.Swap(1) != 0 || d.sleeping.Load() == 0 {
		return false
	}
	// EAGAIN means the counter is saturated, which wakes the poll just as
	// well.
	wake.EventfdWrite(d.efd, &d.one)
	d.writes.Add(1)
	return true
}

// Announce is Wait's first half, for a sleeper whose poll is someone
// else's (the engine's, which watches this doorbell's eventfd and resets
// it): it announces the sleep and reports whether the sleeper may sleep,
// false when a ring came first. After true the sleeper sleeps on the
// eventfd, and calls Resume when it wakes, whatever woke it.
func (d *Doorbell) Announce() bool {
	d.sleeping.Store(1)
	if d.pending.Swap(0) != 0 {
		d.sleeping.Store(0)
		return false
	}
	d.sleeps.Add(1)
	return true
}

// Resume ends a sleep that Announce began. Rings that came meanwhile are
// consumed: the sleeper's work check after it covers their posts.
func (d *Doorbell) Resume() {
	d.sleeping.Store(0)
	d.pending.Store(0)
}

// Watch adds fd to the descriptors Wait polls for input besides the
// eventfd, and returns its index for Ready.
func (d *Doorbell) Watch(fd int) int {
	d.pfds = append(d.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	return len(d.pfds) - 2
}

// Ready reports whether the last Wait that polled found watched descriptor
// i readable, hung up or in error.
func (d *Doorbell) Ready(i int) bool { return d.pfds[i+1].Revents != 0 }

// Wait sleeps until a ring, input on a watched descriptor, or timeout (a
// negative timeout waits forever; zero returns at once). The caller checks
// its rings before Wait, and again after, whatever Wait returned: a ring
// that came before Wait makes it return at once, and a wake-up may be
// spurious. Wait allocates nothing.
func (d *Doorbell) Wait(timeout time.Duration) error {
	for i := range d.pfds {
		d.pfds[i].Revents = 0
	}
	if timeout == 0 {
		return nil
	}
	d.sleeping.Store(1)
	if d.pending.Swap(0) != 0 {
		d.sleeping.Store(0)
		return nil
	}
	var ts *unix.Timespec
	if timeout > 0 {
		d.ts = unix.NsecToTimespec(int64(timeout))
		ts = &d.ts
	}
	d.sleeps.Add(1)
	n, errno := wake.Poll(d.pfds, ts) // sleeps through the runtime's signals
	// Rings that came meanwhile are consumed here: the caller's check
	// after Wait covers their posts.
	d.sleeping.Store(0)
	d.pending.Store(0)
	if n > 0 && d.pfds[0].Revents&unix.POLLIN != 0 {
		wake.EventfdRead(d.efd, &d.drained) // resets the counter
	}
	switch {
	case errno != 0:
		return fmt.Errorf("shm: doorbell wait: ppoll: %w", errno)
	case n > 0 && d.pfds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0:
		return fmt.Errorf("shm: doorbell wait: eventfd revents %#x", d.pfds[0].Revents)
	}
	return nil
}

// WaitFile is Wait without a timeout or watched descriptors for a sleeper
// that is an ordinary goroutine: it reads the eventfd through f, a
// pollable os.File on a dup of it (NewFile of the non-blocking eventfd),
// so the goroutine parks in the Go runtime's netpoller instead of holding
// a thread in ppoll(2). The thread that finds it ready in epoll runs it
// at once, and the goroutines it wakes in turn (a callback's dispatcher,
// the consumer blocked on a notification) run on that thread after it:
// one kernel wake-up for the chain where a blocking ppoll cost a thread
// hand-off at each step. It allocates nothing.
func (d *Doorbell) WaitFile(f *os.File) error {
	d.sleeping.Store(1)
	if d.pending.Swap(0) != 0 {
		d.sleeping.Store(0)
		return nil
	}
	d.sleeps.Add(1)
	if d.waitFile != f {
		c, err := f.SyscallConn()
		if err != nil {
			d.sleeping.Store(0)
			return fmt.Errorf("shm: doorbell wait: %w", err)
		}
		d.waitFile, d.waitConn = f, c
		d.drainFn = d.drain
	}
	// The poller parks the goroutine until the eventfd is readable and
	// calls drain again; drain reads with a raw system call (wake's doc
	// says why), so a wait costs no system call but the read that finds
	// the ring.
	d.drainErr = 0
	err := d.waitConn.Read(d.drainFn)
	d.sleeping.Store(0)
	d.pending.Store(0)
	if err == nil && d.drainErr != 0 {
		err = d.drainErr
	}
	if err != nil {
		return fmt.Errorf("shm: doorbell wait: read eventfd: %w", err)
	}
	return nil
}

// drain reads (and so resets) the eventfd for WaitFile; false asks the
// poller to wait for it to be readable.
func (d *Doorbell) drain(fd uintptr) bool {
	errno := wake.EventfdRead(int(fd), &d.drained)
	if errno == unix.EAGAIN {
		return false
	}
	d.drainErr = errno
	return true
}

// File returns a pollable os.File on a dup of the doorbell's eventfd, for
// WaitFile; the caller closes it.
func (d *Doorbell) File() (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(d.efd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: doorbell: dup eventfd: %w", err)
	}
	return os.NewFile(uintptr(fd), "ndkxdp-doorbell"), nil
}

// Stats returns how many Rings wrote the eventfd and how many Waits
// polled, for tests and counters.
func (d *Doorbell) Stats() (writes, sleeps uint64) { return d.writes.Load(), d.sleeps.Load() }

// Close closes the eventfd. It is safe to call more than once.
func (d *Doorbell) Close() error {
	if d.efd < 0 {
		return nil
	}
	err := unix.Close(d.efd)
	d.efd = -1
	if err != nil {
		return fmt.Errorf("shm: close doorbell eventfd: %w", err)
	}
	return nil
}
