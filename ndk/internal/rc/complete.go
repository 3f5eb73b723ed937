package rc

import (
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// How work requests end. completeSend and completeRecv retire the oldest
// WQE of a ring and push its CQE; failHead, fail and enterError move a QP
// to the error state, where cancelAll completes everything left, and
// everything posted later, with STATUS_CANCELLED.

// failHead completes the request a fatal NAK names with the error it maps
// to, then fails the QP; code is the NAK's ib_wc_status. Remote access
// errors are STATUS_ACCESS_VIOLATION (ND2: bad MR or token), except on a
// READ, where NdkRead names STATUS_REMOTE_RESOURCES for reading beyond the
// remote region; other fatal NAKs are STATUS_REMOTE_RESOURCES (NDKPI.md §9).
func (e *Engine) failHead(q *QP, code uint32) {
	t := &q.t
	if t.sqHead == t.sqStart {
		return
	}
	if code == wcRemAccessErr && q.sq.at(t.sqHead).op != OpRead {
		e.fail(q, ndkpi.StatusAccessViolation, code)
		return
	}
	e.fail(q, ndkpi.StatusRemoteResources, code)
}

// fail completes the oldest outstanding request with status and moves the
// QP to the error state.
func (e *Engine) fail(q *QP, status ndkpi.Status, code uint32) {
	e.transportFailed(q, code)
	markError(q)
	t := &q.t
	if t.sqHead < q.sq.tail.Load() {
		e.completeSend(q, q.sq.at(t.sqHead), status, code)
	}
	e.enterError(q)
}

// markError publishes the error state before the completion that reports
// the failure is pushed: a consumer that sees the error completion finds
// the QP in error (QP.Connected false), as it would after NdkGetCqResults
// in a provider that fails the QP first.
func markError(q *QP) {
	if s := State(q.state.Load()); s != StateClosed && s != StateError {
		q.state.Store(uint32(StateError))
	}
}

// enterError moves q to the error state: every pending request completes
// with STATUS_CANCELLED, now and as it is posted later (ND2 IND2QueuePair:
// after the first error completion the connection is dead).
func (e *Engine) enterError(q *QP) {
	t := &q.t
	for i := range t.res {
		t.res[i] = readResource{}
	}
	e.stopQP(q)
}

// stopQP is enterError without dropping READ responses already owed: a
// responder that NAKs a request still answers the READs before it, in
// order, as a responder executing in PSN order would have.
func (e *Engine) stopQP(q *QP) {
	t := &q.t
	if !t.failed {
		t.failed = true
		if State(q.state.Load()) != StateClosed {
			q.state.Store(uint32(StateError))
		}
	}
	t.ackDeadline, t.rnrUntil = 0, 0
	t.wbuf = nil
	e.cancelAll(q)
	e.signalDrained(q)
}

// signalDrained closes q's Drained channel once q failed and owes no READ
// response: stopQP leaves those to service, which calls it again when
// they are sent.
func (e *Engine) signalDrained(q *QP) {
	t := &q.t
	if !t.failed || t.drained {
		return
	}
	for i := range t.res {
		if t.res[i].sending() {
			return
		}
	}
	t.drained = true
	close(q.drained)
}

// cancelAll completes every queued request of a failed QP with
// STATUS_CANCELLED.
func (e *Engine) cancelAll(q *QP) {
	t := &q.t
	for tail := q.sq.tail.Load(); t.sqHead < tail; {
		e.completeSend(q, q.sq.at(t.sqHead), ndkpi.StatusCancelled, wcWRFlushErr)
	}
	t.sqStart, t.txIdx, t.txPkt = t.sqHead, t.sqHead, 0
	t.una = t.nextPSN
	if q.cfg.SRQ != nil {
		// Only the receive this QP took; the SRQ's others stay for the
		// other QPs on it.
		if t.hasCur {
			e.completeRecv(q, ndkpi.StatusCancelled, wcWRFlushErr, 0, ndkpi.OpReceive, 0, false, noImm)
		}
	} else {
		for tail := q.rq.tail.Load(); t.rqHead < tail; {
			e.completeRecv(q, ndkpi.StatusCancelled, wcWRFlushErr, 0, ndkpi.OpReceive, 0, false, noImm)
		}
	}
	t.inMsg = msgNone
}

// completeSend retires the oldest send WQE, pushing its completion unless
// it succeeded silently (SILENT_SUCCESS: the WQE still retires in order).
// The slot is freed before the completion is pushed, so a consumer that
// sees the completion finds room for a new post.
func (e *Engine) completeSend(q *QP, w *sendWQE, status ndkpi.Status, code uint32) {
	t := &q.t
	signal := status != ndkpi.StatusSuccess || w.flags&ndkpi.OpFlagSilentSuccess == 0
	if signal {
		typ := ndkpi.OpSend
		switch w.op {
		case OpWrite, OpWriteImm:
			typ = ndkpi.OpWrite
		case OpRead:
			typ = ndkpi.OpRead
		case OpCompareSwap:
			typ = ndkpi.OpCompareAndSwap
		case OpFetchAdd:
			typ = ndkpi.OpFetchAndAdd
		case OpFastRegister:
			typ = ndkpi.OpFastRegister
		case OpBind:
			typ = ndkpi.OpBind
		case OpInvalidate:
			typ = ndkpi.OpInvalidate
		}
		e.entry = cq.Entry{
			Status:            status,
			Type:              typ,
			ProviderErrorCode: code,
			QPContext:         q.cfg.Context,
			RequestContext:    w.ctx,
		}
	}
	if w.op.responded() && t.sqHead < t.sqStart {
		t.readsOut--
	}
	w.ctx = nil
	clear(w.seg[:w.nseg])
	t.sqHead++
	if t.sqStart < t.sqHead {
		t.sqStart = t.sqHead
	}
	q.sq.retire(t.sqHead)
	if signal {
		q.cfg.SendCQ.Push(&e.entry)
		e.entry = cq.Entry{}
		atomic.AddUint64(&e.c.Completions, 1)
	}
}

// immediate is the ImmDt a receive completion carries, if any.
type immediate struct {
	value uint32
	ok    bool
}

var noImm immediate

// completeRecv retires the oldest receive WQE with a completion, freeing
// the slot first (see completeSend).
func (e *Engine) completeRecv(q *QP, status ndkpi.Status, code, n uint32, typ ndkpi.OperationType, token uint32, solicited bool, imm immediate) {
	t := &q.t
	w := e.recvHead(q)
	e.entry = cq.Entry{
		Status:                       status,
		BytesTransferred:             n,
		Type:                         typ,
		ProviderErrorCode:            code,
		TypeSpecificCompletionOutput: uint64(token),
		QPContext:                    q.cfg.Context,
		RequestContext:               w.ctx,
		Solicited:                    solicited,
		HasImmediate:                 imm.ok,
		Immediate:                    imm.value,
	}
	if q.cfg.SRQ != nil {
		t.hasCur = false
		q.cfg.SRQ.release(t.cur)
	} else {
		w.ctx = nil
		clear(w.seg[:w.nseg])
		t.rqHead++
		q.rq.retire(t.rqHead)
	}
	q.cfg.RecvCQ.Push(&e.entry)
	e.entry = cq.Entry{}
	atomic.AddUint64(&e.c.Completions, 1)
}

// recvHead is the receive the current SEND lands in: the oldest of the
// QP's receive queue, or the one it took from its SRQ.
func (e *Engine) recvHead(q *QP) *recvWQE {
	if q.cfg.SRQ != nil {
		return &q.cfg.SRQ.slab[q.t.cur]
	}
	return q.rq.at(q.t.rqHead)
}
