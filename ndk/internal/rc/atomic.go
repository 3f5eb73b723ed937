package rc

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ntstatus"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

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
	b, f := e.regions.CheckRemote(q.cfg.PD, a.RKey, a.VA, 8, memreg.AccessRemoteAtomic)
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
	e.c.atomics.Add(1)
	*slot = readResource{first: psn, npkts: 1, va: a.VA, length: 8, atomic: true, orig: orig}
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

// alignedWord returns the 8 bytes of b as a *uint64 when they are 8-byte
// aligned in memory (sync/atomic needs it), else nil. ndk registers memory
// at its real address, so this agrees with the wire address check.
func alignedWord(b []byte) *uint64 {
	if len(b) < 8 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)&7 != 0 {
		return nil
	}
	return (*uint64)(p)
}

// duplicateAtomic answers a repeated atomic from the resource that saved
// its result; one whose resource was reused is dropped (rxe: no resource,
// no reply), and the requester's retry count decides.
func (e *Engine) duplicateAtomic(q *QP, psn rocev2.PSN) {
	t := &q.t
	for i := range t.res {
		s := &t.res[i]
		if s.atomic && s.first == psn {
			s.start, s.next, s.again = 0, 0, true
			e.c.atomicReplays.Add(1)
			e.schedule(q)
			return
		}
	}
	e.c.stale.Add(1)
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
		e.c.stale.Add(1)
		return
	}
	// The 8 bytes land in host order, as verbs delivers the original value
	// (rxe_comp.c do_atomic).
	binary.NativeEndian.PutUint64(e.tbuf[:], e.pkt.AtomicAckETH.OrigData)
	if !scatter(&w.seg, w.nseg, 0, e.tbuf[:8]) {
		e.fail(q, ntstatus.DataOverrun, wcLocLenErr)
		return
	}
	t.una = psn.Next()
	e.completeSend(q, w, ntstatus.Success, 0)
	e.progress(q)
}
