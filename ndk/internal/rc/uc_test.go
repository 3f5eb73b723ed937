package rc

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// ucCapture is rxe's ibv_uc_pingpong (1024-byte SEND_ONLYs between QPs
// 0x21 and 0x22), read in place.
const ucCapture = "../../../../shared/testdata/pcaps/linlinw5__rdma_ib_tutorial/pingpong_uc.pcap"

// frameLog records the RoCEv2 packets a pipe carries, by direction.
type frameLog struct {
	mu   sync.Mutex
	pkts [2][]rocev2.Packet
	// drop, if set, loses the packets it returns true for.
	drop func(dir porttest.Direction, p *rocev2.Packet) bool
}

func (l *frameLog) filter(dir porttest.Direction, frame []byte) porttest.Verdict {
	var p rocev2.Packet
	if rocev2.Parse(append([]byte(nil), frame...), &p) != nil {
		return porttest.Pass
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pkts[dir] = append(l.pkts[dir], p)
	if l.drop != nil && l.drop(dir, &p) {
		return porttest.Drop
	}
	return porttest.Pass
}

func (l *frameLog) sent(dir porttest.Direction) []rocev2.Packet {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rocev2.Packet(nil), l.pkts[dir]...)
}

// TestUC_SendAndWriteUnacknowledged: a UC pair moves SENDs and WRITEs of
// one and several packets, with immediate too, every byte in place; the
// requester's completions succeed with nothing coming back (not a frame
// from B to A), and every packet A sent is a UC opcode without AckReq.
func TestUC_SendAndWriteUnacknowledged(t *testing.T) {
	var log frameLog
	a, b := newPair(t, pairOptions{uc: true, pipe: porttest.PipeConfig{Filter: log.filter}})
	qa, qb := a.qps[0], b.qps[0]
	const n = 5000 // five packets at MTU 1024
	src := a.buffer(n, 0, false)
	fill(src.b, 1)
	recv := b.buffer(2*n, memreg.AccessLocalWrite, false)
	dst := b.buffer(n, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	for i := 0; i < 3; i++ {
		mustPost(t, qb.PostReceive(i, []SGE{recv.sge(0, 2*n)}))
	}
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, Context: "send", SGL: []SGE{src.sge(0, n)}}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpWrite, Context: "write", SGL: []SGE{src.sge(0, n)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpSendImm, Context: "send imm", SGL: []SGE{src.sge(0, 100)}, Imm: 0xA1B2C3D4}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpWriteImm, Context: "write imm", SGL: []SGE{src.sge(0, 1024)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote, Imm: 7}))
	for i, e := range waitCQ(t, a.scq, 4, 5*time.Second) {
		want := []string{"send", "write", "send imm", "write imm"}[i]
		if e.Status != ndkpi.StatusSuccess || e.RequestContext != want {
			t.Fatalf("send completion %d: %+v, want %q succeeded", i, e, want)
		}
	}
	rs := waitCQ(t, b.rcq, 3, 5*time.Second)
	if e := rs[0]; e.Status != ndkpi.StatusSuccess || e.BytesTransferred != n || e.HasImmediate {
		t.Fatalf("SEND's receive: %+v", e)
	}
	if e := rs[1]; e.Status != ndkpi.StatusSuccess || e.BytesTransferred != 100 || !e.HasImmediate || e.Immediate != 0xA1B2C3D4 {
		t.Fatalf("SEND with immediate's receive: %+v", e)
	}
	if e := rs[2]; e.Status != ndkpi.StatusSuccess || e.Type != ndkpi.OpReceiveWriteWithImmediate || e.BytesTransferred != 1024 || e.Immediate != 7 {
		t.Fatalf("WRITE with immediate's receive: %+v", e)
	}
	sameBytes(t, "WRITE target", dst.b, src.b)
	sameBytes(t, "SEND with immediate's receive", recv.b[:100], src.b[:100])
	if !dst.guardsIntact() || !recv.guardsIntact() {
		t.Fatal("bytes written outside the buffers")
	}
	sent := log.sent(porttest.AtoB)
	if len(sent) != 5+5+1+1 {
		t.Fatalf("A sent %d packets, want 12 (no retransmission)", len(sent))
	}
	for _, p := range sent {
		if p.BTH.Opcode.Transport() != rocev2.TransportUC || p.BTH.AckReq {
			t.Fatalf("A sent %v with AckReq %v: want UC opcodes, no AckReq", p.BTH.Opcode, p.BTH.AckReq)
		}
	}
	if back := log.sent(porttest.BtoA); len(back) != 0 {
		t.Fatalf("B answered with %d packets (first %v): UC acknowledges nothing", len(back), back[0].BTH.Opcode)
	}
	if s := a.eng.Stats(); s.Retransmits != 0 || s.Timeouts != 0 {
		t.Fatalf("requester retransmitted %d rounds, %d timeouts", s.Retransmits, s.Timeouts)
	}
	if qs := a.eng.QPs(); len(qs) != 1 || qs[0].Type != "UC" || qs[0].Outstanding != 0 || qs[0].SendPSN != qs[0].UnackedPSN {
		t.Fatalf("QP rows %+v: want one UC QP, idle, nothing unacknowledged", qs)
	}
}

// TestUC_LossDropsTheMessageOnly: the second packet of a three-packet
// SEND is lost. That message is dropped (no receive completes for it,
// the rest of its packets are dropped), nothing is sent again, and the
// next message, at the next PSN, lands in the same receive. A WRITE that
// loses its FIRST is dropped whole as well, and a WRITE after it is
// placed.
func TestUC_LossDropsTheMessageOnly(t *testing.T) {
	var log frameLog
	a2b := 0
	log.drop = func(dir porttest.Direction, p *rocev2.Packet) bool {
		if dir != porttest.AtoB {
			return false
		}
		a2b++
		return a2b == 2 || a2b == 5 // SEND #1's MIDDLE; the first WRITE's FIRST
	}
	a, b := newPair(t, pairOptions{uc: true, pipe: porttest.PipeConfig{Filter: log.filter}})
	qa, qb := a.qps[0], b.qps[0]
	src := a.buffer(3072, 0, false)
	fill(src.b, 2)
	recv := b.buffer(4096, memreg.AccessLocalWrite, false)
	dst := b.buffer(4096, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	mustPost(t, qb.PostReceive("r0", []SGE{recv.sge(0, 4096)}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 3072)}}))                                                              // packets 1-3
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(1000, 200)}}))                                                            // packet 4
	mustPost(t, qa.PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, 2048)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))    // 5-6
	mustPost(t, qa.PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, 2048)}, RemoteAddr: dst.addr(2048), RemoteToken: dst.tokens.Remote})) // 7-8
	for i, e := range waitCQ(t, a.scq, 4, 5*time.Second) {
		if e.Status != ndkpi.StatusSuccess {
			t.Fatalf("send %d: %+v", i, e)
		}
	}
	e := waitCQ(t, b.rcq, 1, 5*time.Second)[0]
	if e.Status != ndkpi.StatusSuccess || e.RequestContext != "r0" || e.BytesTransferred != 200 {
		t.Fatalf("receive: %+v, want r0 with the second SEND's 200 bytes", e)
	}
	sameBytes(t, "receive", recv.b[:200], src.b[1000:1200])
	// Once B's engine took the six packets the link delivered, each was
	// handled (Stats orders the engine's stores before the reads below).
	deadline := time.Now().Add(5 * time.Second)
	for b.eng.Stats().FramesIn < 6 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	expectNone(t, b.rcq, 50*time.Millisecond)
	sameBytes(t, "second WRITE", dst.b[2048:], src.b[:2048])
	if !bytes.Equal(dst.b[:2048], bytes.Repeat([]byte{0xEE}, 2048)) {
		t.Fatal("the WRITE whose FIRST was lost placed bytes")
	}
	// Dropped: SEND #1's LAST and the first WRITE's LAST. Out of
	// sequence: those two, and SEND #2 and the second WRITE's FIRST,
	// each starting its message at a PSN the responder did not expect.
	if s := b.eng.Stats(); s.UCDropped != 2 || s.OutOfSeq != 4 {
		t.Fatalf("uc_dropped %d, out_of_seq %d; want 2 and 4", s.UCDropped, s.OutOfSeq)
	}
	if n := len(log.sent(porttest.AtoB)); n != 8 {
		t.Fatalf("A sent %d packets, want 8: nothing again", n)
	}
	if qb.State() != StateConnected || qa.State() != StateConnected {
		t.Fatalf("QPs %v and %v after the losses: want both connected", qa.State(), qb.State())
	}
}

// TestUC_ResponderDropsWhatItCannotPlace: a SEND with no receive posted, a
// WRITE with a wrong R_Key and a SEND longer than its receive are
// dropped, none answered or completed and none failing B's QP; the SEND
// after them lands in the receive the long one left.
func TestUC_ResponderDropsWhatItCannotPlace(t *testing.T) {
	var log frameLog
	a, b := newPair(t, pairOptions{uc: true, pipe: porttest.PipeConfig{Filter: log.filter}})
	qa, qb := a.qps[0], b.qps[0]
	src := a.buffer(2048, 0, false)
	fill(src.b, 3)
	dst := b.buffer(2048, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 64)}}))
	waitCQ(t, a.scq, 1, 5*time.Second)
	waitDropped(t, b, 1)
	recv := b.buffer(512, memreg.AccessLocalWrite, false)
	mustPost(t, qb.PostReceive("r", []SGE{recv.sge(0, 512)}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, 2048)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote + 1}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 1000)}})) // longer than 512
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(100, 300)}}))
	for i, e := range waitCQ(t, a.scq, 3, 5*time.Second) {
		if e.Status != ndkpi.StatusSuccess {
			t.Fatalf("send %d: %+v", i, e)
		}
	}
	e := waitCQ(t, b.rcq, 1, 5*time.Second)[0]
	if e.Status != ndkpi.StatusSuccess || e.BytesTransferred != 300 {
		t.Fatalf("receive: %+v, want the last SEND's 300 bytes", e)
	}
	sameBytes(t, "receive", recv.b[:300], src.b[100:400])
	if !bytes.Equal(dst.b, bytes.Repeat([]byte{0xEE}, 2048)) {
		t.Fatal("the WRITE with a wrong R_Key placed bytes")
	}
	if s := b.eng.Stats(); s.LocalAccessErrors != 1 || s.NAKsSent != 0 || s.RNRSent != 0 {
		t.Fatalf("local access errors %d, NAKs %d, RNR NAKs %d; want 1, 0, 0", s.LocalAccessErrors, s.NAKsSent, s.RNRSent)
	}
	if back := log.sent(porttest.BtoA); len(back) != 0 {
		t.Fatalf("B answered with %d packets", len(back))
	}
	if qb.State() != StateConnected {
		t.Fatalf("B's QP %v, want connected", qb.State())
	}
}

func waitDropped(t *testing.T, h *host, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.eng.Stats().UCDropped < n {
		if time.Now().After(deadline) {
			t.Fatalf("uc_dropped %d, want %d", h.eng.Stats().UCDropped, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUC_PostRefusesWhatUCLacks: READ, the atomics and SEND with
// invalidate fail at post time with STATUS_NOT_SUPPORTED and no
// completion; a UC QP that is also UD is refused.
func TestUC_PostRefusesWhatUCLacks(t *testing.T) {
	a, _ := newPair(t, pairOptions{uc: true})
	qa := a.qps[0]
	buf := a.buffer(64, memreg.AccessLocalWrite, false)
	for _, wr := range []SendWR{
		{Op: OpRead, SGL: []SGE{buf.sge(0, 64)}, RemoteAddr: 0x1000, RemoteToken: 1},
		{Op: OpCompareSwap, SGL: []SGE{buf.sge(0, 8)}, RemoteAddr: 0x1000, RemoteToken: 1},
		{Op: OpFetchAdd, SGL: []SGE{buf.sge(0, 8)}, RemoteAddr: 0x1000, RemoteToken: 1},
		{Op: OpSendInvalidate, SGL: []SGE{buf.sge(0, 8)}, InvalidateToken: 1},
	} {
		if st := qa.PostSend(&wr); st != ndkpi.StatusNotSupported {
			t.Errorf("%v on a UC QP: %v, want STATUS_NOT_SUPPORTED", wr.Op, st)
		}
	}
	expectNone(t, a.scq, 20*time.Millisecond)
	if _, err := a.eng.CreateQP(QPConfig{QPN: 0x300, PD: testPD, RecvCQ: a.rcq, SendCQ: a.scq, RecvDepth: 4, SendDepth: 4, UC: true, UD: true}); err == nil {
		t.Fatal("a QP both UC and UD was created")
	}
}

// TestUC_OtherTransportDropped: RC packets for a UC QP and UC packets
// for an RC QP are dropped (not_rc), nothing placed.
func TestUC_OtherTransportDropped(t *testing.T) {
	a, b := newPair(t, pairOptions{noConnect: true})
	qa := a.createQPOf(0x200, 16, false) // RC
	qb := b.createQPOf(0x200, 16, true)  // UC
	pA, pB := defaultParams(rocev2.MTU1024), defaultParams(rocev2.MTU1024)
	epA := Endpoint{IP: a.ip, MAC: a.mac, QPN: 0x200, PSN: 10}
	epB := Endpoint{IP: b.ip, MAC: b.mac, QPN: 0x200, PSN: 20}
	pA.Local, pA.Remote, pB.Local, pB.Remote = epA, epB, epB, epA
	pA.AckTimeout = 30 * time.Second // A's SEND is never acknowledged: no retry in the test's time
	if err := qa.Connect(pA); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(pB); err != nil {
		t.Fatal(err)
	}
	recvA := a.buffer(64, memreg.AccessLocalWrite, false)
	recvB := b.buffer(64, memreg.AccessLocalWrite, false)
	mustPost(t, qa.PostReceive(0, []SGE{recvA.sge(0, 64)}))
	mustPost(t, qb.PostReceive(0, []SGE{recvB.sge(0, 64)}))
	srcA := a.buffer(64, 0, false)
	srcB := b.buffer(64, 0, false)
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{srcA.sge(0, 64)}}))
	mustPost(t, qb.PostSend(&SendWR{Op: OpSend, SGL: []SGE{srcB.sge(0, 64)}}))
	deadline := time.Now().Add(5 * time.Second)
	for a.eng.Stats().NotRC == 0 || b.eng.Stats().NotRC == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not_rc: A %d, B %d; want both counting", a.eng.Stats().NotRC, b.eng.Stats().NotRC)
		}
		time.Sleep(time.Millisecond)
	}
	if n := a.rcq.Len(); n != 0 {
		t.Fatalf("the RC QP received %d completions from a UC peer", n)
	}
	if n := b.rcq.Len(); n != 0 {
		t.Fatalf("the UC QP received %d completions from an RC peer", n)
	}
}

// TestUC_CapturedRxePingpong pins UC to rxe's frames: each UC SEND_ONLY
// rxe's ibv_uc_pingpong sent to QP 0x21 lands in a receive of our UC QP of
// that number, connected to rxe's QP at the PSN rxe started from; and the
// SEND our QP makes of the same size carries the BTH rxe's did, PSN aside.
func TestUC_CapturedRxePingpong(t *testing.T) {
	f, err := pcapfile.ReadFile(ucCapture)
	if err != nil {
		t.Fatal(err)
	}
	var toUs [][]byte
	var first, fromUs rocev2.Packet
	for _, r := range f.Packets {
		var p rocev2.Packet
		if rocev2.Parse(r.Data, &p) != nil || p.BTH.Opcode != rocev2.UCSendOnly {
			continue
		}
		switch p.BTH.DestQP {
		case 0x21:
			if len(toUs) == 0 {
				first = p
			}
			toUs = append(toUs, r.Data)
		case 0x22:
			fromUs = p
		}
	}
	if len(toUs) < 5 || fromUs.BTH.DestQP != 0x22 {
		t.Fatalf("%d UC SENDs to QP 0x21 in %s, and none to 0x22", len(toUs), ucCapture)
	}
	us, them := first.IP.Dst, first.IP.Src
	pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 64})
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, pipe.B(), us.String(), 1, &pairOptions{})
	h.mac = first.Eth.Dst
	q := h.createQPOf(0x21, 16, true)
	p := defaultParams(rocev2.MTU1024)
	p.Local = Endpoint{IP: us, MAC: h.mac, QPN: 0x21, PSN: uint32(fromUs.BTH.PSN)}
	p.Remote = Endpoint{IP: them, MAC: first.Eth.Src, QPN: 0x22, PSN: uint32(first.BTH.PSN)}
	if err := q.Connect(p); err != nil {
		t.Fatal(err)
	}
	bufs := make([]*buffer, len(toUs))
	for i := range toUs {
		bufs[i] = h.buffer(1024, memreg.AccessLocalWrite, false)
		mustPost(t, q.PostReceive(i, []SGE{bufs[i].sge(0, 1024)}))
	}
	for _, fr := range toUs {
		if err := pipe.A().Transmit([][]byte{fr}); err != nil {
			t.Fatal(err)
		}
	}
	_ = pipe.A().Flush()
	for i, e := range waitCQ(t, h.rcq, len(toUs), 5*time.Second) {
		if e.Status != ndkpi.StatusSuccess || e.BytesTransferred != 1024 || e.RequestContext != i {
			t.Fatalf("completion %d: %+v", i, e)
		}
		var rp rocev2.Packet
		if err := rocev2.Parse(toUs[i], &rp); err != nil {
			t.Fatal(err)
		}
		sameBytes(t, "payload", bufs[i].b, rp.Payload)
	}
	src := h.buffer(1024, 0, false)
	mustPost(t, q.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 1024)}}))
	waitCQ(t, h.scq, 1, 5*time.Second)
	var got []byte
	deadline := time.Now().Add(5 * time.Second)
	for got == nil && time.Now().Before(deadline) {
		var rx [4][]byte
		if n := pipe.A().Receive(rx[:]); n > 0 {
			got = append([]byte(nil), rx[0]...)
			pipe.A().Release()
		}
	}
	var ours rocev2.Packet
	if err := rocev2.Parse(got, &ours); err != nil {
		t.Fatalf("our SEND: %v", err)
	}
	ob, rb := ours.Frame[ours.BTHOffset:ours.BTHOffset+12], fromUs.Frame[fromUs.BTHOffset:fromUs.BTHOffset+12]
	if !bytes.Equal(ob[:9], rb[:9]) || ours.IP.Dst != them || uint32(ours.BTH.PSN) != uint32(fromUs.BTH.PSN) {
		t.Fatalf("our BTH % x to %v, rxe's % x to %v", ob, ours.IP.Dst, rb, them)
	}
}
