package rc

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// The consumer's side of a QP: posting into its work rings and waking the
// engine. These run on the consumer's goroutines, never on the engine's.

// SendWR is one initiator request as posted.
type SendWR struct {
	Op      Op
	Flags   ndkpi.OpFlag
	Context any
	SGL     []SGE
	// RemoteAddr and RemoteToken name the peer's memory for Read and Write.
	RemoteAddr  uint64
	RemoteToken uint32
	// InvalidateToken is the peer token a SendInvalidate invalidates, or
	// the local fast MR's or window's token an OpInvalidate revokes.
	InvalidateToken uint32
	// Local operations (local.go). OpFastRegister: the fast MR (its local
	// token) gets Buf at RemoteAddr with Access. OpBind: the window MW
	// (its remote token) gets Length bytes at RemoteAddr of the MR whose
	// local token is MR, with Access. Tokens receives the new tokens when
	// PostSend returns Success; non-zero on entry, it names their keys
	// (memreg.FastRegisterKeys: a daemon client chose them).
	MR, MW uint32
	Buf    []byte
	Length uint64
	Access memreg.Access
	Tokens memreg.Tokens
	// Compare and SwapAdd are the operands of OpCompareSwap (compare,
	// swap) and OpFetchAdd (SwapAdd is the addend).
	Compare, SwapAdd uint64
	// UD is a UD QP's destination (ud.go).
	UD UDDest
	// Imm is the immediate data of OpSendImm and OpWriteImm.
	Imm uint32
}

// PostSend queues an initiator request. It returns an NTSTATUS: Success,
// or an inline failure that produces no completion:
//   - ConnectionInvalid: the QP was never connected;
//   - InvalidParameter: too many SGEs (inline requests may have any
//     number), inline data over the QP's inline size, a total length over
//     QPConfig.MaxTransfer, or an atomic whose SGL is not one 8-byte SGE;
//   - AccessViolation: an SGE whose local token, bounds or rights fail
//     (checked now, so that a bad SGE never reaches the wire);
//   - InsufficientResources: the send queue is full;
//   - NotSupported: a READ, atomic or SEND with invalidate on a UC QP;
//   - InvalidHandle: the QP is closed.
//
// Unless wr.Flags has OpFlagDefer, the engine is woken. An inline failure
// first rings the doorbell for earlier deferred requests (NDKPI.md §8).
// After the QP has failed or been flushed, requests are accepted and
// complete with STATUS_CANCELLED. It allocates nothing.
func (q *QP) PostSend(wr *SendWR) ndkpi.Status {
	st := q.postSend(wr)
	switch {
	case st != ndkpi.StatusSuccess:
		q.RingDeferred()
	case wr.Flags&ndkpi.OpFlagDefer != 0:
		q.deferred = true
	default:
		q.deferred = false
		q.doorbell()
	}
	return st
}

func (q *QP) postSend(wr *SendWR) ndkpi.Status {
	switch State(q.state.Load()) {
	case StateInit:
		return ndkpi.StatusConnectionInvalid
	case StateClosed:
		return ndkpi.StatusInvalidHandle
	}
	if q.cfg.UD {
		if st := q.checkUD(wr); st != ndkpi.StatusSuccess {
			return st
		}
	} else if q.cfg.UC && !wr.Op.onUC() {
		return ndkpi.StatusNotSupported
	} else if wr.Op.local() {
		return q.postLocal(wr)
	}
	inline := wr.Flags&ndkpi.OpFlagInline != 0 && !wr.Op.responded()
	maxSGE := q.cfg.MaxSendSGE
	need := memreg.Access(0)
	if wr.Op.responded() {
		maxSGE = q.cfg.MaxReadSGE
		need = memreg.AccessReadSink
	}
	if wr.Op.atomic() && (len(wr.SGL) != 1 || wr.SGL[0].Length != 8) {
		return ndkpi.StatusInvalidParameter // the original value is 8 bytes (IBTA 9.4.5)
	}
	// Inline requests may exceed the SGE limit (NDKPI.md §5, seeds 003
	// and 004): their bytes are copied into the WQE now, however many
	// pieces they come in.
	if !inline && len(wr.SGL) > min(maxSGE, MaxSGE) {
		return ndkpi.StatusInvalidParameter
	}
	var total uint64
	for i := range wr.SGL {
		s := &wr.SGL[i]
		if inline && s.Addr == 0 && s.Length > 0 {
			return ndkpi.StatusInvalidParameter // no memory to copy from
		}
		total += uint64(s.Length)
	}
	if total > q.maxTransfer() || (inline && total > uint64(q.cfg.InlineSize)) {
		return ndkpi.StatusInvalidParameter
	}
	localInv := wr.Op == OpRead && wr.Flags&ndkpi.OpFlagRDMAReadLocalInvalidate != 0
	if localInv && len(wr.SGL) == 0 {
		return ndkpi.StatusInvalidParameter // no first SGE whose token to invalidate
	}
	w := q.sq.reserve()
	if w == nil {
		q.sendQueueFull()
		return ndkpi.StatusInsufficientResources
	}
	if inline {
		off := 0
		for i := range wr.SGL {
			s := &wr.SGL[i]
			off += copy(w.inline[off:], q.inlineBytes(s))
		}
		w.nseg = 1
		w.seg[0] = w.inline[:off]
		clear(w.seg[1:])
	} else {
		for i := range wr.SGL {
			s := &wr.SGL[i]
			b, f := q.regions.CheckLocal(q.cfg.PD, s.Token, s.Addr, s.Length, need)
			if f != memreg.OK {
				for j := 0; j < i; j++ {
					w.seg[j] = nil
				}
				return ndkpi.StatusAccessViolation
			}
			w.seg[i] = b
		}
		w.nseg = uint8(len(wr.SGL))
	}
	w.op = wr.Op
	w.flags = wr.Flags
	w.length = uint32(total)
	w.remoteAddr = wr.RemoteAddr
	w.remoteToken = wr.RemoteToken
	w.invToken = wr.InvalidateToken
	if localInv {
		w.invToken = wr.SGL[0].Token // RDMA_READ_LOCAL_INVALIDATE (local.go)
	}
	w.compare = wr.Compare
	w.swapAdd = wr.SwapAdd
	w.imm = wr.Imm
	w.ctx = wr.Context
	if q.cfg.UD {
		w.ud = wr.UD
	}
	q.sq.publish()
	return ndkpi.StatusSuccess
}

// inlineBytes returns the bytes of an inline SGE. With INLINE the token
// "might be invalid" (seed 003; NDKPI.md §5) and the buffer need only be
// resident: a valid token is checked like any SGE, otherwise the address
// is taken as the live Go memory the caller names, as NDK takes
// VirtualAddress.
func (q *QP) inlineBytes(s *SGE) []byte {
	if s.Length == 0 {
		return nil
	}
	if b, f := q.regions.CheckLocal(q.cfg.PD, s.Token, s.Addr, s.Length, 0); f == memreg.OK {
		return b
	}
	return bytesAt(s.Addr, s.Length)
}

// maxTransfer is the most bytes one request or receive buffer may total.
func (q *QP) maxTransfer() uint64 {
	if q.cfg.MaxTransfer == 0 {
		return 1<<32 - 1
	}
	return uint64(q.cfg.MaxTransfer)
}

// RingDeferred submits the requests posted with OpFlagDefer since the last
// doorbell. A post the caller refuses before PostSend sees it calls this,
// as PostSend does for its own inline failures: a refused post must not
// leave earlier deferred requests unsubmitted (NDKPI.md §8).
func (q *QP) RingDeferred() {
	if q.deferred {
		q.deferred = false
		q.doorbell()
	}
}

// PostReceive queues a receive buffer; allowed before the QP connects. It
// returns Success, InvalidParameter (too many SGEs, or more bytes than a
// set QPConfig.MaxTransfer), AccessViolation (an SGE without local write),
// InsufficientResources (receive queue full), InvalidHandle (closed) or
// InvalidDeviceRequest (a QP on an SRQ, whose receives go to the SRQ). It
// allocates nothing.
func (q *QP) PostReceive(ctx any, sgl []SGE) ndkpi.Status {
	if State(q.state.Load()) == StateClosed {
		return ndkpi.StatusInvalidHandle
	}
	if q.cfg.SRQ != nil {
		return ndkpi.StatusInvalidDeviceRequest // its receives come from the SRQ
	}
	if len(sgl) > q.cfg.MaxRecvSGE {
		return ndkpi.StatusInvalidParameter
	}
	if q.cfg.MaxTransfer != 0 {
		var sum uint64
		for i := range sgl {
			sum += uint64(sgl[i].Length)
		}
		if sum > uint64(q.cfg.MaxTransfer) {
			return ndkpi.StatusInvalidParameter
		}
	}
	w := q.rq.reserve()
	if w == nil {
		return ndkpi.StatusInsufficientResources
	}
	var total uint64
	for i := range sgl {
		s := &sgl[i]
		b, f := q.regions.CheckLocal(q.cfg.PD, s.Token, s.Addr, s.Length, memreg.AccessLocalWrite)
		if f != memreg.OK {
			for j := 0; j < i; j++ {
				w.seg[j] = nil
			}
			return ndkpi.StatusAccessViolation
		}
		w.seg[i] = b
		total += uint64(s.Length)
	}
	if total > 1<<32-1 {
		total = 1<<32 - 1
	}
	w.nseg = uint8(len(sgl))
	w.length = uint32(total)
	w.ctx = ctx
	q.rq.publish()
	if State(q.state.Load()) == StateError {
		q.doorbell() // the engine cancels it
	}
	return ndkpi.StatusSuccess
}

// Flush starts cancelling every pending request: the QP moves to the error
// state and every queued send and receive completes with
// STATUS_CANCELLED, in order (NdkFlush). It returns at once.
func (q *QP) Flush() {
	q.flushReq.Store(true)
	q.doorbell()
}

// doorbell queues the QP for the engine and wakes it, or, under
// PollProgress, runs the engine's turn here when no one else is running
// one (progress.go) and the engine goroutine sleeps or lags: the QP was
// still queued from an earlier post, which no turn took since, as when
// the engine's thread waits for a core that spinning consumers hold. That
// turn takes the QP from the ready ring. An engine that is awake and
// keeps up takes it in its next turn, with whatever else was posted
// meanwhile, in one kick.
func (q *QP) doorbell() {
	e := q.eng
	queued := q.ready.Swap(true)
	if !queued {
		e.ready.TryPush(&q) // never full: each QP is queued at most once
	}
	if e.poll == PollProgress && (queued || e.sleepUntil.Load() != 0) {
		if ran, _ := e.consumerTurn(false); ran {
			return
		}
	}
	e.port.Doorbell()
}

// sendQueueFull is what a post that found the send queue full does: on an
// adaptive engine, with no goroutine waiting for a P, it yields the
// caller's thread. Room comes only with the peer's ACK, which the engines
// of both ends must run to send and take; a producer that retries at
// once, with runtime.Gosched between, keeps the core they wait for
// (consumerIdle has why and the figures).
func (q *QP) sendQueueFull() {
	if e := q.eng; e.poll == PollAdaptive && !goroutineWaits(e) {
		yieldThread()
	}
}
