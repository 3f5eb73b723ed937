package rc

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// requestOpcodes returns the opcodes of the request packets A sent, in order.
func (w *wire) requestOpcodes() []rocev2.Opcode {
	var ops []rocev2.Opcode
	for _, f := range w.snapshot() {
		if f.dir == porttest.AtoB {
			ops = append(ops, f.op)
		}
	}
	return ops
}

// TestImmediate_SendAndWrite: a SEND and an RDMA WRITE with immediate, of
// one packet and of three (PMTU 1024), carry the immediate to the
// receive completion, which says it has one. The SEND's receive reports
// the bytes it received; the WRITE's receive reports the WRITE's length,
// as verbs' IBV_WC_RECV_RDMA_WITH_IMM does (rxe do_complete), and its
// buffer is not touched. The opcodes on the wire are the IBTA's.
func TestImmediate_SendAndWrite(t *testing.T) {
	for _, n := range []int{0, 100, 2500} {
		t.Run(sizeName(n), func(t *testing.T) {
			w := &wire{}
			a, b := newWiredPair(t, w, pairOptions{})
			src := a.buffer(n, 0, false)
			fill(src.b, uint64(n)+7)
			rbuf := b.buffer(4096, memreg.AccessLocalWrite, false)
			dst := b.buffer(n, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
			mustPost(t, b.qps[0].PostReceive("r1", []SGE{rbuf.sge(0, 4096)}))
			mustPost(t, b.qps[0].PostReceive("r2", []SGE{rbuf.sge(0, 16)}))
			imm1, imm2 := uint32(0xCAFEBABE), uint32(0x01020304+n)
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSendImm, Context: "s", SGL: []SGE{src.sge(0, n)}, Imm: imm1}))
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWriteImm, Context: "w", SGL: []SGE{src.sge(0, n)},
				RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote, Imm: imm2}))
			ss := waitCQ(t, a.scq, 2, 10*time.Second)
			checkEntry(t, ss[0], ndkpi.StatusSuccess, ndkpi.OpSend, "s")
			checkEntry(t, ss[1], ndkpi.StatusSuccess, ndkpi.OpWrite, "w")
			if ss[0].HasImmediate || ss[1].HasImmediate {
				t.Fatalf("an initiator completion says it carries an immediate: %+v", ss)
			}
			rs := waitCQ(t, b.rcq, 2, time.Second)
			checkEntry(t, rs[0], ndkpi.StatusSuccess, ndkpi.OpReceive, "r1")
			if !rs[0].HasImmediate || rs[0].Immediate != imm1 || rs[0].BytesTransferred != uint32(n) {
				t.Fatalf("SEND's receive: %+v, want immediate %#x and %d bytes", rs[0], imm1, n)
			}
			sameBytes(t, "SEND", rbuf.b[:n], src.b)
			checkEntry(t, rs[1], ndkpi.StatusSuccess, ndkpi.OpReceiveWriteWithImmediate, "r2")
			if !rs[1].HasImmediate || rs[1].Immediate != imm2 || rs[1].BytesTransferred != uint32(n) {
				t.Fatalf("WRITE's receive: %+v, want immediate %#x and %d bytes", rs[1], imm2, n)
			}
			sameBytes(t, "WRITE", dst.b, src.b)
			if !dst.guardsIntact() || !rbuf.guardsIntact() {
				t.Fatal("guard bytes changed")
			}
			var want []rocev2.Opcode
			if n <= 1024 {
				want = []rocev2.Opcode{rocev2.RCSendOnlyImm, rocev2.RCWriteOnlyImm}
			} else {
				want = []rocev2.Opcode{rocev2.RCSendFirst, rocev2.RCSendMiddle, rocev2.RCSendLastImm,
					rocev2.RCWriteFirst, rocev2.RCWriteMiddle, rocev2.RCWriteLastImm}
			}
			if got := w.requestOpcodes(); len(got) != len(want) || string(opBytes(got)) != string(opBytes(want)) {
				t.Fatalf("request opcodes %v, want %v", got, want)
			}
		})
	}
}

func opBytes(ops []rocev2.Opcode) []byte {
	b := make([]byte, len(ops))
	for i, o := range ops {
		b[i] = byte(o)
	}
	return b
}

// TestImmediate_WriteWaitsForReceive: a WRITE with immediate consumes a
// receive, so with none posted its last packet draws RNR NAKs (the
// packets before it are placed) until one is posted; it then completes
// once. A plain WRITE consumes none.
func TestImmediate_WriteWaitsForReceive(t *testing.T) {
	a, b := newPair(t, pairOptions{params: func(p *ConnParams) { p.MinRNRTimer = rocev2.RNRTimerFor(200 * time.Microsecond) }})
	src := a.buffer(3000, 0, false)
	fill(src.b, 3)
	dst := b.buffer(3000, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWriteImm, Context: 1, SGL: []SGE{src.sge(0, 3000)},
		RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote, Imm: 42}))
	time.Sleep(20 * time.Millisecond)
	var e cq.Entry
	if a.scq.Pop(&e) {
		t.Fatalf("WRITE with immediate completed without a receive: %+v", e)
	}
	if b.eng.Stats().RNRSent == 0 || a.eng.Stats().RNRReceived == 0 {
		t.Fatalf("no RNR NAK exchanged: A %+v B %+v", a.eng.Stats(), b.eng.Stats())
	}
	rbuf := b.buffer(8, memreg.AccessLocalWrite, false)
	mustPost(t, b.qps[0].PostReceive(2, []SGE{rbuf.sge(0, 8)}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, 1)
	r := waitCQ(t, b.rcq, 1, time.Second)[0]
	checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceiveWriteWithImmediate, 2)
	if !r.HasImmediate || r.Immediate != 42 || r.BytesTransferred != 3000 {
		t.Fatalf("receive %+v, want immediate 42, 3000 bytes", r)
	}
	sameBytes(t, "after RNR", dst.b, src.b)
	for _, x := range rbuf.b {
		if x != 0xEE {
			t.Fatal("the WRITE's receive buffer was written")
		}
	}

	// A plain WRITE leaves a posted receive alone.
	mustPost(t, b.qps[0].PostReceive(3, []SGE{rbuf.sge(0, 8)}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, Context: 4, SGL: []SGE{src.sge(0, 3000)},
		RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, 4)
	expectNone(t, b.rcq, 10*time.Millisecond)
}

// TestImmediate_DuplicateCompletesOnce: when the ACK of a WRITE_ONLY and a
// SEND_ONLY with immediate is lost, the requester resends them; the
// responder acknowledges the duplicates and completes no second receive
// (C9-105).
func TestImmediate_DuplicateCompletesOnce(t *testing.T) {
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, seen int) bool {
		return dir == porttest.BtoA && p.BTH.Opcode == rocev2.RCAck && seen < 2
	}}
	a, b := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = 20 * time.Millisecond }})
	src := a.buffer(64, 0, false)
	dst := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
	rbuf := b.buffer(64, memreg.AccessLocalWrite, false)
	for i := 0; i < 4; i++ {
		mustPost(t, b.qps[0].PostReceive(i, []SGE{rbuf.sge(0, 64)}))
	}
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWriteImm, Context: "w", SGL: []SGE{src.sge(0, 64)},
		RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote, Imm: 7}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSendImm, Context: "s", SGL: []SGE{src.sge(0, 64)}, Imm: 8}))
	waitCQ(t, a.scq, 2, 10*time.Second)
	rs := waitCQ(t, b.rcq, 2, time.Second)
	if rs[0].Immediate != 7 || rs[1].Immediate != 8 {
		t.Fatalf("receives %+v", rs)
	}
	if b.eng.Stats().Duplicates == 0 {
		t.Fatal("no duplicate reached the responder: the test did not test")
	}
	expectNone(t, b.rcq, 20*time.Millisecond)
}

// TestImmediate_WriteTakesSRQReceive: a QP on an SRQ takes the receive a
// WRITE with immediate consumes from the SRQ, as a SEND's; with the SRQ
// empty it RNR NAKs until one is posted there.
func TestImmediate_WriteTakesSRQReceive(t *testing.T) {
	r := newSRQRig(t, 4)
	h := r.senders[0]
	src := h.buffer(64, 0, false)
	fill(src.b, 5)
	dst := make([]byte, 64)
	tok, err := r.regions.Register(memreg.Region{PD: testPD, VA: addrOf(dst), Buf: dst, Access: memreg.AccessRemoteWrite | memreg.AccessLocalWrite})
	if err != nil {
		t.Fatal(err)
	}
	mustPost(t, h.qps[0].PostSend(&SendWR{Op: OpWriteImm, Context: "w", SGL: []SGE{src.sge(0, 64)},
		RemoteAddr: addrOf(dst), RemoteToken: tok.Remote, Imm: 0x5151}))
	time.Sleep(20 * time.Millisecond)
	if st := r.recv[0].Stats(); st.RNRSent == 0 {
		t.Fatalf("an empty SRQ drew no RNR NAK: %+v", st)
	}
	r.post(t, 3)
	checkEntry(t, waitCQ(t, h.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, "w")
	e := waitCQ(t, r.rcq, 1, time.Second)[0]
	checkEntry(t, e, ndkpi.StatusSuccess, ndkpi.OpReceiveWriteWithImmediate, 3)
	if e.QPContext != 0 || !e.HasImmediate || e.Immediate != 0x5151 || e.BytesTransferred != 64 {
		t.Fatalf("receive %+v", e)
	}
	r.recv[0].Stats() // orders the placement before the read below
	sameBytes(t, "WRITE", dst, src.b)
}

// TestImmediate_BadKeyCompletesItsReceive: a WRITE_ONLY_WITH_IMMEDIATE
// takes its receive before its key is checked (rxe's resource check comes
// first); with a wrong key, that receive completes with the access error
// and the next is flushed, as rxe's class C error completes the receive
// it took with IB_WC_REM_ACCESS_ERR; the requester sees the remote access
// NAK.
func TestImmediate_BadKeyCompletesItsReceive(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	src := a.buffer(100, 0, false)
	dst := b.buffer(100, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
	rbuf := b.buffer(16, memreg.AccessLocalWrite, false)
	mustPost(t, b.qps[0].PostReceive(1, []SGE{rbuf.sge(0, 8)}))
	mustPost(t, b.qps[0].PostReceive(2, []SGE{rbuf.sge(8, 8)}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWriteImm, Context: 3, SGL: []SGE{src.sge(0, 100)},
		RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote ^ 0x100, Imm: 7}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusAccessViolation, ndkpi.OpWrite, 3)
	got := waitCQ(t, b.rcq, 2, 5*time.Second)
	checkEntry(t, got[0], ndkpi.StatusAccessViolation, ndkpi.OpReceiveWriteWithImmediate, 1)
	if got[0].ProviderErrorCode != wcRemAccessErr || got[0].HasImmediate {
		t.Fatalf("the receive the WRITE took: %+v, want IB_WC_REM_ACCESS_ERR and no immediate", got[0])
	}
	if got[1].Status != ndkpi.StatusCancelled || got[1].RequestContext != 2 {
		t.Fatalf("the next receive: %+v, want it flushed", got[1])
	}
}
