package rc

import (
	"errors"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
)

// The engine is the wire of connection management (package cm) as well as
// of the RC transport: the adapter's management queue receives the UD
// datagrams for QP1 (IB CM MADs; ROCEV2.md 3.1) because the steering
// program sends them there (loader.GSIQPN), and the CM's MADs leave
// through the same port. Config.GSI hands each received one to the CM
// without leaving the engine goroutine; the handler copies what it keeps
// into a bounded queue of its own and returns. Config.FirstPacket reports
// the first packet a QP receives after Connect, which a passive side
// waiting for RTU takes as the RTU's proof (IBTA 12.9.6, cm.c
// ib_cm_notify IB_EVENT_COMM_EST).

// gsiQueueDepth bounds the MADs waiting to be transmitted. The CM sends a
// handful per connection and retransmits what is lost, so a full queue
// drops rather than blocks.
const gsiQueueDepth = 256

// gsiMaxTries is how many loops a MAD waits for transmit room before it
// is dropped; the CM's retransmission covers it.
const gsiMaxTries = 64

// ErrGSIFull means the engine's MAD queue is full; the MAD was not queued.
var ErrGSIFull = errors.New("rc: management datagram queue full")

// TransmitGSI queues one complete frame (a MAD framed by cm.GSIFramer)
// for the engine to transmit before its data traffic, and wakes the
// engine. It is safe from any goroutine and never blocks; the engine owns
// frame from now on.
func (e *Engine) TransmitGSI(frame []byte) error {
	if len(frame) == 0 {
		return port.ErrEmptyFrame
	}
	if !e.gsiTx.TryPush(&frame) {
		return ErrGSIFull
	}
	e.port.Doorbell()
	return nil
}

// transmitGSI sends the queued MADs. A frame that finds the port full is
// retried on later loops, and dropped after gsiMaxTries.
func (e *Engine) transmitGSI() int {
	n := 0
	for {
		if e.gsiHeld == nil {
			if !e.gsiTx.TryPop(&e.gsiHeld) {
				return n
			}
			e.gsiTries = 0
		}
		e.segs[0] = e.gsiHeld
		err := e.port.Transmit(e.segs[:1])
		e.segs[0] = nil
		switch {
		case err == nil:
			atomic.AddUint64(&e.c.FramesOut, 1)
		case errors.Is(err, port.ErrTxFull):
			atomic.AddUint64(&e.c.TxFull, 1)
			if e.gsiTries++; e.gsiTries < gsiMaxTries {
				return n + 1 // work left: the loop does not sleep
			}
		default:
			atomic.AddUint64(&e.c.TxErrors, 1)
		}
		e.gsiHeld = nil
		n++
	}
}

// noteFirst reports qpn's first packet since Connect, once. The set holds
// only connected QPs that have not received yet, so the per-packet cost
// is a length check once every connection has seen traffic.
func (e *Engine) noteFirst(qpn uint32) {
	if _, ok := e.awaitFirst[qpn]; ok {
		delete(e.awaitFirst, qpn)
		e.firstPacket(qpn)
	}
}
