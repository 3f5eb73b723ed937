package rc

import (
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Unreliable connection (IBTA's UC, rxe's IB_QPT_UC; an ndkxdp extension
// beyond NDKPI). A UC QP is created with QPConfig.UC and connected as an
// RC QP is, and carries SENDs and RDMA WRITEs (with immediate too) in UC
// packets: the RC opcodes' low five bits under the UC transport (0x20).
// Nothing is acknowledged, so nothing is retransmitted:
//
//   - the requester sends each request within the same window, pacing
//     and fences as RC, never asks for an ACK (AckReq clear) and arms no
//     ACK timer; a request completes, successfully, once its last packet
//     is on the wire (rxe_req.c: a UC WQE is done as its last packet
//     leaves). Posting a READ, an atomic or a SEND with invalidate fails
//     with STATUS_NOT_SUPPORTED.
//   - the responder places packets in PSN order and answers none. A
//     packet that is not the expected PSN, or not the next of its
//     message, drops the message in progress and every packet after it
//     up to the next FIRST or ONLY, which starts a message at whatever
//     PSN it carries (rxe check_psn and check_op_seq: drop_msg). A
//     message that finds no receive posted, names an R_Key it may not
//     use, or whose lengths do not match its RETH or its receive buffer
//     is dropped the same way. A dropped SEND leaves its receive posted
//     for the next message; nothing a peer sends moves a UC QP to the
//     error state. Dropped packets count in uc_dropped.
//
// On the wire a UC connection is made as an RC one: rdma_cm's REQ says RC
// whatever the QP (librdmacm's rdma_create_id gives RDMA_PS_TCP ids
// IBV_QPT_RC, and cma.c's cma_connect_ib sends that), and Linux's
// rdma_cm refuses a REQ whose transport type differs from its listener's
// (cma_check_req_qp_type).

// ucSent retires what a UC QP has sent through psn: una moves past it, and
// every request whose last packet it was, or before it, completes.
func (e *Engine) ucSent(q *QP, psn rocev2.PSN) {
	t := &q.t
	t.una = psn.Next()
	for t.sqHead < t.sqStart {
		w := q.sq.at(t.sqHead)
		if w.op.local() {
			if !e.retireLocal(q) {
				return
			}
			continue
		}
		if psn.Less(w.firstPSN.Add(w.npkts - 1)) {
			return
		}
		e.completeSend(q, w, ndkpi.StatusSuccess, 0)
	}
}

// ucResponder places one UC request packet for q.
func (e *Engine) ucResponder(q *QP) {
	t := &q.t
	p := &e.pkt
	op := p.BTH.Opcode
	pos := op.Info().Position
	start := pos&rocev2.PosFirst != 0
	last := pos&rocev2.PosLast != 0
	psn := p.BTH.PSN
	if psn != t.ePSN || t.ucDrop {
		if psn != t.ePSN {
			atomic.AddUint64(&e.c.OutOfSeq, 1)
			t.n.OutOfSeq++
		}
		if !start {
			e.ucDropMsg(q)
			return
		}
		t.ucDrop = false
	}
	if start && t.inMsg != msgNone {
		// A new message before the last one's LAST (its PSN counted in
		// out_of_seq): that one is lost, its receive is used again.
		e.ucAbandon(q)
	}
	var kind uint8
	switch op {
	case rocev2.UCSendFirst, rocev2.UCSendMiddle, rocev2.UCSendLast, rocev2.UCSendLastImm,
		rocev2.UCSendOnly, rocev2.UCSendOnlyImm:
		kind = msgSend
	case rocev2.UCWriteFirst, rocev2.UCWriteMiddle, rocev2.UCWriteLast, rocev2.UCWriteLastImm,
		rocev2.UCWriteOnly, rocev2.UCWriteOnlyImm:
		kind = msgWrite
	}
	if kind == msgNone || !t.inSequence(kind, pos) || !t.fullPacket(pos, len(p.Payload)) {
		e.ucDropMsg(q)
		return
	}
	if kind == msgSend {
		if start {
			if !e.haveReceive(q) {
				e.ucDropMsg(q)
				return
			}
			t.recvOff = 0
		}
		w := e.recvHead(q)
		if !scatter(w.seg, w.nseg, t.recvOff, p.Payload) {
			e.ucDropMsg(q) // longer than the receive buffer
			return
		}
		t.recvOff += uint32(len(p.Payload))
		t.ePSN = psn.Next()
		if !last {
			t.inMsg = msgSend
			return
		}
		t.inMsg = msgNone
		t.msn = (t.msn + 1) & rocev2.PSNMask
		imm := noImm
		if op == rocev2.UCSendLastImm || op == rocev2.UCSendOnlyImm {
			imm = immediate{p.ImmDt, true}
		}
		e.completeRecv(q, ndkpi.StatusSuccess, 0, t.recvOff, ndkpi.OpReceive, 0, p.BTH.SE, imm)
		return
	}
	withImm := op == rocev2.UCWriteLastImm || op == rocev2.UCWriteOnlyImm
	if withImm && !e.haveReceive(q) {
		e.ucDropMsg(q)
		return
	}
	if start {
		r := &p.RETH
		t.wbuf, t.woff = nil, 0
		if r.DMALen > 0 { // a zero-length WRITE checks no key (IBTA 9.4.3)
			b, f := e.regions.CheckRemoteOn(q.cfg.PD, q.cfg.QPN, r.RKey, r.VA, r.DMALen, memreg.AccessRemoteWrite)
			if f != memreg.OK {
				atomic.AddUint64(&e.c.LocalAccessErrors, 1)
				e.accessViolation()
				e.ucDropMsg(q)
				return
			}
			t.wbuf = b
		}
	}
	if !e.placeWrite(q, pos) {
		e.ucDropMsg(q) // length differs from the RETH
		return
	}
	t.ePSN = psn.Next()
	if !last {
		t.inMsg = msgWrite
		return
	}
	t.inMsg = msgNone
	length := uint32(len(t.wbuf))
	t.wbuf = nil
	t.msn = (t.msn + 1) & rocev2.PSNMask
	if withImm {
		e.completeRecv(q, ndkpi.StatusSuccess, 0, length, ndkpi.OpReceiveWriteWithImmediate, 0, p.BTH.SE, immediate{p.ImmDt, true})
	}
}

// ucDropMsg drops the packet in e.pkt, the message in progress, and what
// follows of it up to the next FIRST or ONLY.
func (e *Engine) ucDropMsg(q *QP) {
	atomic.AddUint64(&e.c.UCDropped, 1)
	e.ucAbandon(q)
	q.t.ucDrop = true
}

// ucAbandon ends the message in progress unfinished: no completion, and
// a SEND's receive stays for the next message.
func (e *Engine) ucAbandon(q *QP) {
	t := &q.t
	t.inMsg = msgNone
	t.wbuf, t.woff = nil, 0
	t.recvOff = 0
}
