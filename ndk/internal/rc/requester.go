package rc

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The requester (rxe_req.c) turns posted WQEs into request packets: it
// gives each WQE its PSNs when it starts and sends within the window, the
// outbound read limit and READ_FENCE. The completer moves its cursor
// (txIdx, txPkt) back for go-back-N.

// request sends new and retransmitted request packets of q within the
// window, the read limits and the fences.
func (e *Engine) request(q *QP) (int, bool) {
	t := &q.t
	if t.rnrUntil != 0 {
		return 0, false // the RNR timer reschedules
	}
	if !e.retireLocal(q) {
		return 0, false
	}
	tail := q.sq.tail.Load() // acquire: the posted WQEs are written
	sent := 0
	for sent < qpBudget {
		if t.txIdx == tail {
			break
		}
		w := q.sq.at(t.txIdx)
		if w.op.local() {
			// No packet: it only needs its turn in the queue (local.go).
			if t.txIdx == t.sqStart {
				if w.flags&ndkpi.OpFlagReadFence != 0 && t.readsOut > 0 {
					break
				}
				w.firstPSN, w.npkts = t.nextPSN, 0
				t.sqStart++
			}
			t.txIdx++
			t.txPkt = 0
			if !e.retireLocal(q) {
				return sent, false
			}
			continue
		}
		if t.txIdx == t.sqStart {
			if w.flags&ndkpi.OpFlagReadFence != 0 && t.readsOut > 0 {
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
		if d := t.una.Distance(w.firstPSN.Add(t.txPkt)); d >= e.window || (t.cwnd != 0 && d >= t.cwnd && !w.op.responded()) {
			break
		}
		if e.paced(q) {
			break
		}
		if e.sendRequest(q, w, t.txPkt) != nil {
			e.armAckTimer(q, sent)
			return sent, true
		}
		sent++
		psn := w.firstPSN.Add(t.txPkt)
		if w.op.responded() || t.txPkt+1 >= w.npkts {
			t.txIdx++
			t.txPkt = 0
		} else {
			t.txPkt++
		}
		if q.cfg.UC {
			// After the cursor moved: ucSent may retire w's slot.
			e.ucSent(q, psn)
		}
	}
	e.armAckTimer(q, sent)
	return sent, sent == qpBudget
}

func (e *Engine) armAckTimer(q *QP, sent int) {
	if t := &q.t; sent > 0 && t.ackDeadline == 0 && t.ackTO > 0 {
		t.ackDeadline = e.now + t.ackTO
		e.setTimer(q, t.ackDeadline)
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
		payload = e.span(w.seg, w.nseg, off, n)
		h.BTH.Opcode = requestOpcode(w.op, first, last)
		if q.cfg.UC {
			// The same operation at the same low five bits (IBTA
			// table 37).
			h.BTH.Opcode |= rocev2.Opcode(rocev2.TransportUC)
		}
		if w.op.write() && first {
			h.RETH = rocev2.RETHFields{VA: w.remoteAddr, RKey: w.remoteToken, DMALen: w.length}
		}
		if w.op == OpSendInvalidate && last {
			h.IETH = w.invToken
		}
		if w.op.immediate() && last {
			h.ImmDt = w.imm
		}
		if last {
			// SE only on the last packet of a solicited SEND, or of a
			// WRITE with immediate, whose receive completion it
			// signals (ROCEV2.md 2; IBTA 9.2.3).
			h.BTH.SE = w.op != OpWrite && w.flags&ndkpi.OpFlagSendAndSolicitEvent != 0
			h.BTH.AckReq = true
		} else if t.sinceAckReq+1 >= ackEvery || (t.cwnd != 0 && t.sinceAckReq+1 >= int(t.cwnd/2)) {
			// A cut window asks twice per window, or it would wait for
			// the ACK timer with the window full and no ACK asked for.
			h.BTH.AckReq = true
		}
	}
	if q.cfg.UC {
		h.BTH.AckReq = false // nothing answers a UC packet
	}
	if err := e.emit(q, payload); err != nil {
		return err
	}
	e.charge(q, len(payload))
	if h.BTH.AckReq {
		t.sinceAckReq = 0
	} else {
		t.sinceAckReq++
	}
	return nil
}

func requestOpcode(op Op, first, last bool) rocev2.Opcode {
	switch op {
	case OpWriteImm:
		switch {
		case first && last:
			return rocev2.RCWriteOnlyImm
		case first:
			return rocev2.RCWriteFirst
		case last:
			return rocev2.RCWriteLastImm
		}
		return rocev2.RCWriteMiddle
	case OpSendImm:
		switch {
		case first && last:
			return rocev2.RCSendOnlyImm
		case last:
			return rocev2.RCSendLastImm
		}
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
