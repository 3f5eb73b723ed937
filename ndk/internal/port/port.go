package port

import (
	"errors"
	"time"
)

// MaxSegments is the most pieces one transmitted frame may be given in.
// The engine uses at most three: headers, payload, pad+ICRC.
const MaxSegments = 4

// Errors returned by ports.
var (
	// ErrTxFull means the transmit queue has no room now; the frame was
	// not queued. Flush and retry later (after Reclaim frees room).
	ErrTxFull = errors.New("port: transmit queue full")
	// ErrTooLarge means the frame exceeds the port's maximum frame size.
	ErrTooLarge = errors.New("port: frame larger than the port's maximum")
	// ErrEmptyFrame means Transmit was given no bytes.
	ErrEmptyFrame = errors.New("port: empty frame")
	// ErrClosed means the port was closed.
	ErrClosed = errors.New("port: closed")
)

// Port is one queue's frame I/O. All methods except Doorbell are called by
// whoever owns the port, one at a time (the engine of that queue, or a
// consumer running the engine's turn: rc.PollProgress); Doorbell may be
// called from any goroutine, and Wait by the engine goroutine while a
// consumer holding the turn calls the others, so Wait must touch no state
// of theirs.
type Port interface {
	// Receive stores up to len(out) received frames in out and returns how
	// many. It never blocks. Each frame is contiguous and stays valid until
	// the next Receive or Release; the engine must copy what it keeps.
	Receive(out [][]byte) int
	// Release gives back the frames of the last Receive.
	Release()

	// Transmit queues one frame made of the concatenation of segs (at
	// most MaxSegments). The bytes are copied or referenced before
	// Transmit returns, so the caller may reuse segs at once. It returns
	// ErrTxFull when there is no room and ErrTooLarge when the frame
	// exceeds MaxFrame.
	Transmit(segs [][]byte) error
	// Flush makes queued frames leave (the AF_XDP TX kick) and reclaims
	// the buffers of frames that have left.
	Flush() error

	// Wait blocks until a frame may be ready to receive, Doorbell is
	// called, or timeout passes (a negative timeout waits without limit).
	// It may return early; callers loop.
	Wait(timeout time.Duration) error
	// Doorbell wakes a Wait in progress or the next one. It is safe from
	// any goroutine, does not allocate, and costs no syscall when the
	// engine is not waiting.
	Doorbell()

	// MaxFrame is the largest frame Transmit accepts and Receive returns.
	MaxFrame() int
	// Close releases the port's resources.
	Close() error
}

// DoorbellWaiter is a Port that can also sleep on its doorbell alone, not
// on received frames. rc's consumer-driven progress (rc.PollProgress)
// naps its engine so while consumers receive the frames themselves: a
// sleeper that woke for each frame would cost the sender's kick a
// wake-up and take the turn from the consumer it was meant for.
type DoorbellWaiter interface {
	// WaitDoorbell is Wait, except that a received frame does not end
	// it. Wrappers (Capture, Tap) need not forward it: they change
	// nothing of a wait (Inner).
	WaitDoorbell(timeout time.Duration) error
}
