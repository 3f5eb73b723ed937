package port

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/internal/wake"
)

// xdpPacketHeadroom is the room the kernel keeps in front of received data
// in every chunk (XDP_PACKET_HEADROOM, include/linux/bpf.h).
const xdpPacketHeadroom = 256

// maxChain bounds the descriptors of one frame. The kernel builds at most
// MAX_SKB_FRAGS (17) fragments plus the head per packet; 16 chunks carry
// far more than a 9000-byte MTU.
const maxChain = 16

// vlanEthernetHeader is an Ethernet header with one 802.1Q tag.
const vlanEthernetHeader = 18

// DefaultXSKScratch is how many multi-descriptor frames one Receive batch
// returns on a multi-buffer socket by default.
const DefaultXSKScratch = 8

// MinTxReference is the smallest segment Transmit references in place
// (XSKConfig.TxReference) rather than copies: a referenced segment costs a
// descriptor of its own, and in copy mode the kernel a page for it
// (xsk_build_skb, net/xdp/xsk.c), which copying a few hundred bytes
// undercuts.
const MinTxReference = 1024

// XSKConfig tunes an XSK. The zero value suits a 1500-byte-MTU device.
type XSKConfig struct {
	// MTU is the device's MTU (default 1500). MaxFrame is MTU plus an
	// Ethernet header with one VLAN tag, capped by what the UMEM carries:
	// one chunk less the receive headroom, or a chain of chunks on a
	// multi-buffer socket.
	MTU int
	// RxFrames is how many UMEM frames the port lends the kernel to
	// receive into, counting those it holds between Receive and Release
	// (default half the allocator's free frames). TxFrames is how many
	// may be in transmission (default the rest, at most the completion
	// ring's size, so that the kernel never waits for a completion slot).
	RxFrames, TxFrames uint32
	// Scratch is how many frames that arrived as descriptor chains one
	// Receive batch can return; each is copied into its own MaxFrame
	// buffer (default DefaultXSKScratch on a multi-buffer socket, none
	// otherwise). A batch stops before a chain that finds no buffer.
	Scratch int
	// TxReference is a UMEM address range [lo, hi) whose bytes stay put
	// while a frame that carries them is in flight: the adapter's buffer
	// pool (ndk.AllocBuffer), whose memory a request keeps until the
	// peer's ACK retires it, which comes after the frame left. On a
	// multi-buffer socket, Transmit sends a segment of at least
	// MinTxReference bytes that lies inside the range as descriptors
	// pointing at it instead of copying it (DESIGN.md, Memory: a header
	// frame, the payload in place, a trailer). It must not overlap the
	// allocator's frames. Zero: every byte is copied.
	TxReference [2]uint64
	// TxSlots, with TxReference, is the layout of the pool's allocations
	// (headroom, tailroom: see TxSlotSize), shared by the ports of one
	// pool. A frame whose payload is exactly one allocation leaves as one
	// descriptor, headers in the headroom, pad and ICRC in the tailroom,
	// on any socket. Its size must be TxReference's.
	TxSlots *TxSlots
}

// XSKStats counts an XSK's frames. The data path adds to them once per
// batch (Receive, Flush), so they may trail the engine by one batch.
type XSKStats struct {
	RxFrames    uint64 // frames returned by Receive
	RxChained   uint64 // of those, chains (gathered into a scratch buffer unless joined)
	RxJoined    uint64 // of those, chains made contiguous in place instead (see join)
	RxInvalid   uint64 // descriptors dropped: outside the UMEM, or a chain longer than MaxFrame
	TxFrames    uint64 // frames queued by Transmit and flushed
	TxChained   uint64 // of those, frames that took more than one chunk
	TxRefFrames uint64 // of those, frames with a segment referenced in place (TxReference), one descriptor (TxSlots) or a chain
	TxRefBytes  uint64 // bytes those references carried: copies saved
	TxSlotted   uint64 // of TxRefFrames, frames sent as one descriptor over an allocation's headroom (TxSlots)
	TxSlotBusy  uint64 // frames whose payload was a whole allocation but copied: its headroom was in flight
	TxFull      uint64 // Transmit calls refused with ErrTxFull
	KickBusy    uint64 // Flush calls whose kick left frames pending (afxdp.ErrTxBusy)
	RxWakeups   uint64 // fill-ring wakeups made for the kernel (need-wakeup)
	Doorbells   uint64 // eventfd writes: Doorbell calls that found the engine asleep
	WaitWakes   uint64 // Wait calls ended by the doorbell's eventfd
	WaitPolled  uint64 // Wait calls that entered ppoll
}

// XSK is a Port over one AF_XDP socket. Frames that arrive in one
// descriptor are handed to the engine in place, in the UMEM; chains are
// joined in place when their chunks are adjacent (the usual case, see
// join) and otherwise copied once into scratch buffers, so that the engine
// always sees contiguous frames. Transmit copies into UMEM frames, except segments in
// XSKConfig.TxReference, which it sends in place, and Flush kicks the
// kernel.
//
// Like the rings it owns, an XSK belongs to one goroutine, the queue's
// engine; only Doorbell and Stats may be called from others, and Wait
// from one goroutine while another, holding the engine's turn, calls the
// rest (consumer-driven progress, rc.PollProgress): Wait touches nothing
// of theirs. Receive and Release return no error, so a failure of theirs
// (a frame the allocator does not know, a failed fill-ring wakeup) is
// returned by the next Flush.
type XSK struct {
	sock   *afxdp.Socket
	umem   *afxdp.UMEM
	frames *afxdp.FrameAllocator
	rx     *afxdp.RxQueue
	tx     *afxdp.TxQueue
	fill   *afxdp.FillQueue
	comp   *afxdp.CompletionQueue

	chunk    int // bytes one TX descriptor carries
	maxFrame int

	rxBudget, rxLent uint32
	txBudget, txOut  uint32 // TX frames: the most in flight, and in flight
	txInFlight       uint32 // TX descriptors not yet completed

	// Zero-copy transmit: the UMEM range Transmit may reference, the
	// allocator's range, and per allocator frame the TX descriptors in
	// flight that point into it (a frame holding a header and a trailer
	// is freed when both completed, whatever order completions come in).
	refLo, refHi uint64
	slots        *TxSlots
	frLo, frHi   uint64
	txRefs       []uint8

	// The last Receive: its descriptors, still peeked, and the scratch
	// buffers its chains used.
	rxStart, rxDescs uint32
	scratch          [][]byte
	scratchUsed      int

	txDescs [maxChain]afxdp.Desc
	local   XSKStats // engine-side counts, published per batch
	stats   struct {
		rxFrames, rxChained, rxJoined, rxInvalid, txFrames, txChained, txRefFrames, txRefBytes,
		txSlotted, txSlotBusy, txFull, kickBusy, rxWakeups, doorbells, waitWakes, waitPolled atomic.Uint64
	}
	deferred error // a data-path failure reported by the next Flush

	bell *Bell
	efd  int
	// pfds: the socket (RX), the eventfd (doorbell), then the watched
	// eventfds (Watch).
	pfds    []unix.PollFd
	ts      unix.Timespec
	one     [8]byte // the eventfd increment, never written after NewXSK
	drained [8]byte

	// A nap (WaitDoorbell) parks the goroutine in the runtime, on napWake
	// and napTimer, rather than in ppoll: napping tells Doorbell which
	// one to wake.
	napping  atomic.Bool
	napWake  chan struct{}
	napTimer *time.Timer

	// closeMu keeps Close from closing the eventfd under a Doorbell
	// that is writing to it (the number could be reused by then).
	closeMu sync.RWMutex
	closed  atomic.Bool
}

var (
	_ Port           = (*XSK)(nil)
	_ DoorbellWaiter = (*XSK)(nil)
)

// NewXSK makes a Port of sock, which is already bound (and registered in
// the program's socket map by the caller). The XSK takes sock over (Close
// closes it) and takes frames out of frames to lend the kernel RxFrames of
// them at once; afterwards only the XSK may use sock's rings and frames.
func NewXSK(sock *afxdp.Socket, frames *afxdp.FrameAllocator, cfg XSKConfig) (*XSK, error) {
	if sock == nil || frames == nil {
		return nil, errors.New("port: NewXSK: nil socket or frame allocator")
	}
	where := fmt.Sprintf("port: XSK on queue %d of ifindex %d", sock.Queue(), sock.Ifindex())
	if sock.FD() < 0 {
		return nil, fmt.Errorf("%s: %w", where, afxdp.ErrClosed)
	}
	umem := sock.UMEM()
	x := &XSK{
		sock:   sock,
		umem:   umem,
		frames: frames,
		rx:     sock.RX(),
		tx:     sock.TX(),
		fill:   sock.Fill(),
		comp:   sock.Completion(),
		chunk:  int(umem.FrameSize()),
		efd:    -1,
	}
	if err := x.configure(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	x.bell = new(Bell)
	x.napWake = make(chan struct{}, 1)
	x.napTimer = time.NewTimer(time.Hour)
	x.napTimer.Stop()
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: doorbell eventfd: %w", where, err)
	}
	x.efd = efd
	binary.NativeEndian.PutUint64(x.one[:], 1)
	x.pfds = []unix.PollFd{
		{Fd: int32(sock.FD()), Events: unix.POLLIN},
		{Fd: int32(efd), Events: unix.POLLIN},
	}
	x.refill()
	if x.deferred != nil {
		err := x.deferred
		unix.Close(efd)
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return x, nil
}

func (x *XSK) configure(cfg XSKConfig) error {
	if cfg.MTU < 0 || cfg.Scratch < 0 {
		return fmt.Errorf("MTU %d, Scratch %d: negative", cfg.MTU, cfg.Scratch)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	// Received data starts behind the kernel's and the UMEM's headroom.
	rxRoom := x.chunk - xdpPacketHeadroom - int(x.umem.Headroom())
	if rxRoom <= 0 {
		return fmt.Errorf("UMEM headroom %d leaves no room in a %d-byte frame", x.umem.Headroom(), x.chunk)
	}
	capacity := rxRoom
	if x.sock.MultiBuffer() {
		capacity = maxChain * rxRoom
		if cfg.Scratch == 0 {
			cfg.Scratch = DefaultXSKScratch
		}
	} else {
		cfg.Scratch = 0 // a chain never arrives without XDP_USE_SG
	}
	x.maxFrame = min(cfg.MTU+vlanEthernetHeader, capacity)

	avail := x.frames.Available()
	if cfg.RxFrames == 0 {
		cfg.RxFrames = max(avail/2, 1)
	}
	if cfg.TxFrames == 0 && avail > cfg.RxFrames {
		cfg.TxFrames = min(avail-cfg.RxFrames, x.comp.Size())
	}
	switch {
	case cfg.TxFrames == 0:
		return fmt.Errorf("no frames left to transmit: the allocator has %d free and RxFrames takes %d", avail, cfg.RxFrames)
	case uint64(cfg.RxFrames)+uint64(cfg.TxFrames) > uint64(avail):
		return fmt.Errorf("RxFrames %d + TxFrames %d exceed the allocator's %d free frames", cfg.RxFrames, cfg.TxFrames, avail)
	case cfg.TxFrames > x.comp.Size():
		return fmt.Errorf("TxFrames %d exceed the completion ring's %d entries: the kernel would stall waiting for a slot", cfg.TxFrames, x.comp.Size())
	}
	x.rxBudget, x.txBudget = cfg.RxFrames, cfg.TxFrames
	x.frLo, x.frHi = x.frames.Range()
	x.txRefs = make([]uint8, x.frames.Frames())
	if lo, hi := cfg.TxReference[0], cfg.TxReference[1]; hi != 0 {
		switch {
		case lo >= hi || hi > uint64(len(x.umem.Bytes())):
			return fmt.Errorf("TxReference [%#x, %#x) is not a range inside the %d-byte UMEM", lo, hi, len(x.umem.Bytes()))
		case lo < x.frHi && x.frLo < hi:
			return fmt.Errorf("TxReference [%#x, %#x) overlaps the port's frames [%#x, %#x)", lo, hi, x.frLo, x.frHi)
		}
		x.refLo, x.refHi = lo, hi
		if cfg.TxSlots != nil {
			if uint64(cfg.TxSlots.Size()) != hi-lo {
				return fmt.Errorf("TxSlots for %d bytes, TxReference [%#x, %#x) has %d", cfg.TxSlots.Size(), lo, hi, hi-lo)
			}
			x.slots = cfg.TxSlots
		}
	} else if cfg.TxSlots != nil {
		return errors.New("TxSlots without a TxReference range")
	}
	x.scratch = make([][]byte, cfg.Scratch)
	for i := range x.scratch {
		x.scratch[i] = make([]byte, 0, x.maxFrame)
	}
	return nil
}

// Socket returns the AF_XDP socket the port drives.
func (x *XSK) Socket() *afxdp.Socket { return x.sock }

// Stats returns the port's counters. It is safe from any goroutine.
func (x *XSK) Stats() XSKStats {
	s := &x.stats
	return XSKStats{
		RxFrames: s.rxFrames.Load(), RxChained: s.rxChained.Load(), RxJoined: s.rxJoined.Load(), RxInvalid: s.rxInvalid.Load(),
		TxFrames: s.txFrames.Load(), TxChained: s.txChained.Load(), TxFull: s.txFull.Load(),
		TxRefFrames: s.txRefFrames.Load(), TxRefBytes: s.txRefBytes.Load(),
		TxSlotted: s.txSlotted.Load(), TxSlotBusy: s.txSlotBusy.Load(),
		KickBusy: s.kickBusy.Load(), RxWakeups: s.rxWakeups.Load(), Doorbells: s.doorbells.Load(),
		WaitWakes: s.waitWakes.Load(), WaitPolled: s.waitPolled.Load(),
	}
}

// publish moves the engine's batch counts into the shared counters.
func (x *XSK) publish() {
	l, s := &x.local, &x.stats
	flush(&s.rxFrames, &l.RxFrames)
	flush(&s.rxChained, &l.RxChained)
	flush(&s.rxJoined, &l.RxJoined)
	flush(&s.rxInvalid, &l.RxInvalid)
	flush(&s.txFrames, &l.TxFrames)
	flush(&s.txChained, &l.TxChained)
	flush(&s.txRefFrames, &l.TxRefFrames)
	flush(&s.txRefBytes, &l.TxRefBytes)
	flush(&s.txSlotted, &l.TxSlotted)
	flush(&s.txSlotBusy, &l.TxSlotBusy)
	flush(&s.txFull, &l.TxFull)
	flush(&s.kickBusy, &l.KickBusy)
	flush(&s.rxWakeups, &l.RxWakeups)
}

func flush(shared *atomic.Uint64, local *uint64) {
	if *local != 0 {
		shared.Add(*local)
		*local = 0
	}
}

// fault keeps the first data-path failure for the next Flush.
func (x *XSK) fault(err error) {
	if x.deferred == nil {
		x.deferred = err
	}
}

// Wait implements Port: ppoll(2) on the socket (POLLIN: the RX ring holds
// frames) and on the doorbell's eventfd. The poll also lets the kernel
// make progress on copy-mode TX and need-wakeup (xsk_poll, net/xdp/xsk.c).
func (x *XSK) Wait(timeout time.Duration) error {
	return x.wait(timeout, unix.POLLIN)
}

// WaitDoorbell implements DoorbellWaiter: Wait without the socket's
// POLLIN.
func (x *XSK) WaitDoorbell(timeout time.Duration) error {
	if len(x.pfds) > 2 {
		return x.wait(timeout, 0) // eventfds to watch: only ppoll sees them
	}
	return x.nap(timeout)
}

// nap is WaitDoorbell with nothing to watch but the doorbell: the
// goroutine parks in the runtime, on napWake and napTimer, instead of
// blocking its thread in ppoll. A goroutine blocked in a system call
// keeps its P until the runtime's monitor takes it back, 20µs to 10ms
// later (retake in runtime/proc.go), and a consumer that was to run the
// engine's turns waited for it that long: with fewer Ps than polling
// goroutines, the consumers' round trip under PollProgress measured p50
// 1.2-2.3ms at GOMAXPROCS 1 and p99 0.3-1.2ms at 2 (ndk/internal/rc's
// doc, "Polling"). A parked goroutine gives its P back at once. The
// price is the runtime's timer granularity: with nothing else to run, a
// timeout under a millisecond ends after about one (the netpoller waits
// in whole milliseconds), which the nap's bound, drivenNap in rc, already
// allows: a nap is taken only while consumers drive the engine and fire
// its timers in their turns.
func (x *XSK) nap(timeout time.Duration) error {
	if x.closed.Load() {
		return ErrClosed
	}
	if timeout == 0 {
		return nil
	}
	select {
	case <-x.napWake: // a ring that came after the last nap had ended
	default:
	}
	x.napping.Store(true)
	if !x.bell.Sleep() {
		x.napping.Store(false)
		return nil
	}
	if x.closed.Load() {
		// Close may have come between the check above and the drain,
		// which then took its token.
		x.bell.Awake()
		x.napping.Store(false)
		return ErrClosed
	}
	x.stats.waitPolled.Add(1)
	rung := false
	if timeout < 0 {
		<-x.napWake
		rung = true
	} else {
		x.napTimer.Reset(timeout)
		select {
		case <-x.napWake:
			rung = true
		case <-x.napTimer.C:
		}
		x.napTimer.Stop()
	}
	x.bell.Awake()
	x.napping.Store(false)
	if rung {
		x.stats.waitWakes.Add(1)
	}
	if x.closed.Load() {
		return ErrClosed
	}
	return nil
}

// wait is Wait, polling the socket for rx (POLLIN or 0).
func (x *XSK) wait(timeout time.Duration, rx int16) error {
	if x.closed.Load() {
		return ErrClosed
	}
	x.pfds[0].Events = rx
	if timeout == 0 || !x.bell.Sleep() {
		return nil
	}
	var ts *unix.Timespec
	if timeout > 0 {
		x.ts = unix.NsecToTimespec(int64(timeout))
		ts = &x.ts
	}
	for i := range x.pfds {
		x.pfds[i].Revents = 0
	}
	n, errno := wake.Poll(x.pfds, ts) // sleeps through the runtime's signals
	x.bell.Awake()
	x.stats.waitPolled.Add(1)
	if n > 0 && x.pfds[1].Revents&unix.POLLIN != 0 {
		x.stats.waitWakes.Add(1)
		wake.EventfdRead(x.efd, &x.drained) // resets the counter; EAGAIN if a racing Wait read it
	}
	for i := 2; n > 0 && i < len(x.pfds); i++ {
		if x.pfds[i].Revents&unix.POLLIN != 0 {
			x.stats.waitWakes.Add(1)
			wake.EventfdRead(int(x.pfds[i].Fd), &x.drained)
		}
	}
	switch {
	case errno != 0:
		return fmt.Errorf("port: wait on queue %d of ifindex %d: ppoll: %w", x.sock.Queue(), x.sock.Ifindex(), errno)
	case n > 0 && (x.pfds[0].Revents|x.pfds[1].Revents)&(unix.POLLERR|unix.POLLNVAL) != 0:
		return fmt.Errorf("port: wait on queue %d of ifindex %d: revents %#x, %#x", x.sock.Queue(), x.sock.Ifindex(), x.pfds[0].Revents, x.pfds[1].Revents)
	}
	return nil
}

// Watch makes Wait return also when efd, an eventfd of another ringer's
// (a daemon client's own doorbell), becomes readable, and reset its
// counter then. Each such ringer has its own eventfd and its own flags,
// so what one writes or reads never withholds another's wake-up. Watch
// and Unwatch run on the goroutine that calls Wait; Unwatch efd before
// closing it.
func (x *XSK) Watch(efd int) {
	x.pfds = append(x.pfds, unix.PollFd{Fd: int32(efd), Events: unix.POLLIN})
}

// Unwatch stops watching efd.
func (x *XSK) Unwatch(efd int) {
	for i := 2; i < len(x.pfds); i++ {
		if x.pfds[i].Fd == int32(efd) {
			x.pfds = append(x.pfds[:i], x.pfds[i+1:]...)
			return
		}
	}
}

// Doorbell implements Port. While the engine is awake it costs two atomic
// operations; it writes the eventfd only for a sleeping engine.
func (x *XSK) Doorbell() {
	if !x.bell.Ring() {
		return
	}
	if x.napping.Load() {
		select {
		case x.napWake <- struct{}{}:
		default:
		}
		x.stats.doorbells.Add(1)
		return
	}
	x.closeMu.RLock()
	if !x.closed.Load() {
		// EAGAIN means the counter is saturated, which wakes the poll
		// just as well.
		wake.EventfdWrite(x.efd, &x.one)
		x.stats.doorbells.Add(1)
	}
	x.closeMu.RUnlock()
}

// MaxFrame implements Port.
func (x *XSK) MaxFrame() int { return x.maxFrame }

// Close implements Port: it closes the socket and the doorbell. The frames
// the kernel held are not returned to the allocator (see
// afxdp.Socket.Close); close the UMEM, or rebuild its allocators, next.
func (x *XSK) Close() error {
	x.closeMu.Lock()
	defer x.closeMu.Unlock()
	if x.closed.Swap(true) {
		return nil
	}
	select {
	case x.napWake <- struct{}{}: // a nap ends with ErrClosed
	default:
	}
	var errs []error
	if err := x.sock.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := unix.Close(x.efd); err != nil {
		errs = append(errs, fmt.Errorf("port: close doorbell eventfd: %w", err))
	}
	return errors.Join(errs...)
}
