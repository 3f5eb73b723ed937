package rc

import (
	"fmt"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/queue"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Forwarding between the engines of one adapter. An XDP program can only
// redirect a frame into the AF_XDP socket of the queue it arrived on
// (xsk_rcv_check), so a frame that the NIC's RSS puts on another queue than
// the one owning its QP reaches the wrong engine. That engine copies it
// into one of its forwarding buffers and pushes it into the owner's inbox;
// the owner handles it as a received frame on its next loop and hands the
// buffer back. QP1's datagrams go to the engine that has the GSI hook the
// same way. A forwarded frame is never forwarded again.
//
// Buffers are allocated once, when the engine starts with Config.Owner set;
// forwarding allocates nothing. With all buffers in flight, or the owner's
// inbox full, the frame is dropped and counted: RC retransmits it, as it
// would a frame lost on the wire.

const (
	forwardBuffers = 256
	// forwardFrameLen is the longest frame forwarded: a path MTU 4096
	// payload with every header, pad and ICRC fits.
	forwardFrameLen = 4096 + 256
)

type forwarded struct {
	buf  []byte
	home *Engine // whose pool buf returns to
}

func (e *Engine) initForwarding() error {
	var err error
	if e.inbox, err = queue.NewMPSC[forwarded](forwardBuffers); err != nil {
		return fmt.Errorf("rc: forwarding inbox: %w", err)
	}
	if e.fwdFree, err = queue.NewMPSC[[]byte](forwardBuffers); err != nil {
		return fmt.Errorf("rc: forwarding pool: %w", err)
	}
	backing := make([]byte, forwardBuffers*forwardFrameLen)
	for i := 0; i < forwardBuffers; i++ {
		b := backing[i*forwardFrameLen : (i+1)*forwardFrameLen : (i+1)*forwardFrameLen]
		e.fwdFree.TryPush(&b)
	}
	return nil
}

// forward hands frame, addressed to qpn, to the engine owning qpn. It
// reports false when no other engine owns it (the caller counts the frame
// as its own drop).
func (e *Engine) forward(qpn uint32, frame []byte) bool {
	if e.owner == nil {
		return false
	}
	dst := e.owner(qpn)
	if dst == nil || dst == e || dst.inbox == nil {
		return false
	}
	e.forwardTo(dst, frame)
	return true
}

// forwardTo copies frame into dst's inbox, or counts it dropped.
func (e *Engine) forwardTo(dst *Engine, frame []byte) {
	var buf []byte
	if len(frame) > forwardFrameLen || !e.fwdFree.TryPop(&buf) {
		atomic.AddUint64(&e.c.ForwardDrops, 1)
		return
	}
	buf = buf[:len(frame)]
	copy(buf, frame)
	f := forwarded{buf: buf, home: e}
	if !dst.inbox.TryPush(&f) {
		buf = buf[:cap(buf)]
		e.fwdFree.TryPush(&buf)
		atomic.AddUint64(&e.c.ForwardDrops, 1)
		return
	}
	atomic.AddUint64(&e.c.ForwardedOut, 1)
	dst.port.Doorbell()
}

// receiveForwarded handles the frames other engines forwarded to this one.
func (e *Engine) receiveForwarded() int {
	if e.inbox == nil {
		return 0
	}
	n := 0
	var f forwarded
	for n < rxBatch && e.inbox.TryPop(&f) {
		n++
		atomic.AddUint64(&e.c.ForwardedIn, 1)
		// The arrival engine verified the ICRC.
		if err := rocev2.ParseVerified(f.buf, &e.pkt); err != nil {
			e.countParseError(err)
		} else {
			e.dispatch(f.buf, false)
		}
		buf := f.buf[:cap(f.buf)]
		f.home.fwdFree.TryPush(&buf) // room for every buffer: cannot fail
	}
	return n
}
