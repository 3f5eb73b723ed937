package rc

import (
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ntstatus"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

var debugRetry func(q *QP, psn rocev2.PSN, guarded bool)

// qpTransport is a QP's transport state, owned by its engine goroutine.
type qpTransport struct {
	connected bool
	failed    bool
	active    bool // on the engine's active list
	params    ConnParams
	hdr       rocev2.Headers // template: addresses, ports, DestQP
	l3        int
	pmtu      uint32
	ipID      uint16
	ackTO     int64 // ns; 0: no ACK timer

	// Requester. Send-ring indices: [sqHead, sqStart) have PSNs and are
	// unretired, [sqStart, tail) are posted but not started.
	sqHead, sqStart uint64
	txIdx           uint64 // WQE of the next packet to (re)send
	txPkt           uint32 // its packet index
	nextPSN         rocev2.PSN
	una             rocev2.PSN // oldest unacknowledged PSN
	readsOut        int        // started, uncompleted READs
	sinceAckReq     int
	retryLeft       int
	rnrLeft         int
	ackDeadline     int64
	rnrUntil        int64
	rnrPSN          rocev2.PSN
	retryGuard      bool // a go-back-N to retryPSN is under way
	retryPSN        rocev2.PSN

	// Responder.
	rqHead  uint64
	ePSN    rocev2.PSN
	msn     uint32
	nakSent bool // a sequence or RNR NAK was sent; drop until ePSN arrives
	inMsg   uint8
	recvOff uint32
	wbuf    []byte
	woff    uint32
	res     []readResource
	resNext int
	ctl     ctlKind
	// ackHold delays a plain ACK after a completed receive: the consumer
	// often answers at once, and the ACK then leaves in the same kick as
	// the answer instead of a kick of its own ahead of it.
	ackHold int64
	ctlPSN  rocev2.PSN
	ctlSyn  rocev2.Syndrome
}

// readResource is one responder resource (IRD entry): a READ being
// answered, kept so a duplicate READ can be answered again from memory, or
// an executed atomic, kept so a duplicate gets the saved original value
// (ROCEV2.md 2, "Duplicates").
type readResource struct {
	first rocev2.PSN
	npkts uint32
	start uint32 // packet the current response run starts at (its FIRST)
	next  uint32 // next packet to send; == npkts when done
	// again marks a run restarted by a duplicate READ: the requester may
	// already have everything, so a new READ may take the slot.
	again  bool
	va     uint64
	length uint32
	buf    []byte
	// atomic marks an executed CMP_SWAP or FETCH_ADD: its one "response"
	// is an ATOMIC_ACKNOWLEDGE carrying orig, the value before the
	// operation, which a duplicate gets again (never a second execution).
	atomic bool
	orig   uint64
}

func (r *readResource) sending() bool { return r.next < r.npkts }

// Message being received.
const (
	msgNone uint8 = iota
	msgSend
	msgWrite
)

// ctlKind is the responder's pending acknowledgement; a stronger one
// replaces a weaker one.
type ctlKind uint8

const (
	ctlNone ctlKind = iota
	ctlAck
	ctlNAK   // PSN sequence error or RNR: the PSN and syndrome are kept
	ctlFatal // a NAK after which the QP is in error
)

func (t *qpTransport) setup(p ConnParams) {
	t.params = p
	t.pmtu = uint32(p.PathMTU.Bytes())
	t.hdr = rocev2.Headers{
		Eth: rocev2.EthernetFields{Dst: p.Remote.MAC, Src: p.Local.MAC},
		IP:  rocev2.NewIPFields(p.Local.IP, p.Remote.IP),
		UDP: rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, p.Local.QPN, p.Remote.QPN)},
		BTH: rocev2.BTHFields{PKey: rocev2.DefaultPKey, DestQP: p.Remote.QPN},
	}
	t.l3 = t.hdr.L3Offset()
	t.ackTO = int64(p.AckTimeout)
	t.nextPSN = rocev2.PSN(p.Local.PSN & rocev2.PSNMask)
	t.una = t.nextPSN
	t.ePSN = rocev2.PSN(p.Remote.PSN & rocev2.PSNMask)
	t.retryLeft = p.RetryCount
	t.rnrLeft = p.RNRRetry
	t.res = make([]readResource, max(1, p.InboundReadLimit))
}

// npkts is how many PSNs a message of n bytes takes: at least one.
func (t *qpTransport) npkts(n uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + t.pmtu - 1) / t.pmtu
}

// request sends new and retransmitted request packets of q within the
// window, the read limits and the fences.
func (e *Engine) request(q *QP) (int, bool) {
	t := &q.t
	if t.rnrUntil != 0 {
		return 0, false // the RNR timer reschedules
	}
	tail := q.sq.tail.Load() // acquire: the posted WQEs are written
	sent := 0
	for sent < qpBudget {
		if t.txIdx == tail {
			break
		}
		w := q.sq.at(t.txIdx)
		if t.txIdx == t.sqStart {
			if w.flags&FlagReadFence != 0 && t.readsOut > 0 {
				break // READ_FENCE: wait for every earlier READ
			}
			if w.op.responded() && t.readsOut >= max(t.params.OutboundReadLimit, 1) {
				break
			}
			if t.una.Distance(t.nextPSN) >= e.window {
				break
			}
			w.firstPSN = t.nextPSN
			w.npkts = t.npkts(w.length)
			w.received = 0
			t.nextPSN = t.nextPSN.Add(w.npkts)
			t.sqStart++
			if w.op.responded() {
				t.readsOut++
			}
		}
		if t.una.Distance(w.firstPSN.Add(t.txPkt)) >= e.window {
			break
		}
		if e.sendRequest(q, w, t.txPkt) != nil {
			e.armAckTimer(t, sent)
			return sent, true
		}
		sent++
		if w.op.responded() || t.txPkt+1 >= w.npkts {
			t.txIdx++
			t.txPkt = 0
		} else {
			t.txPkt++
		}
	}
	e.armAckTimer(t, sent)
	return sent, sent == qpBudget
}

func (e *Engine) armAckTimer(t *qpTransport, sent int) {
	if sent > 0 && t.ackDeadline == 0 && t.ackTO > 0 {
		t.ackDeadline = e.now + t.ackTO
		e.setDeadline(t.ackDeadline)
	}
}

// sendRequest builds and queues packet k of w.
func (e *Engine) sendRequest(q *QP, w *sendWQE, k uint32) error {
	t := &q.t
	h := &t.hdr
	h.BTH.PSN = w.firstPSN.Add(k)
	h.BTH.SE = false
	h.BTH.AckReq = false
	var payload []byte
	if w.op.atomic() {
		// One packet, one PSN; AckReq because its ATOMIC_ACKNOWLEDGE is
		// the answer (IBTA 9.4.5).
		h.BTH.Opcode = rocev2.RCFetchAdd
		if w.op == OpCompareSwap {
			h.BTH.Opcode = rocev2.RCCompareSwap
		}
		h.AtomicETH = rocev2.AtomicETHFields{VA: w.remoteAddr, RKey: w.remoteToken, SwapAdd: w.swapAdd, Compare: w.compare}
		h.BTH.AckReq = true
	} else if w.op == OpRead {
		// A retried READ asks only for what has not arrived (rxe
		// req_retry: the RETH moves by the packets already received).
		off := k * t.pmtu
		h.BTH.Opcode = rocev2.RCReadRequest
		h.RETH = rocev2.RETHFields{VA: w.remoteAddr + uint64(off), RKey: w.remoteToken, DMALen: w.length - off}
		h.BTH.AckReq = true
	} else {
		off := k * t.pmtu
		n := min(t.pmtu, w.length-off)
		first, last := k == 0, k+1 >= w.npkts
		payload = e.span(&w.seg, w.nseg, off, n)
		h.BTH.Opcode = requestOpcode(w.op, first, last)
		if w.op == OpWrite && first {
			h.RETH = rocev2.RETHFields{VA: w.remoteAddr, RKey: w.remoteToken, DMALen: w.length}
		}
		if w.op == OpSendInvalidate && last {
			h.IETH = w.invToken
		}
		if last {
			// SE only on the last packet of a solicited SEND (ROCEV2.md 2).
			h.BTH.SE = w.op != OpWrite && w.flags&FlagSendAndSolicitEvent != 0
			h.BTH.AckReq = true
		} else if t.sinceAckReq+1 >= ackEvery {
			h.BTH.AckReq = true
		}
	}
	if err := e.emit(q, payload); err != nil {
		return err
	}
	if h.BTH.AckReq {
		t.sinceAckReq = 0
	} else {
		t.sinceAckReq++
	}
	return nil
}

func requestOpcode(op Op, first, last bool) rocev2.Opcode {
	switch op {
	case OpWrite:
		switch {
		case first && last:
			return rocev2.RCWriteOnly
		case first:
			return rocev2.RCWriteFirst
		case last:
			return rocev2.RCWriteLast
		}
		return rocev2.RCWriteMiddle
	case OpSendInvalidate:
		switch {
		case first && last:
			return rocev2.RCSendOnlyInvalidate
		case last:
			return rocev2.RCSendLastInvalidate
		}
	}
	switch {
	case first && last:
		return rocev2.RCSendOnly
	case first:
		return rocev2.RCSendFirst
	case last:
		return rocev2.RCSendLast
	}
	return rocev2.RCSendMiddle
}

// completer handles an ACK, NAK or READ response for q's requester.
func (e *Engine) completer(q *QP) {
	t := &q.t
	p := &e.pkt
	psn := p.BTH.PSN
	if t.sqHead == t.sqStart {
		e.c.stale.Add(1) // nothing outstanding: a duplicate or late ACK
		return
	}
	// Valid responses name a PSN in [una-1, nextPSN).
	if psn.Diff(t.una) < -1 || !psn.Less(t.nextPSN) {
		e.c.stale.Add(1)
		return
	}
	switch p.BTH.Opcode {
	case rocev2.RCAck:
		syn := p.AETH.Syndrome
		switch syn.Type() {
		case rocev2.AckTypeACK:
			e.ackThrough(q, psn, false)
		case rocev2.AckTypeRNRNAK:
			e.c.rnrReceived.Add(1)
			e.ackThrough(q, psn.Add(rocev2.PSNMask), false)
			e.rnrWait(q, psn, syn.RNRTimer())
		case rocev2.AckTypeNAK:
			e.c.naksReceived.Add(1)
			e.ackThrough(q, psn.Add(rocev2.PSNMask), false)
			if t.failed {
				return
			}
			switch syn.NAKCode() {
			case rocev2.NAKPSNSequenceError:
				// Resend from the oldest unacknowledged PSN: that is the
				// NAK's PSN unless a READ before it still lacks data.
				e.retry(q, t.una, true)
			case rocev2.NAKRemoteAccessError:
				e.failHead(q, psn, true)
			default: // invalid request, remote operational error
				e.failHead(q, psn, false)
			}
		default:
			e.c.stale.Add(1)
		}
	case rocev2.RCReadResponseFirst, rocev2.RCReadResponseMiddle, rocev2.RCReadResponseLast, rocev2.RCReadResponseOnly:
		e.readResponse(q, psn)
	case rocev2.RCAtomicAck:
		e.atomicAck(q, psn)
	default:
		e.c.stale.Add(1)
	}
}

// ackThrough retires every WQE whose packets all lie at or before psn.
// A READ (or atomic) is retired only by its responses: an ACK beyond a READ's first
// PSN that did not come with its data means the responses were lost, so
// the READ is asked again (rxe check_psn: COMPST_ERROR_RETRY). readPSN
// calls from a READ response pass inRead so the READ it belongs to is left
// alone.
func (e *Engine) ackThrough(q *QP, psn rocev2.PSN, inRead bool) {
	t := &q.t
	progress := false
	for t.sqHead < t.sqStart {
		w := q.sq.at(t.sqHead)
		if psn.Less(w.firstPSN) {
			break
		}
		last := w.firstPSN.Add(w.npkts - 1)
		if w.op.responded() {
			if !inRead {
				e.retry(q, t.una, true)
			}
			break
		}
		if psn.Less(last) {
			if t.una.Less(psn.Next()) {
				t.una = psn.Next()
				progress = true
			}
			break
		}
		t.una = last.Next()
		e.completeSend(q, w, ntstatus.Success, 0)
		progress = true
	}
	if progress {
		e.progress(q)
	}
}

// progress resets the retry budget and the ACK timer after new
// acknowledgements, and lets q send what the window held back.
func (e *Engine) progress(q *QP) {
	t := &q.t
	t.retryLeft = t.params.RetryCount
	t.rnrLeft = t.params.RNRRetry
	t.retryGuard = false
	if t.txIdx < t.sqHead {
		t.txIdx, t.txPkt = t.sqHead, 0
	}
	if t.txIdx == t.sqHead && t.sqHead < t.sqStart {
		// Do not resend what the ACK just covered.
		w := q.sq.at(t.sqHead)
		if d := w.firstPSN.Distance(t.una); d < w.npkts && d > t.txPkt && w.op != OpRead {
			t.txPkt = d
		}
	}
	if t.sqHead == t.sqStart {
		t.ackDeadline = 0
	} else if t.ackTO > 0 {
		t.ackDeadline = e.now + t.ackTO
		e.setDeadline(t.ackDeadline)
	}
	e.schedule(q)
}

// readResponse places one READ response packet.
func (e *Engine) readResponse(q *QP, psn rocev2.PSN) {
	t := &q.t
	// A READ response acknowledges every request before it (IBTA 9.7.5.1.2).
	e.ackThrough(q, psn.Add(rocev2.PSNMask), true)
	if t.failed || t.sqHead == t.sqStart {
		return
	}
	w := q.sq.at(t.sqHead)
	if w.op != OpRead || psn.Less(w.firstPSN) || w.firstPSN.Distance(psn) >= w.npkts {
		e.c.stale.Add(1)
		return
	}
	if psn != t.una {
		if t.una.Less(psn) {
			e.retry(q, t.una, true) // a response was lost: ask again from it
		}
		e.c.stale.Add(1)
		return
	}
	k := w.firstPSN.Distance(psn)
	off := k * t.pmtu
	data := e.pkt.Payload
	last := k+1 == w.npkts
	if (last && off+uint32(len(data)) != w.length) || (!last && uint32(len(data)) != t.pmtu) ||
		!scatter(&w.seg, w.nseg, off, data) {
		// The responder answered with the wrong length: a protocol
		// violation, as rxe treats it (COMPST_ERROR, IB_WC_LOC_LEN_ERR).
		e.fail(q, ntstatus.DataOverrun, wcLocLenErr)
		return
	}
	w.received = off + uint32(len(data))
	t.una = psn.Next()
	if last {
		e.completeSend(q, w, ntstatus.Success, 0)
	}
	e.progress(q)
}

// retry starts go-back-N from psn. guarded retries (a gap seen in
// responses, a sequence NAK) happen once per PSN until progress; the ACK
// timer always retries. Each retry spends one of RetryCount.
func (e *Engine) retry(q *QP, psn rocev2.PSN, guarded bool) {
	t := &q.t
	if t.failed || t.sqHead == t.sqStart {
		t.ackDeadline = 0
		return
	}
	if guarded && t.retryGuard && t.retryPSN == psn {
		return
	}
	if t.retryLeft <= 0 {
		e.fail(q, ntstatus.IOTimeout, wcRetryExcErr)
		return
	}
	t.retryLeft--
	if debugRetry != nil {
		debugRetry(q, psn, guarded)
	}
	t.retryGuard, t.retryPSN = true, psn
	e.c.retransmits.Add(1)
	e.goBack(q, psn)
	if t.ackTO > 0 {
		t.ackDeadline = e.now + t.ackTO
		e.setDeadline(t.ackDeadline)
	}
}

// rnrWait holds q's requester for the RNR timer, then resends from psn.
func (e *Engine) rnrWait(q *QP, psn rocev2.PSN, timer rocev2.RNRTimer) {
	t := &q.t
	if t.failed || t.sqHead == t.sqStart {
		return
	}
	if t.rnrUntil != 0 && t.rnrPSN == psn {
		return // a duplicate of the NAK we are waiting out
	}
	if t.rnrLeft <= 0 {
		e.fail(q, ntstatus.IOTimeout, wcRNRRetryExcErr)
		return
	}
	if t.params.RNRRetry != 7 { // 7 means infinite (IBTA 9.7.5.2.8)
		t.rnrLeft--
	}
	t.rnrPSN = psn
	t.rnrUntil = e.now + int64(max(timer.Duration(), time.Microsecond))
	e.setDeadline(t.rnrUntil)
	t.ackDeadline = 0
	e.goBack(q, psn)
}

// goBack points the transmit cursor at the packet with PSN psn.
func (e *Engine) goBack(q *QP, psn rocev2.PSN) {
	t := &q.t
	for i := t.sqHead; i < t.sqStart; i++ {
		w := q.sq.at(i)
		if d := w.firstPSN.Distance(psn); d < w.npkts {
			t.txIdx, t.txPkt = i, d
			e.schedule(q)
			return
		}
	}
	t.txIdx, t.txPkt = t.sqStart, 0
	e.schedule(q)
}

// failHead completes the request a fatal NAK names with the error it maps
// to, then fails the QP. Remote access errors are STATUS_ACCESS_VIOLATION
// (ND2: bad MR or token), except on a READ, where NdkRead names
// STATUS_REMOTE_RESOURCES for reading beyond the remote region; other
// fatal NAKs are STATUS_REMOTE_RESOURCES (NDKPI.md §9).
func (e *Engine) failHead(q *QP, psn rocev2.PSN, access bool) {
	t := &q.t
	if t.sqHead == t.sqStart {
		return
	}
	w := q.sq.at(t.sqHead)
	switch {
	case access && w.op != OpRead:
		e.fail(q, ntstatus.AccessViolation, wcRemAccessErr)
	case access:
		e.fail(q, ntstatus.RemoteResources, wcRemAccessErr)
	default:
		e.fail(q, ntstatus.RemoteResources, wcRemInvReqErr)
	}
}

// fail completes the oldest outstanding request with status and moves the
// QP to the error state.
func (e *Engine) fail(q *QP, status, code uint32) {
	t := &q.t
	if t.sqHead < q.sq.tail.Load() {
		e.completeSend(q, q.sq.at(t.sqHead), status, code)
	}
	e.enterError(q)
}

// enterError moves q to the error state: every pending request completes
// with STATUS_CANCELLED, now and as it is posted later (ND2 IND2QueuePair:
// after the first error completion the connection is dead).
func (e *Engine) enterError(q *QP) {
	e.stopQP(q)
	t := &q.t
	for i := range t.res {
		t.res[i] = readResource{}
	}
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
}

// cancelAll completes every queued request of a failed QP with
// STATUS_CANCELLED.
func (e *Engine) cancelAll(q *QP) {
	t := &q.t
	for tail := q.sq.tail.Load(); t.sqHead < tail; {
		e.completeSend(q, q.sq.at(t.sqHead), ntstatus.Cancelled, wcWRFlushErr)
	}
	t.sqStart, t.txIdx, t.txPkt = t.sqHead, t.sqHead, 0
	t.una = t.nextPSN
	for tail := q.rq.tail.Load(); t.rqHead < tail; {
		e.completeRecv(q, ntstatus.Cancelled, wcWRFlushErr, 0, typeReceive, 0, false)
	}
	t.inMsg = msgNone
}

// completeSend retires the oldest send WQE, pushing its completion unless
// it succeeded silently (SILENT_SUCCESS: the WQE still retires in order).
// The slot is freed before the completion is pushed, so a consumer that
// sees the completion finds room for a new post.
func (e *Engine) completeSend(q *QP, w *sendWQE, status, code uint32) {
	t := &q.t
	signal := status != ntstatus.Success || w.flags&FlagSilentSuccess == 0
	if signal {
		typ := uint32(typeSend)
		switch w.op {
		case OpWrite:
			typ = typeWrite
		case OpRead:
			typ = typeRead
		case OpCompareSwap:
			typ = typeCompareSwap
		case OpFetchAdd:
			typ = typeFetchAdd
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
		e.c.completions.Add(1)
	}
}

// completeRecv retires the oldest receive WQE with a completion, freeing
// the slot first (see completeSend).
func (e *Engine) completeRecv(q *QP, status, code, n, typ uint32, token uint32, solicited bool) {
	t := &q.t
	w := q.rq.at(t.rqHead)
	e.entry = cq.Entry{
		Status:                       status,
		BytesTransferred:             n,
		Type:                         typ,
		ProviderErrorCode:            code,
		TypeSpecificCompletionOutput: uint64(token),
		QPContext:                    q.cfg.Context,
		RequestContext:               w.ctx,
		Solicited:                    solicited,
	}
	w.ctx = nil
	clear(w.seg[:w.nseg])
	t.rqHead++
	q.rq.retire(t.rqHead)
	q.cfg.RecvCQ.Push(&e.entry)
	e.entry = cq.Entry{}
	e.c.completions.Add(1)
}
