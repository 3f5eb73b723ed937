package rc

import (
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The responder (rxe_resp.c) executes requests in PSN order (SEND, WRITE,
// READ, CMP_SWAP, FETCH_ADD), keeps a responder resource per READ and
// atomic so that a duplicate is answered again and never executed twice,
// and sends the READ responses, ATOMIC_ACKNOWLEDGEs and its ACK or NAK
// (respond).

// responder executes one request packet for q (ROCEV2.md 2, rxe_resp.c).
func (e *Engine) responder(q *QP) {
	t := &q.t
	p := &e.pkt
	op := p.BTH.Opcode
	psn := p.BTH.PSN
	switch d := psn.Diff(t.ePSN); {
	case d > 0:
		// Ahead: one NAK with the expected PSN, then silence until it
		// arrives (rxe sent_psn_nak).
		atomic.AddUint64(&e.c.OutOfSeq, 1)
		t.n.OutOfSeq++
		if !t.nakSent {
			t.nakSent = true
			atomic.AddUint64(&e.c.NAKsSent, 1)
			t.n.NAKsSent++
			e.setCtl(q, ctlNAK, t.ePSN, rocev2.NAKSyndrome(rocev2.NAKPSNSequenceError))
		}
		return
	case d < 0:
		atomic.AddUint64(&e.c.Duplicates, 1)
		t.n.Duplicates++
		if op == rocev2.RCReadRequest {
			e.duplicateRead(q, psn)
			return
		}
		if op == rocev2.RCCompareSwap || op == rocev2.RCFetchAdd {
			e.duplicateAtomic(q, psn)
			return
		}
		if (op == rocev2.RCWriteFirst || op == rocev2.RCWriteOnly || op == rocev2.RCWriteOnlyImm) && !e.recheckWrite(q) {
			atomic.AddUint64(&e.c.Stale, 1) // dropped: neither an ACK nor a NAK
			return
		}
		// C9-105: never execute twice; acknowledge again with ePSN-1.
		e.setCtl(q, ctlAck, 0, 0)
		return
	}
	t.nakSent = false
	if t.ctl == ctlNAK {
		t.ctl = ctlNone // the awaited packet arrived: the NAK is moot
	}
	pos := op.Info().Position
	switch op {
	case rocev2.RCSendFirst, rocev2.RCSendMiddle, rocev2.RCSendLast, rocev2.RCSendOnly,
		rocev2.RCSendLastImm, rocev2.RCSendOnlyImm, rocev2.RCSendLastInvalidate, rocev2.RCSendOnlyInvalidate:
		e.recvSend(q, op, pos)
	case rocev2.RCWriteFirst, rocev2.RCWriteMiddle, rocev2.RCWriteLast, rocev2.RCWriteOnly,
		rocev2.RCWriteLastImm, rocev2.RCWriteOnlyImm:
		e.recvWrite(q, op, pos)
	case rocev2.RCReadRequest:
		e.recvRead(q)
	case rocev2.RCCompareSwap, rocev2.RCFetchAdd:
		e.recvAtomic(q, op)
	default:
		// FLUSH and ATOMIC_WRITE are not offered.
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
	}
}

// inSequence checks the opcode sequence: a FIRST or ONLY starts a message
// only between messages; MIDDLE and LAST continue one of their kind.
func (t *qpTransport) inSequence(kind uint8, pos rocev2.Position) bool {
	if pos&rocev2.PosFirst != 0 {
		return t.inMsg == msgNone
	}
	return t.inMsg == kind
}

// fullPacket checks a request packet's payload against the path MTU
// (ROCEV2.md 1.6; rxe check_length): a FIRST or MIDDLE carries exactly
// one, a LAST 1 to PMTU bytes, an ONLY at most one.
func (t *qpTransport) fullPacket(pos rocev2.Position, n int) bool {
	switch {
	case pos&rocev2.PosLast == 0:
		return uint32(n) == t.pmtu
	case pos&rocev2.PosFirst == 0:
		return n > 0 && uint32(n) <= t.pmtu
	}
	return uint32(n) <= t.pmtu
}

func (e *Engine) recvSend(q *QP, op rocev2.Opcode, pos rocev2.Position) {
	t := &q.t
	p := &e.pkt
	psn := p.BTH.PSN
	if !t.inSequence(msgSend, pos) || !t.fullPacket(pos, len(p.Payload)) {
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
		return
	}
	if pos&rocev2.PosFirst != 0 {
		if !e.takeReceive(q, psn) {
			return
		}
		t.recvOff = 0
	}
	w := e.recvHead(q)
	if !scatter(w.seg, w.nseg, t.recvOff, p.Payload) {
		// The message does not fit the receive buffer: the receive
		// fails (IB_WC_LOC_LEN_ERR) and the requester gets an invalid
		// request NAK (rxe RESPST_ERR_LENGTH).
		e.completeRecv(q, ndkpi.StatusBufferOverflow, wcLocLenErr, t.recvOff, ndkpi.OpReceive, 0, false, noImm)
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
		return
	}
	t.recvOff += uint32(len(p.Payload))
	t.ePSN = t.ePSN.Next()
	if pos&rocev2.PosLast == 0 {
		t.inMsg = msgSend
	} else {
		t.inMsg = msgNone
		t.msn = (t.msn + 1) & rocev2.PSNMask
		typ, token := ndkpi.OpReceive, uint32(0)
		if op == rocev2.RCSendLastInvalidate || op == rocev2.RCSendOnlyInvalidate {
			token = p.IETH
			typ = ndkpi.OpReceiveAndInvalidate
			if f := e.regions.Invalidate(q.cfg.PD, token); f != memreg.OK {
				// An invalid token aborts the connection (seed 000/004;
				// rxe RESPST_ERR_INVALIDATE_RKEY, class J).
				e.completeRecv(q, ndkpi.StatusAccessViolation, wcRemInvReqErr, t.recvOff, typ, token, false, noImm)
				e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
				e.accessViolation() // a wrong token guessed by invalidation
				return
			}
		}
		imm := noImm
		if op == rocev2.RCSendLastImm || op == rocev2.RCSendOnlyImm {
			imm = immediate{p.ImmDt, true}
		}
		e.completeRecv(q, ndkpi.StatusSuccess, 0, t.recvOff, typ, token, p.BTH.SE, imm)
		e.holdAck(q)
	}
	if p.BTH.AckReq {
		e.setCtl(q, ctlAck, 0, 0)
	}
}

// holdAck holds the ACK that a completed message asked for a moment (see
// ackHoldTime): the consumer's answer to it may come soon and carry it.
func (e *Engine) holdAck(q *QP) {
	t := &q.t
	if e.pkt.BTH.AckReq && t.ctl == ctlNone {
		t.ackHold = e.now + ackHoldTime
		e.setTimer(q, t.ackHold)
	}
}

// takeReceive finds the receive that the message at psn consumes: the
// head of q's receive queue, or one taken from its SRQ. With none posted
// it answers an RNR NAK and reports false; what follows is dropped until
// the requester comes back to psn (rxe check_resource,
// RESPST_ERR_RNR).
func (e *Engine) takeReceive(q *QP, psn rocev2.PSN) bool {
	t := &q.t
	if !e.haveReceive(q) {
		t.nakSent = true
		atomic.AddUint64(&e.c.RNRSent, 1)
		t.n.RNRSent++
		e.setCtl(q, ctlNAK, psn, rocev2.RNRNAKSyndrome(t.params.MinRNRTimer))
		return false
	}
	return true
}

// haveReceive reports whether a receive is there for the message that
// needs one: the head of q's receive queue, or one a QP on an SRQ takes
// now (and keeps for its next message if this one ends without it).
func (e *Engine) haveReceive(q *QP) bool {
	t := &q.t
	if q.cfg.SRQ != nil {
		t.hasCur = t.hasCur || q.cfg.SRQ.take(&t.cur)
		return t.hasCur
	}
	return t.rqHead != q.rq.tail.Load()
}

// recvWrite places one RDMA WRITE packet. The last packet of a WRITE with
// immediate (WRITE_LAST_WITH_IMMEDIATE, WRITE_ONLY_WITH_IMMEDIATE) also
// consumes a receive, as a SEND does: with none posted it is RNR NAKed
// before its bytes are placed, and the requester resends it (rxe marks
// those two opcodes RXE_RWR_MASK). The receive completes with the
// immediate and the WRITE's length (the RETH's DMA length), as rxe's
// do_complete reports IB_WC_RECV_RDMA_WITH_IMM; its buffer is untouched.
func (e *Engine) recvWrite(q *QP, op rocev2.Opcode, pos rocev2.Position) {
	t := &q.t
	p := &e.pkt
	psn := p.BTH.PSN
	if !t.inSequence(msgWrite, pos) || !t.fullPacket(pos, len(p.Payload)) {
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
		return
	}
	withImm := op == rocev2.RCWriteLastImm || op == rocev2.RCWriteOnlyImm
	if withImm && !e.takeReceive(q, psn) {
		return // before the key, as rxe checks its resources first
	}
	if pos&rocev2.PosFirst != 0 {
		r := &p.RETH
		t.wbuf, t.woff = nil, 0
		if r.DMALen > 0 { // a zero-length WRITE checks no key (IBTA 9.4.3)
			b, f := e.regions.CheckRemoteOn(q.cfg.PD, q.cfg.QPN, r.RKey, r.VA, r.DMALen, memreg.AccessRemoteWrite)
			if f != memreg.OK {
				if withImm {
					// WRITE_ONLY_WITH_IMMEDIATE took its receive before its
					// key (above): the receive completes with the error, the
					// rest are flushed (rxe: class C, do_complete with
					// IB_WC_REM_ACCESS_ERR).
					e.completeRecv(q, ndkpi.StatusAccessViolation, wcRemAccessErr, 0, ndkpi.OpReceiveWriteWithImmediate, 0, false, noImm)
				}
				e.fatalNAK(q, psn, rocev2.NAKRemoteAccessError)
				return
			}
			t.wbuf = b
		}
	}
	if !e.placeWrite(q, pos) {
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest) // length differs from the RETH
		return
	}
	t.ePSN = t.ePSN.Next()
	if pos&rocev2.PosLast == 0 {
		t.inMsg = msgWrite
	} else {
		t.inMsg = msgNone
		length := uint32(len(t.wbuf))
		t.wbuf = nil
		t.msn = (t.msn + 1) & rocev2.PSNMask
		if withImm {
			e.completeRecv(q, ndkpi.StatusSuccess, 0, length, ndkpi.OpReceiveWriteWithImmediate, 0, p.BTH.SE, immediate{p.ImmDt, true})
			e.holdAck(q)
		}
	}
	if p.BTH.AckReq {
		e.setCtl(q, ctlAck, 0, 0)
	}
}

// placeWrite copies the WRITE packet in e.pkt (at pos in its message)
// into the target its FIRST checked, unless the lengths disagree with the
// RETH's, and publishes the bytes (PlacedWrites).
func (e *Engine) placeWrite(q *QP, pos rocev2.Position) bool {
	t := &q.t
	payload := e.pkt.Payload
	n := uint32(len(payload))
	if uint64(t.woff)+uint64(n) > uint64(len(t.wbuf)) ||
		(pos&rocev2.PosLast != 0 && t.woff+n != uint32(len(t.wbuf))) {
		return false
	}
	copy(t.wbuf[t.woff:], payload)
	e.c.writesPlaced.Add(1)
	if q.writeArm.Load() != nil {
		wakeArmed(&q.writeArm)
	}
	t.woff += n
	return true
}

func (e *Engine) recvRead(q *QP) {
	t := &q.t
	p := &e.pkt
	psn := p.BTH.PSN
	if t.inMsg != msgNone {
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
		return
	}
	r := &p.RETH
	slot := &t.res[t.resNext]
	if slot.sending() && !slot.again {
		// More READs in flight than the responder resources we granted
		// (InboundReadLimit); a run restarted by a duplicate may be
		// overtaken, as rxe reuses its oldest resource.
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
		return
	}
	var b []byte
	if r.DMALen > 0 {
		var f memreg.Fault
		b, f = e.regions.CheckRemoteOn(q.cfg.PD, q.cfg.QPN, r.RKey, r.VA, r.DMALen, memreg.AccessRemoteRead)
		if f != memreg.OK {
			e.fatalNAK(q, psn, rocev2.NAKRemoteAccessError)
			return
		}
	}
	n := t.npkts(r.DMALen)
	*slot = readResource{first: psn, npkts: n, va: r.VA, length: r.DMALen, buf: b, rkey: r.RKey, stop: n, end: r.DMALen}
	t.resNext = (t.resNext + 1) % len(t.res)
	t.ePSN = t.ePSN.Add(n)
	t.msn = (t.msn + 1) & rocev2.PSNMask
	e.schedule(q)
}

// recvAtomic executes a CMP_SWAP or FETCH_ADD at ePSN (IBTA 9.4.5, rxe
// rxe_resp.c atomic_reply): the rkey must name 8 bytes with the remote
// atomic right (else a remote access error NAK), the address must be
// 8-byte aligned (else an invalid request NAK, rxe
// RESPST_ERR_MISALIGNED_ATOMIC), and the original value is kept in a
// responder resource, so a duplicate is answered from it and the
// operation never runs twice.
//
// The operation is a sync/atomic instruction on the registered memory, so
// it is atomic against atomics from other QPs, other engines (queues) and
// local Go code using sync/atomic on the same word, not only within this
// engine (IBTA's IB_ATOMIC_HCA level; verbs' IB_ATOMIC_GLOB is the same on
// a CPU-coherent host). The value is in host byte order, as rxe operates on
// the u64 in memory.
func (e *Engine) recvAtomic(q *QP, op rocev2.Opcode) {
	t := &q.t
	p := &e.pkt
	psn := p.BTH.PSN
	if t.inMsg != msgNone {
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
		return
	}
	slot := &t.res[t.resNext]
	if slot.sending() && !slot.again {
		// More READs and atomics outstanding than our responder
		// resources (ROCEV2.md 2, "Outstanding READ/atomic").
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
		return
	}
	a := &p.AtomicETH
	b, f := e.regions.CheckRemoteOn(q.cfg.PD, q.cfg.QPN, a.RKey, a.VA, 8, memreg.AccessRemoteAtomic)
	if f != memreg.OK {
		e.fatalNAK(q, psn, rocev2.NAKRemoteAccessError)
		return
	}
	word := alignedWord(b)
	if a.VA&7 != 0 || word == nil {
		e.fatalNAK(q, psn, rocev2.NAKInvalidRequest)
		return
	}
	var orig uint64
	if op == rocev2.RCCompareSwap {
		orig = compareAndSwap(word, a.Compare, a.SwapAdd)
	} else {
		orig = atomic.AddUint64(word, a.SwapAdd) - a.SwapAdd
	}
	atomic.AddUint64(&e.c.Atomics, 1)
	*slot = readResource{first: psn, npkts: 1, va: a.VA, length: 8, rkey: a.RKey, atomic: true, orig: orig, stop: 1}
	t.resNext = (t.resNext + 1) % len(t.res)
	t.ePSN = t.ePSN.Next()
	t.msn = (t.msn + 1) & rocev2.PSNMask
	e.schedule(q)
}

// compareAndSwap stores swap at w if it holds compare and returns what it
// held before, in one atomic step.
func compareAndSwap(w *uint64, compare, swap uint64) uint64 {
	for {
		old := atomic.LoadUint64(w)
		if old != compare || atomic.CompareAndSwapUint64(w, old, swap) {
			return old
		}
	}
}

// A duplicate is answered only as the request would be if it came now: its
// own R_Key must be the one the original was granted with and must still
// allow its range and right in the token table as it is now (rxe
// rxe_recheck_mr), else a remote access NAK, as a fresh request would get.
// A saved request proves only that the memory was readable then: a
// duplicate carrying another key, or arriving after the region or window
// was invalidated, deregistered or rebound, reads nothing.

// recheckWrite re-validates a duplicate WRITE_FIRST or WRITE_ONLY, which is
// acknowledged again but never executed: an acknowledgement would tell a
// forger that its key works. One that fails is dropped, not NAKed: a
// requester whose WRITE's ACK was lost retransmits it after the region
// may have been invalidated (a WRITE then a SEND with invalidate of its
// region, as NFS/RDMA and iSER do), and the ACK of what follows it, which
// acknowledges everything before, completes it; rxe acknowledges every
// duplicate WRITE (C9-105) and a NAK would end that connection.
func (e *Engine) recheckWrite(q *QP) bool {
	r := &e.pkt.RETH
	if r.DMALen == 0 { // a zero-length WRITE checks no key (IBTA 9.4.3)
		return true
	}
	_, f := e.regions.CheckRemoteOn(q.cfg.PD, q.cfg.QPN, r.RKey, r.VA, r.DMALen, memreg.AccessRemoteWrite)
	return f == memreg.OK
}

// duplicateRead answers a repeated READ again from the responder resource
// whose PSN range covers it, starting at the repeated PSN, with the length
// the duplicate asks for, once re-validated (above); one that matches
// none, or asks for more than the original, is dropped (ROCEV2.md 2,
// "Duplicates").
func (e *Engine) duplicateRead(q *QP, psn rocev2.PSN) {
	t := &q.t
	r := &e.pkt.RETH
	for i := range t.res {
		s := &t.res[i]
		if s.npkts == 0 || s.atomic {
			continue
		}
		k := s.first.Distance(psn)
		if k >= s.npkts {
			continue
		}
		off := k * t.pmtu
		if r.VA != s.va+uint64(off) || r.DMALen > s.length-off {
			break
		}
		var b []byte
		if r.DMALen > 0 {
			var f memreg.Fault
			b, f = e.regions.CheckRemoteOn(q.cfg.PD, q.cfg.QPN, r.RKey, r.VA, r.DMALen, memreg.AccessRemoteRead)
			if f != memreg.OK || r.RKey != s.rkey {
				e.fatalNAK(q, psn, rocev2.NAKRemoteAccessError)
				return
			}
		}
		// The run reads the memory the re-check returned, not the
		// original's: the table may map the key elsewhere now.
		// The requester asks again for responses it was sent: they
		// outran it. If it took part of the run, k-start of them since
		// the run began, that is about the rate it takes.
		if k < s.next {
			took := 0.0
			if span := s.lastAt - s.begun; k > s.start && span > 0 {
				took = float64(k-s.start) * float64(t.pmtu+frameOverhead) * 8000 / float64(span)
			}
			e.overrun(q, took)
		}
		s.sent = max(s.sent, s.next)
		s.buf, s.bufOff = b, off
		s.start, s.next, s.again = k, k, true
		s.stop, s.end = k+t.npkts(r.DMALen), off+r.DMALen
		e.schedule(q)
		return
	}
	atomic.AddUint64(&e.c.Stale, 1)
}

// duplicateAtomic answers a repeated atomic from the resource that saved
// its result, once re-validated (above: the saved value is the word's
// content, which its key must still allow to be read); one whose resource
// was reused, or that names another address, is dropped (rxe: no
// resource, no reply), and the requester's retry count decides.
func (e *Engine) duplicateAtomic(q *QP, psn rocev2.PSN) {
	t := &q.t
	a := &e.pkt.AtomicETH
	for i := range t.res {
		s := &t.res[i]
		if s.atomic && s.first == psn {
			if a.VA != s.va {
				break
			}
			if _, f := e.regions.CheckRemoteOn(q.cfg.PD, q.cfg.QPN, a.RKey, a.VA, 8, memreg.AccessRemoteAtomic); f != memreg.OK || a.RKey != s.rkey {
				e.fatalNAK(q, psn, rocev2.NAKRemoteAccessError)
				return
			}
			s.start, s.next, s.again = 0, 0, true
			atomic.AddUint64(&e.c.AtomicReplays, 1)
			e.schedule(q)
			return
		}
	}
	atomic.AddUint64(&e.c.Stale, 1)
}

// setCtl records the acknowledgement to send after pending READ responses.
func (e *Engine) setCtl(q *QP, k ctlKind, psn rocev2.PSN, syn rocev2.Syndrome) {
	t := &q.t
	if k < t.ctl {
		return
	}
	t.ctl, t.ctlPSN, t.ctlSyn = k, psn, syn
	e.schedule(q)
}

// fatalNAK answers psn with a NAK that ends the connection and moves the
// responder's QP to the error state (rxe do_class_ac_error).
func (e *Engine) fatalNAK(q *QP, psn rocev2.PSN, code rocev2.NAKCode) {
	atomic.AddUint64(&e.c.NAKsSent, 1)
	q.t.n.NAKsSent++
	if code == rocev2.NAKRemoteAccessError {
		atomic.AddUint64(&e.c.LocalAccessErrors, 1)
		e.accessViolation()
	}
	e.transportFailed(q, nakStatus(code))
	e.setCtl(q, ctlFatal, psn, rocev2.NAKSyndrome(code))
	e.stopQP(q)
}

// respond sends q's READ responses and atomic acknowledgements in order,
// then its pending ACK or NAK,
// which must not overtake them: an ACK beyond a READ tells the requester
// its responses were lost.
func (e *Engine) respond(q *QP) (int, bool) {
	t := &q.t
	sent := 0
	n := len(t.res)
	for i := 0; i < n; i++ {
		r := &t.res[(t.resNext+i)%n]
		for r.sending() {
			if sent >= qpBudget {
				return sent, true
			}
			if e.paced(q) {
				// The pending ACK waits too: it must not overtake them.
				return sent, false
			}
			if r.again && r.next < r.sent {
				if e.replayLeft == 0 {
					// Another turn: the other QPs' answers go first.
					atomic.AddUint64(&e.c.ReplaysDeferred, 1)
					return sent, true
				}
				e.replayLeft--
			}
			var err error
			if r.atomic {
				err = e.sendAtomicAck(q, r)
			} else {
				err = e.sendReadResponse(q, r)
			}
			if err != nil {
				return sent, true
			}
			sent++
		}
	}
	if t.ctl == ctlAck && t.ackHold != 0 && e.now < t.ackHold {
		return sent, false // held: service sends it with the next request, timers when it expires
	}
	if t.ctl != ctlNone {
		if e.sendCtl(q) != nil {
			return sent, true
		}
		sent++
	}
	return sent, false
}

func (e *Engine) sendReadResponse(q *QP, r *readResource) error {
	t := &q.t
	h := &t.hdr
	k := r.next
	off := k * t.pmtu
	n := min(t.pmtu, r.end-off)
	first, last := k == r.start, k+1 == r.stop
	switch {
	case first && last:
		h.BTH.Opcode = rocev2.RCReadResponseOnly
	case first:
		h.BTH.Opcode = rocev2.RCReadResponseFirst
	case last:
		h.BTH.Opcode = rocev2.RCReadResponseLast
	default:
		h.BTH.Opcode = rocev2.RCReadResponseMiddle
	}
	h.BTH.PSN = r.first.Add(k)
	h.BTH.SE, h.BTH.AckReq = false, false
	h.AETH = rocev2.AETHFields{Syndrome: rocev2.ACKSyndrome(rocev2.CreditInvalid), MSN: t.msn}
	var payload []byte
	if n > 0 {
		payload = r.buf[off-r.bufOff : off-r.bufOff+n]
	}
	if err := e.emit(q, payload); err != nil {
		return err
	}
	e.charge(q, len(payload))
	if first {
		r.begun = e.now
	}
	r.lastAt = e.now
	r.next++
	return nil
}

// sendAtomicAck sends the ATOMIC_ACKNOWLEDGE of r: AETH and the original
// value (ROCEV2.md 1.3, opcode 0x12).
func (e *Engine) sendAtomicAck(q *QP, r *readResource) error {
	t := &q.t
	h := &t.hdr
	h.BTH.Opcode = rocev2.RCAtomicAck
	h.BTH.PSN = r.first
	h.BTH.SE, h.BTH.AckReq = false, false
	h.AETH = rocev2.AETHFields{Syndrome: rocev2.ACKSyndrome(rocev2.CreditInvalid), MSN: t.msn}
	h.AtomicAckETH = rocev2.AtomicAckETHFields{OrigData: r.orig}
	if err := e.emit(q, nil); err != nil {
		return err
	}
	r.next = 1
	return nil
}

func (e *Engine) sendCtl(q *QP) error {
	t := &q.t
	h := &t.hdr
	h.BTH.Opcode = rocev2.RCAck
	h.BTH.SE, h.BTH.AckReq = false, false
	if t.ctl == ctlAck {
		h.BTH.PSN = t.ePSN.Add(rocev2.PSNMask) // ePSN-1: everything executed
		h.AETH = rocev2.AETHFields{Syndrome: rocev2.ACKSyndrome(rocev2.CreditInvalid), MSN: t.msn}
	} else {
		h.BTH.PSN = t.ctlPSN
		h.AETH = rocev2.AETHFields{Syndrome: t.ctlSyn, MSN: t.msn}
	}
	if err := e.emit(q, nil); err != nil {
		return err
	}
	t.ctl = ctlNone
	t.ackHold = 0
	return nil
}
