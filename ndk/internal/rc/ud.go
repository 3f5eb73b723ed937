package rc

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Unreliable datagram QPs (an ndkxdp extension; IBTA 9.8 and 10.2.5,
// rxe's IB_QPT_UD). A UD QP is created like an RC one with QPConfig.UD
// and made ready with ActivateUD, which needs no peer: each send names
// its destination (SendWR.UD: address, MAC, QPN and Q_Key), and leaves
// as one UD SEND_ONLY packet (SEND_ONLY_WITH_IMMEDIATE for OpSendImm, as
// udaddy sends) with a DETH (Q_Key, our QPN) that completes
// as soon as it is on the wire, since nothing acknowledges it. A message
// larger than the path MTU is refused at post time.
//
// A datagram is received only if its DETH Q_Key is the QP's own
// (Stats.BadQKey counts the others, as rxe check_keys drops them). The
// receive buffer's first GRHLen bytes get the GRH, as verbs delivers it:
// RoCEv2 carries none, so, as rxe build_rdma_network_hdr, an IPv6
// datagram's IPv6 header fills them and an IPv4 datagram's IPv4 header
// fills the last 20 behind 20 zero bytes. The payload follows, and the
// completion counts both (verbs' byte_len), names the source QPN in
// TypeSpecificCompletionOutput and is Type Receive, with the immediate
// of a SEND_ONLY_WITH_IMMEDIATE. Without a posted
// receive (once the QP's receive refill, if it has one, posted none:
// SetReceiveRefill), or with one too small, the datagram is dropped and counted in
// Stats.UDDropped and the receive stays posted (rxe class D: drop_msg); a
// QP on an SRQ instead completes the receive it took with
// STATUS_BUFFER_OVERFLOW (rxe class E, IB_WC_REM_INV_REQ_ERR). No
// datagram ever moves a UD QP to the error state.

// SetReceiveRefill gives the QP a consumer that posts its receives from
// a queue of its own, as the daemon's relay moves a client's from the
// client's ring: when a datagram finds the receive queue empty, the
// engine calls f on its own goroutine, and takes a receive f posted (f
// reports whether it posted any) before it drops the datagram. A receive
// the client posted before the datagram arrived then takes it, as it
// would on a QP the client posts to directly; UD has no retry to make up
// for a relay that had not yet moved it. f must not block.
func (q *QP) SetReceiveRefill(f func() bool) { q.recvRefill.Store(&f) }

// refill asks the receive refill, if any, for receives, and reports
// whether the receive queue now holds one.
func (q *QP) refill() bool {
	f := q.recvRefill.Load()
	return f != nil && (*f)() && q.t.rqHead != q.rq.tail.Load()
}

// GRHLen is the room a UD receive gives the GRH ahead of the payload.
const GRHLen = 40

// UDDest is where a UD send goes: the verbs address handle (IP, MAC),
// the remote QPN and the Q_Key. A Q_Key with its high bit set means the
// sending QP's own (IBTA 10.2.5, a controlled Q_Key is never taken from a
// work request).
type UDDest struct {
	IP   netip.Addr
	MAC  rocev2.MAC
	QPN  uint32
	QKey uint32
	// TOS is the datagram's IP TOS byte (DSCP and ECN) where SetTOS,
	// as an address handle's traffic class; otherwise the QP's.
	TOS    uint8
	SetTOS bool
}

// UDParams makes a UD QP ready to send and receive (verbs' INIT, RTR and
// RTS for IB_QPT_UD): its own address, its Q_Key and the path MTU that
// bounds each datagram.
type UDParams struct {
	Local   Endpoint // IP and MAC; QPN must be the QP's
	QKey    uint32
	PathMTU rocev2.MTU
	Traffic *TrafficClass
}

// udQKeyControlled is the Q_Key bit that says "the QP's own".
const udQKeyControlled = 0x80000000

// ActivateUD moves a UD QP (QPConfig.UD) from Init to ready.
func (q *QP) ActivateUD(p UDParams) error {
	switch {
	case !q.cfg.UD:
		return fmt.Errorf("%w: not a UD QP", ErrBadConfig)
	case !p.PathMTU.Valid():
		return fmt.Errorf("%w: path MTU %v", ErrBadConfig, p.PathMTU)
	case p.Local.QPN != q.cfg.QPN:
		return fmt.Errorf("%w: local QPN %#x is not this QP's %#x", ErrBadConfig, p.Local.QPN, q.cfg.QPN)
	case !p.Local.IP.IsValid():
		return fmt.Errorf("%w: no local address", ErrBadConfig)
	}
	e := q.eng
	tc := e.traffic
	if p.Traffic != nil {
		tc = *p.Traffic
		if err := tc.Validate(); err != nil {
			return err
		}
	}
	var err error
	derr := e.do(func() {
		if e.qps[q.cfg.QPN] != q || q.t.ud || q.t.failed {
			err = fmt.Errorf("%w: activate from state %v", ErrBadState, q.State())
			return
		}
		// The template addresses the QP itself; each send fills in its
		// destination (udRequest).
		q.t.setup(ConnParams{Local: p.Local, Remote: p.Local, PathMTU: p.PathMTU}, tc)
		q.t.hdr.BTH.Opcode = rocev2.UDSendOnly
		q.t.hdr.DETH = rocev2.DETHFields{SrcQP: q.cfg.QPN}
		q.t.peerIP = netip.Addr{}
		q.t.qkey = p.QKey
		q.t.udTOS = q.t.hdr.IP.TOS
		q.t.ud = true
		q.udMTU.Store(q.t.pmtu)
		q.state.Store(uint32(StateConnected))
		e.schedule(q)
	})
	if derr != nil {
		return derr
	}
	return err
}

// UDPathMTU is the largest datagram a UD QP sends: its path MTU, 0 before
// ActivateUD.
func (q *QP) UDPathMTU() uint32 { return q.udMTU.Load() }

// checkUD validates a UD send at post time.
func (q *QP) checkUD(wr *SendWR) ndkpi.Status {
	d := &wr.UD
	switch {
	case wr.Op != OpSend && wr.Op != OpSendImm:
		return ndkpi.StatusNotSupported // UD carries SENDs only (IBTA table 37)
	case d.QPN == 0 || d.QPN > rocev2.PSNMask || !d.IP.IsValid():
		return ndkpi.StatusInvalidParameter
	case d.SetTOS && rocev2.ECNOf(d.TOS) == rocev2.CE:
		return ndkpi.StatusInvalidParameter // CE is a switch's to set
	}
	var total uint64
	for i := range wr.SGL {
		total += uint64(wr.SGL[i].Length)
	}
	if total > uint64(q.udMTU.Load()) {
		return ndkpi.StatusInvalidParameter
	}
	return ndkpi.StatusSuccess
}

// udRequest sends q's posted datagrams, each completing as it leaves.
func (e *Engine) udRequest(q *QP) (int, bool) {
	t := &q.t
	tail := q.sq.tail.Load() // acquire: the posted WQEs are written
	sent := 0
	for ; sent < qpBudget && t.sqHead < tail; sent++ {
		w := q.sq.at(t.sqHead)
		d := &w.ud
		dst := d.IP
		if t.hdr.IP.Src.Is4() {
			dst = dst.Unmap()
		}
		if dst.Is4() != t.hdr.IP.Src.Is4() {
			// Another family than the QP's address: no packet can
			// carry it (a verbs AH of the wrong GID type).
			e.completeSend(q, w, ndkpi.StatusInvalidAddress, wcLocQPOpErr)
			continue
		}
		t.hdr.Eth.Dst = d.MAC
		t.hdr.IP.Dst = dst
		t.hdr.UDP.SrcPort = rocev2.UDPSourcePort(0, q.cfg.QPN, d.QPN)
		t.hdr.BTH.DestQP = d.QPN
		t.hdr.BTH.PSN = t.nextPSN
		t.hdr.BTH.SE = w.flags&ndkpi.OpFlagSendAndSolicitEvent != 0
		t.hdr.BTH.Opcode = rocev2.UDSendOnly
		if w.op == OpSendImm {
			t.hdr.BTH.Opcode = rocev2.UDSendOnlyImm
			t.hdr.ImmDt = w.imm
		}
		t.hdr.IP.TOS = t.udTOS
		if d.SetTOS {
			t.hdr.IP.TOS = d.TOS
		}
		t.hdr.DETH.QKey = d.QKey
		if d.QKey&udQKeyControlled != 0 {
			t.hdr.DETH.QKey = t.qkey
		}
		payload := e.span(w.seg, w.nseg, 0, w.length)
		if err := e.emit(q, payload); err != nil {
			return sent, true // no transmit room: the next loop retries
		}
		if d.QPN == rocev2.MulticastQPN {
			e.loopMulticast(q, payload)
		}
		t.nextPSN = t.nextPSN.Next()
		e.completeSend(q, w, ndkpi.StatusSuccess, 0)
	}
	return sent, t.sqHead < q.sq.tail.Load()
}

// udReceive takes a UD SEND for a QP other than QP1.
func (e *Engine) udReceive(frame []byte, mayForward bool) {
	p := &e.pkt
	if p.BTH.DestQP == rocev2.MulticastQPN {
		e.mcastReceive(frame, mayForward)
		return
	}
	q := e.lookup(p.BTH.DestQP)
	if q == nil {
		if mayForward && e.forward(p.BTH.DestQP, frame) {
			return
		}
		atomic.AddUint64(&e.c.UnknownQP, 1)
		return
	}
	e.udDeliver(q, true)
}

// udDeliver gives the UD datagram in e.pkt to q; toQP: it was addressed to
// q itself (checked against q's address), not to a multicast group.
func (e *Engine) udDeliver(q *QP, toQP bool) {
	p := &e.pkt
	t := &q.t
	switch {
	case !t.ud || t.failed:
		atomic.AddUint64(&e.c.NotConnected, 1)
		return
	case p.BTH.PKey&0x7FFF != rocev2.DefaultPKey&0x7FFF:
		atomic.AddUint64(&e.c.BadPKey, 1)
		return
	case toQP && !t.toLocal(p):
		atomic.AddUint64(&e.c.WrongDestination, 1)
		return
	case p.DETH.QKey != t.qkey:
		atomic.AddUint64(&e.c.BadQKey, 1)
		return
	}
	t.n.FramesIn++
	if q.cfg.SRQ != nil {
		t.hasCur = t.hasCur || q.cfg.SRQ.take(&t.cur)
		if !t.hasCur {
			atomic.AddUint64(&e.c.UDDropped, 1)
			return
		}
	} else if t.rqHead == q.rq.tail.Load() && !q.refill() {
		atomic.AddUint64(&e.c.UDDropped, 1)
		return
	}
	w := e.recvHead(q)
	var grh [GRHLen]byte
	l3 := p.Frame[p.L3Offset:]
	if p.IP.Src.Is4() {
		copy(grh[GRHLen-rocev2.IPv4Len:], l3[:rocev2.IPv4Len])
	} else {
		copy(grh[:], l3[:rocev2.IPv6Len])
	}
	if uint64(GRHLen+len(p.Payload)) > uint64(w.length) {
		if q.cfg.SRQ != nil {
			e.completeRecv(q, ndkpi.StatusBufferOverflow, wcRemInvReqErr, 0, ndkpi.OpReceive, p.DETH.SrcQP, false, noImm)
			return
		}
		atomic.AddUint64(&e.c.UDDropped, 1)
		return
	}
	scatter(w.seg, w.nseg, 0, grh[:])
	scatter(w.seg, w.nseg, GRHLen, p.Payload)
	imm := noImm
	if p.BTH.Opcode == rocev2.UDSendOnlyImm {
		imm = immediate{p.ImmDt, true}
	}
	e.completeRecv(q, ndkpi.StatusSuccess, 0, uint32(GRHLen+len(p.Payload)), ndkpi.OpReceive, p.DETH.SrcQP, p.BTH.SE, imm)
}
