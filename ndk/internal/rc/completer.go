package rc

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The completer (rxe_comp.c) takes the answers to q's requests (ACK, NAK,
// RNR NAK, READ responses, ATOMIC_ACKNOWLEDGE), retires WQEs in order
// through completeSend, and restarts the requester: go-back-N after a
// sequence NAK, a gap in the responses or the ACK timer, a wait after an
// RNR NAK.

// completer handles an ACK, NAK, READ response or ATOMIC_ACKNOWLEDGE for
// q's requester.
func (e *Engine) completer(q *QP) {
	t := &q.t
	p := &e.pkt
	psn := p.BTH.PSN
	if t.sqHead == t.sqStart {
		atomic.AddUint64(&e.c.Stale, 1) // nothing outstanding: a duplicate or late ACK
		return
	}
	// Valid responses name a PSN in [una-1, nextPSN).
	if psn.Diff(t.una) < -1 || !psn.Less(t.nextPSN) {
		atomic.AddUint64(&e.c.Stale, 1)
		return
	}
	if !validSyndrome(p.BTH.Opcode, p.AETH.Syndrome) {
		// A syndrome IBTA reserves (9.7.5.1): nothing in the packet can be
		// trusted, and waiting would only let the request time out, so it
		// fails at once (rxe check_ack: COMPST_ERROR).
		atomic.AddUint64(&e.c.BadSyndromes, 1)
		e.fail(q, ndkpi.StatusRemoteResources, wcBadRespErr)
		return
	}
	switch p.BTH.Opcode {
	case rocev2.RCAck:
		syn := p.AETH.Syndrome
		switch syn.Type() {
		case rocev2.AckTypeACK:
			e.ackThrough(q, psn, false)
		case rocev2.AckTypeRNRNAK:
			atomic.AddUint64(&e.c.RNRReceived, 1)
			t.n.RNRReceived++
			e.ackThrough(q, psn.Add(rocev2.PSNMask), false)
			e.rnrWait(q, psn, syn.RNRTimer())
		case rocev2.AckTypeNAK:
			atomic.AddUint64(&e.c.NAKsReceived, 1)
			t.n.NAKsReceived++
			e.ackThrough(q, psn.Add(rocev2.PSNMask), false)
			if t.failed {
				return
			}
			switch syn.NAKCode() {
			case rocev2.NAKPSNSequenceError:
				atomic.AddUint64(&e.c.SequenceErrors, 1)
				// Resend from the oldest unacknowledged PSN: that is the
				// NAK's PSN unless a READ before it still lacks data.
				e.retry(q, t.una, true)
			case rocev2.NAKRemoteAccessError:
				atomic.AddUint64(&e.c.RemoteAccessErrors, 1)
				e.failHead(q, wcRemAccessErr)
			case rocev2.NAKInvalidRequest:
				e.failHead(q, wcRemInvReqErr)
			default: // remote operational error, and reserved codes as rxe
				e.failHead(q, wcRemOpErr)
			}
		}
	case rocev2.RCReadResponseFirst, rocev2.RCReadResponseMiddle, rocev2.RCReadResponseLast, rocev2.RCReadResponseOnly:
		e.readResponse(q, psn)
	case rocev2.RCAtomicAck:
		e.atomicAck(q, psn)
	default:
		atomic.AddUint64(&e.c.Stale, 1)
	}
}

// validSyndrome reports whether syn is a syndrome IBTA defines for a
// response with opcode op (9.7.5.1, table 44): bit 7 clear, and on a READ
// response or ATOMIC_ACKNOWLEDGE an ACK (rxe check_ack), on an
// ACKNOWLEDGE any type but the reserved one (type 2). Reserved NAK codes
// are left to the NAK handling, which fails the request as rxe does.
func validSyndrome(op rocev2.Opcode, syn rocev2.Syndrome) bool {
	if op.Info().Headers&rocev2.HasAETH == 0 {
		return true
	}
	if syn&0x80 != 0 {
		return false
	}
	if op == rocev2.RCAck {
		return syn.Type() != rocev2.AckTypeReserved
	}
	return syn.Type() == rocev2.AckTypeACK
}

// ackThrough retires every WQE whose packets all lie at or before psn.
// A READ or atomic is retired only by its response: an ACK beyond its
// first PSN that did not come with its data means the responses were
// lost, so it is asked again (rxe check_psn: COMPST_ERROR_RETRY).
// readResponse and atomicAck pass inRead so the request they answer is
// left alone.
func (e *Engine) ackThrough(q *QP, psn rocev2.PSN, inRead bool) {
	t := &q.t
	progress := false
	for t.sqHead < t.sqStart {
		w := q.sq.at(t.sqHead)
		if w.op.local() {
			if !e.retireLocal(q) {
				return
			}
			continue
		}
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
		e.completeSend(q, w, ndkpi.StatusSuccess, 0)
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
	if t.cwnd != 0 {
		e.openWindow(q)
	}
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
		e.setTimer(q, t.ackDeadline)
		if q.sq.at(t.sqHead).op == OpRead {
			e.armReask(q)
		}
	}
	e.schedule(q)
}

// cutWindow halves the request packets q keeps in flight after a loss
// (retry), as TCP's congestion window does: a go-back-N resends all of
// them, and with the whole window in flight behind a full queue each
// loss resent hundreds of frames into it and lost more (test/congestion,
// DCQCN off: more bytes resent than delivered). READ requests are not
// held: a READ's responses are the responder's to pace.
func (e *Engine) cutWindow(q *QP) {
	t := &q.t
	w := t.cwnd
	if w == 0 {
		w = e.window
	}
	t.cwnd = max(min(w, t.una.Distance(t.nextPSN))/2, minCwnd)
	t.cwndAcc, t.cwndUna = 0, t.una
}

// openWindow widens a cut window by one packet per window of packets
// acknowledged (TCP's congestion avoidance), and lifts it at the window.
func (e *Engine) openWindow(q *QP) {
	t := &q.t
	t.cwndAcc += t.cwndUna.Distance(t.una)
	t.cwndUna = t.una
	for t.cwndAcc >= t.cwnd {
		t.cwndAcc -= t.cwnd
		t.cwnd++
	}
	if t.cwnd >= e.window {
		t.cwnd = 0
	}
}

// minCwnd is the least a loss cuts the window to, in packets.
const minCwnd = 8

// armReask starts the wait after which a READ at the head whose responses
// stopped coming from una is asked again (reask).
func (e *Engine) armReask(q *QP) {
	t := &q.t
	t.rearmAt, t.rearmPSN = e.now+e.rearm(q), t.una
	e.setTimer(q, t.rearmAt)
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
		atomic.AddUint64(&e.c.Stale, 1)
		return
	}
	if psn != t.una {
		if t.una.Less(psn) {
			e.retry(q, t.una, true) // a response was lost: ask again from it
		}
		atomic.AddUint64(&e.c.Stale, 1)
		return
	}
	k := w.firstPSN.Distance(psn)
	off := k * t.pmtu
	data := e.pkt.Payload
	last := k+1 == w.npkts
	if (last && off+uint32(len(data)) != w.length) || (!last && uint32(len(data)) != t.pmtu) ||
		!scatter(w.seg, w.nseg, off, data) {
		// The responder answered with the wrong length: a protocol
		// violation, as rxe treats it (COMPST_ERROR, IB_WC_LOC_LEN_ERR).
		e.fail(q, ndkpi.StatusDataOverrun, wcLocLenErr)
		return
	}
	w.received = off + uint32(len(data))
	t.una = psn.Next()
	if last {
		if w.flags&ndkpi.OpFlagRDMAReadLocalInvalidate != 0 && !e.readLocalInvalidate(q, w) {
			return
		}
		e.completeSend(q, w, ndkpi.StatusSuccess, 0)
	}
	e.progress(q)
}

// atomicAck completes the atomic at the head of q's send queue with the
// original value an ATOMIC_ACKNOWLEDGE carries; like a READ response it
// acknowledges every request before it (IBTA 9.7.5.1.2).
func (e *Engine) atomicAck(q *QP, psn rocev2.PSN) {
	t := &q.t
	e.ackThrough(q, psn.Add(rocev2.PSNMask), true)
	if t.failed || t.sqHead == t.sqStart {
		return
	}
	w := q.sq.at(t.sqHead)
	if !w.op.atomic() || w.firstPSN != psn {
		if w.op.responded() && w.firstPSN.Less(psn) {
			e.retry(q, t.una, true) // the head's responses were lost
		}
		atomic.AddUint64(&e.c.Stale, 1)
		return
	}
	// The 8 bytes land in host order, as verbs delivers the original value
	// (rxe_comp.c do_atomic).
	binary.NativeEndian.PutUint64(e.tbuf[:], e.pkt.AtomicAckETH.OrigData)
	if !scatter(w.seg, w.nseg, 0, e.tbuf[:8]) {
		e.fail(q, ndkpi.StatusDataOverrun, wcLocLenErr)
		return
	}
	t.una = psn.Next()
	e.completeSend(q, w, ndkpi.StatusSuccess, 0)
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
		atomic.AddUint64(&e.c.RetryExceeded, 1)
		e.fail(q, ndkpi.StatusIOTimeout, wcRetryExcErr)
		return
	}
	t.retryLeft--
	t.retryGuard, t.retryPSN = true, psn
	if w := q.sq.at(t.sqHead); w.op == OpRead {
		e.armReask(q)
	}
	atomic.AddUint64(&e.c.Retransmits, 1)
	t.n.Retransmits++
	e.overrun(q, 0)
	e.cutWindow(q)
	e.goBack(q, psn)
	if t.ackTO > 0 {
		t.ackDeadline = e.now + t.ackTO
		e.setTimer(q, t.ackDeadline)
	}
}

// rearm is how long a READ's go-back waits for its gap to close before
// it asks again: an eighth of the ACK timeout, at least retryRearm.
func (e *Engine) rearm(q *QP) int64 { return max(q.t.ackTO/8, retryRearm) }

// reask asks again for a READ's responses from una when none came for
// rearm since they were asked for or last arrived: the request or its
// answers were lost (behind the frames of the overrun that caused it, or
// at the tail of a READ, where no later response shows the gap). It
// spends no retry: the ACK timer, which only progress moves, still bounds
// a peer that never answers; until it expires the READ is asked again
// every rearm, not once an ACK timeout (67ms at rxe's default, where a
// loss at a READ's tail cost more than the overrun).
func (e *Engine) reask(q *QP) {
	t := &q.t
	if t.failed || t.sqHead == t.sqStart || q.sq.at(t.sqHead).op != OpRead {
		return
	}
	if t.una != t.rearmPSN {
		e.armReask(q) // progress came without passing through progress()
		return
	}
	atomic.AddUint64(&e.c.Retransmits, 1)
	t.n.Retransmits++
	e.goBack(q, t.una)
	e.armReask(q)
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
		atomic.AddUint64(&e.c.RNRRetryExceeded, 1)
		e.fail(q, ndkpi.StatusIOTimeout, wcRNRRetryExcErr)
		return
	}
	if t.params.RNRRetry != 7 { // 7 means infinite (IBTA 9.7.5.2.8)
		t.rnrLeft--
	}
	t.rnrPSN = psn
	t.rnrUntil = e.now + int64(max(timer.Duration(), time.Microsecond))
	e.setTimer(q, t.rnrUntil)
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
