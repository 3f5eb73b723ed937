package rc

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// wire records what crossed the pipe, in order, for tests that check
// packet-level behaviour; drop decides which frames to lose.
type wire struct {
	mu     sync.Mutex
	frames []wireFrame
	drop   func(dir porttest.Direction, p *rocev2.Packet, seen int) bool
	seen   map[rocev2.Opcode]int
}

type wireFrame struct {
	dir    porttest.Direction
	op     rocev2.Opcode
	psn    rocev2.PSN
	se     bool
	ackReq bool
	syn    rocev2.Syndrome
}

func (w *wire) filter(dir porttest.Direction, frame []byte) porttest.Verdict {
	var p rocev2.Packet
	if rocev2.Parse(frame, &p) != nil {
		return porttest.Pass
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = make(map[rocev2.Opcode]int)
	}
	n := w.seen[p.BTH.Opcode]
	w.seen[p.BTH.Opcode] = n + 1
	if w.drop != nil && w.drop(dir, &p, n) {
		return porttest.Drop
	}
	w.frames = append(w.frames, wireFrame{dir, p.BTH.Opcode, p.BTH.PSN, p.BTH.SE, p.BTH.AckReq, p.AETH.Syndrome})
	return porttest.Pass
}

func (w *wire) snapshot() []wireFrame {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireFrame(nil), w.frames...)
}

func newWiredPair(t *testing.T, w *wire, o pairOptions) (*host, *host) {
	o.pipe.Filter = w.filter
	return newPair(t, o)
}

func TestSend_NotConnectedReturnsConnectionInvalid(t *testing.T) {
	a, _ := newPair(t, pairOptions{noConnect: true})
	src := a.buffer(16, 0, false)
	for _, op := range []Op{OpSend, OpSendInvalidate, OpWrite, OpRead} {
		if st := a.qps[0].PostSend(&SendWR{Op: op, SGL: []SGE{src.sge(0, 16)}}); st != ndkpi.StatusConnectionInvalid {
			t.Fatalf("op %d on an unconnected QP: status %#x", op, st)
		}
	}
	// Receives are allowed before the connection (ND2 IND2QueuePair).
	dst := a.buffer(16, memreg.AccessLocalWrite, false)
	mustPost(t, a.qps[0].PostReceive(nil, []SGE{dst.sge(0, 16)}))
	expectNone(t, a.scq, 5*time.Millisecond)
}

func TestRNR_SendWaitsForReceive(t *testing.T) {
	a, b := newPair(t, pairOptions{params: func(p *ConnParams) { p.MinRNRTimer = rocev2.RNRTimerFor(200 * time.Microsecond) }})
	src := a.buffer(3000, 0, false)
	fill(src.b, 1)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 1, SGL: []SGE{src.sge(0, 3000)}}))
	time.Sleep(20 * time.Millisecond)
	var e cq.Entry
	if a.scq.Pop(&e) {
		t.Fatalf("send completed without a receive: %+v", e)
	}
	if b.eng.Stats().RNRSent == 0 || a.eng.Stats().RNRReceived == 0 {
		t.Fatalf("no RNR NAK exchanged: A %+v B %+v", a.eng.Stats(), b.eng.Stats())
	}
	dst := b.buffer(3000, memreg.AccessLocalWrite, false)
	mustPost(t, b.qps[0].PostReceive(2, []SGE{dst.sge(0, 3000)}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpSend, 1)
	r := waitCQ(t, b.rcq, 1, time.Second)[0]
	checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, 2)
	sameBytes(t, "after RNR", dst.b, src.b)
}

func TestRNR_RetryExhaustedTimesOut(t *testing.T) {
	// The ACK timeout is far beyond the test: with the helpers' 25 ms, a
	// stall of the loaded machine between a resend and its RNR NAK
	// (about 1 run in 400 under -race) timed the SEND out and resent it,
	// a fourth SEND that drew a fourth RNR NAK.
	a, b := newPair(t, pairOptions{params: func(p *ConnParams) { p.RNRRetry = 2; p.AckTimeout = time.Minute }})
	src := a.buffer(10, 0, false)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 1, SGL: []SGE{src.sge(0, 10)}}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 2, SGL: []SGE{src.sge(0, 10)}}))
	es := waitCQ(t, a.scq, 2, 5*time.Second)
	checkEntry(t, es[0], ndkpi.StatusIOTimeout, ndkpi.OpSend, 1)
	if es[0].ProviderErrorCode != wcRNRRetryExcErr {
		t.Fatalf("provider error %d, want RNR_RETRY_EXC_ERR", es[0].ProviderErrorCode)
	}
	checkEntry(t, es[1], ndkpi.StatusCancelled, ndkpi.OpSend, 2)
	if got := b.eng.Stats().RNRSent; got != 3 {
		t.Fatalf("responder sent %d RNR NAKs, want 3 (first try + 2 retries); requester %d timeouts", got, a.eng.Stats().Timeouts)
	}
	if a.qps[0].State() != StateError {
		t.Fatalf("state %v after retry exhaustion", a.qps[0].State())
	}
}

func TestAckTimeout_RetryExhaustedTimesOut(t *testing.T) {
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, _ int) bool { return dir == porttest.AtoB }}
	a, _ := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.RetryCount = 3; p.AckTimeout = time.Millisecond }})
	src := a.buffer(10, 0, false)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, Context: 1, SGL: []SGE{src.sge(0, 10)}}))
	e := waitCQ(t, a.scq, 1, 5*time.Second)[0]
	checkEntry(t, e, ndkpi.StatusIOTimeout, ndkpi.OpWrite, 1)
	if e.ProviderErrorCode != wcRetryExcErr {
		t.Fatalf("provider error %d", e.ProviderErrorCode)
	}
	if st := a.eng.Stats(); st.Timeouts != 4 || st.Retransmits != 3 {
		t.Fatalf("timeouts %d retransmits %d, want 4 and 3", st.Timeouts, st.Retransmits)
	}
	if w.seen[rocev2.RCWriteOnly] != 4 {
		t.Fatalf("WRITE sent %d times, want 4 (1 + RetryCount 3)", w.seen[rocev2.RCWriteOnly])
	}
}

func TestSequenceNAK_GoBackN(t *testing.T) {
	// Lose the third packet of a 10-packet SEND once.
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, n int) bool {
		return dir == porttest.AtoB && p.BTH.Opcode == rocev2.RCSendMiddle && n == 1
	}}
	a, b := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = time.Second }})
	src := a.buffer(10*1024, 0, false)
	dst := b.buffer(10*1024, memreg.AccessLocalWrite, false)
	fill(src.b, 3)
	mustPost(t, b.qps[0].PostReceive(nil, []SGE{dst.sge(0, 10*1024)}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 10*1024)}}))
	waitCQ(t, a.scq, 1, 500*time.Millisecond) // far below the ACK timeout: the NAK did it
	waitCQ(t, b.rcq, 1, time.Second)
	sameBytes(t, "after go-back-N", dst.b, src.b)
	if b.eng.Stats().NAKsSent != 1 || a.eng.Stats().NAKsReceived != 1 || a.eng.Stats().SequenceErrors != 1 {
		t.Fatalf("want exactly one sequence NAK: A %+v B %+v", a.eng.Stats(), b.eng.Stats())
	}
	var nak *wireFrame
	for _, f := range w.snapshot() {
		if f.op == rocev2.RCAck && f.syn.Type() == rocev2.AckTypeNAK {
			nak = &f
		}
	}
	if nak == nil || nak.syn.NAKCode() != rocev2.NAKPSNSequenceError {
		t.Fatalf("no PSN sequence error NAK on the wire")
	}
}

func TestDuplicateSend_ReacknowledgedNotReexecuted(t *testing.T) {
	// Lose the first ACK: the requester times out and resends; the
	// responder must acknowledge again without a second receive.
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, n int) bool {
		return dir == porttest.BtoA && p.BTH.Opcode == rocev2.RCAck && n == 0
	}}
	a, b := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = timeScale * 5 * time.Millisecond }})
	src := a.buffer(100, 0, false)
	dst := b.buffer(100, memreg.AccessLocalWrite, false)
	mustPost(t, b.qps[0].PostReceive(1, []SGE{dst.sge(0, 100)}))
	mustPost(t, b.qps[0].PostReceive(2, []SGE{dst.sge(0, 100)}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 100)}}))
	waitCQ(t, a.scq, 1, time.Second)
	waitCQ(t, b.rcq, 1, time.Second)
	expectNone(t, b.rcq, 10*time.Millisecond)
	if b.eng.Stats().Duplicates == 0 {
		t.Fatal("responder saw no duplicate")
	}
}

func TestDuplicateRead_Reexecuted(t *testing.T) {
	// Lose the second response packet of a 4-packet READ once.
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, n int) bool {
		return dir == porttest.BtoA && p.BTH.Opcode == rocev2.RCReadResponseMiddle && n == 0
	}}
	a, b := newWiredPair(t, w, pairOptions{})
	sink := a.buffer(4096, memreg.AccessLocalWrite, false)
	src := b.buffer(4096, memreg.AccessRemoteRead, false)
	fill(src.b, 4)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, Context: 1, SGL: []SGE{sink.sge(0, 4096)},
		RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpRead, 1)
	sameBytes(t, "read", sink.b, src.b)
	if b.eng.Stats().Duplicates == 0 {
		t.Fatal("responder saw no duplicate READ")
	}
	reqs := 0
	for _, f := range w.snapshot() {
		if f.op == rocev2.RCReadRequest {
			reqs++
		}
	}
	if reqs < 2 {
		t.Fatalf("READ requested %d times", reqs)
	}
}

func TestAckRequestedOnLastPacketAndCoalesced(t *testing.T) {
	w := &wire{}
	a, b := newWiredPair(t, w, pairOptions{})
	const n = 100 * 1024 // 100 packets at 1024
	src := a.buffer(n, 0, false)
	dst := b.buffer(n, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, n)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	waitCQ(t, a.scq, 1, time.Second)
	reqs, acks, ackReqs := 0, 0, 0
	var last wireFrame
	for _, f := range w.snapshot() {
		switch {
		case f.dir == porttest.AtoB:
			reqs++
			last = f
			if f.ackReq {
				ackReqs++
			}
		case f.op == rocev2.RCAck:
			acks++
		}
	}
	if reqs != 100 || last.op != rocev2.RCWriteLast || !last.ackReq {
		t.Fatalf("%d request packets, last %+v", reqs, last)
	}
	if ackReqs < 100/ackEvery || ackReqs > 100/ackEvery+1 {
		t.Fatalf("%d packets asked for an ACK, want one per %d and the last", ackReqs, ackEvery)
	}
	if acks == 0 || acks > ackReqs {
		t.Fatalf("%d ACKs for %d AckReqs: ACKs must be coalesced", acks, ackReqs)
	}
}

func TestSend_SolicitEventSetsSEOnLastPacket(t *testing.T) {
	w := &wire{}
	a, b := newWiredPair(t, w, pairOptions{})
	src := a.buffer(2500, 0, false)
	dst := b.buffer(2500, memreg.AccessLocalWrite, false)
	for i := 0; i < 2; i++ {
		mustPost(t, b.qps[0].PostReceive(i, []SGE{dst.sge(0, 2500)}))
	}
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 2500)}}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Flags: ndkpi.OpFlagSendAndSolicitEvent, SGL: []SGE{src.sge(0, 2500)}}))
	rs := waitCQ(t, b.rcq, 2, time.Second)
	if rs[0].Solicited || !rs[1].Solicited {
		t.Fatalf("solicited marks %v %v, want false true", rs[0].Solicited, rs[1].Solicited)
	}
	var ses []bool
	for _, f := range w.snapshot() {
		if f.dir == porttest.AtoB {
			ses = append(ses, f.se)
		}
	}
	want := []bool{false, false, false, false, false, true} // 3 packets each; SE only on the last
	if len(ses) != len(want) {
		t.Fatalf("%d packets", len(ses))
	}
	for i := range want {
		if ses[i] != want[i] {
			t.Fatalf("SE bits %v, want %v", ses, want)
		}
	}
}

func TestSend_SilentSuccessCompletesOnlyOnFailure(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	src := a.buffer(64, 0, false)
	dst := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
	wr := SendWR{Op: OpWrite, Flags: ndkpi.OpFlagSilentSuccess, SGL: []SGE{src.sge(0, 64)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}
	for i := 0; i < 10; i++ {
		wr.Context = i
		mustPost(t, a.qps[0].PostSend(&wr))
	}
	wr.Flags, wr.Context = 0, 10
	mustPost(t, a.qps[0].PostSend(&wr))
	checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, 10)
	expectNone(t, a.scq, 5*time.Millisecond)
	// A silent request that fails still completes.
	wr.Flags, wr.Context, wr.RemoteToken = ndkpi.OpFlagSilentSuccess, 11, dst.tokens.Remote^0xff
	mustPost(t, a.qps[0].PostSend(&wr))
	checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusAccessViolation, ndkpi.OpWrite, 11)
}

func TestSend_ReadFenceWaitsForReads(t *testing.T) {
	for _, fence := range []bool{false, true} {
		w := &wire{}
		if !fence {
			// Without the fence the SEND must not wait for the READ. To
			// see that whatever the scheduling, the READ request is lost
			// until the SEND has gone out: a SEND held back for the READ
			// would never leave, and the test would time out.
			w.drop = func(dir porttest.Direction, p *rocev2.Packet, _ int) bool {
				return dir == porttest.AtoB && p.BTH.Opcode == rocev2.RCReadRequest && w.seen[rocev2.RCSendOnly] == 0
			}
		}
		a, b := newWiredPair(t, w, pairOptions{})
		sink := a.buffer(8192, memreg.AccessLocalWrite, false)
		src := b.buffer(8192, memreg.AccessRemoteRead, false)
		msg := a.buffer(16, 0, false)
		dst := b.buffer(16, memreg.AccessLocalWrite, false)
		mustPost(t, b.qps[0].PostReceive(nil, []SGE{dst.sge(0, 16)}))
		flags := ndkpi.OpFlag(0)
		if fence {
			flags = ndkpi.OpFlagReadFence
		}
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, Flags: ndkpi.OpFlagDefer, SGL: []SGE{sink.sge(0, 8192)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Flags: flags, SGL: []SGE{msg.sge(0, 16)}}))
		waitCQ(t, a.scq, 2, time.Second)
		// The first of each: a stall longer than the ACK timeout (the
		// race detector on a loaded machine) resends the SEND after the
		// READ's responses, which says nothing of when it first left.
		sendAt, lastRespAt := -1, -1
		for i, f := range w.snapshot() {
			switch {
			case f.op == rocev2.RCSendOnly && sendAt < 0:
				sendAt = i
			case f.op == rocev2.RCReadResponseLast && lastRespAt < 0:
				lastRespAt = i
			}
		}
		if fence != (sendAt > lastRespAt) {
			t.Fatalf("fence %v: SEND at %d, last READ response at %d", fence, sendAt, lastRespAt)
		}
	}
}

func TestOutboundReadLimit(t *testing.T) {
	w := &wire{}
	a, b := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.OutboundReadLimit = 2 }})
	sink := a.buffer(4*4096, memreg.AccessLocalWrite, false)
	src := b.buffer(4096, memreg.AccessRemoteRead, false)
	for i := 0; i < 4; i++ {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, Flags: ndkpi.OpFlagDefer, SGL: []SGE{sink.sge(i*4096, 4096)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	}
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, SGL: []SGE{sink.sge(0, 1)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	waitCQ(t, a.scq, 5, time.Second)
	out, peak := 0, 0
	for _, f := range w.snapshot() {
		switch f.op {
		case rocev2.RCReadRequest:
			out++
			peak = max(peak, out)
		case rocev2.RCReadResponseLast, rocev2.RCReadResponseOnly:
			out--
		}
	}
	if peak != 2 {
		t.Fatalf("peak of %d READs in flight, want the limit 2", peak)
	}
}

func TestInboundReadLimitEnforced(t *testing.T) {
	// A requester that ignores the responder's limit gets an invalid
	// request NAK (more READs than responder resources).
	a, b := newPair(t, pairOptions{
		params:  func(p *ConnParams) { p.OutboundReadLimit = 8 },
		paramsB: func(p *ConnParams) { p.InboundReadLimit = 1 },
	})
	sink := a.buffer(64*1024, memreg.AccessLocalWrite, false)
	src := b.buffer(64*1024, memreg.AccessRemoteRead, false)
	for i := 0; i < 4; i++ {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, Context: i, Flags: ndkpi.OpFlagDefer, SGL: []SGE{sink.sge(0, 64*1024)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	}
	a.qps[0].doorbell()
	// Which READ overruns depends on how fast the responder drains the
	// earlier ones; the first always succeeds, one fails with the
	// invalid request NAK, and those after it are cancelled.
	es := waitCQ(t, a.scq, 4, time.Second)
	failed := -1
	for i, e := range es {
		switch {
		case failed < 0 && e.Status == ndkpi.StatusSuccess:
		case failed < 0 && e.Status == ndkpi.StatusRemoteResources && e.ProviderErrorCode == wcRemInvReqErr:
			failed = i
		case failed >= 0 && e.Status == ndkpi.StatusCancelled:
		default:
			t.Fatalf("completion %d: %+v", i, e)
		}
	}
	if failed < 1 {
		t.Fatalf("no READ failed after the first: %+v", es)
	}
	if b.qps[0].State() != StateError {
		t.Fatalf("responder state %v", b.qps[0].State())
	}
}

func TestSend_DeferBatchesDoorbell(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	src := a.buffer(8, 0, false)
	dst := b.buffer(8, memreg.AccessLocalWrite, false)
	for i := 0; i < 3; i++ {
		mustPost(t, b.qps[0].PostReceive(i, []SGE{dst.sge(0, 8)}))
	}
	time.Sleep(time.Millisecond)
	out := a.eng.Stats().FramesOut
	for i := 0; i < 2; i++ {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Flags: ndkpi.OpFlagDefer, Context: i, SGL: []SGE{src.sge(0, 8)}}))
	}
	expectNone(t, a.scq, 20*time.Millisecond)
	if got := a.eng.Stats().FramesOut; got != out {
		t.Fatalf("%d frames left before the chain ended", got-out)
	}
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 2, SGL: []SGE{src.sge(0, 8)}}))
	es := waitCQ(t, a.scq, 3, time.Second)
	for i, e := range es {
		checkEntry(t, e, ndkpi.StatusSuccess, ndkpi.OpSend, i)
	}
}

func TestSend_InlineFailureRingsDeferredDoorbell(t *testing.T) {
	a, b := newPair(t, pairOptions{depth: 2})
	src := a.buffer(8, 0, false)
	dst := b.buffer(8, memreg.AccessLocalWrite, false)
	for i := 0; i < 2; i++ {
		mustPost(t, b.qps[0].PostReceive(i, []SGE{dst.sge(0, 8)}))
	}
	for i := 0; i < 2; i++ {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Flags: ndkpi.OpFlagDefer, Context: i, SGL: []SGE{src.sge(0, 8)}}))
	}
	// The ring is full: an inline failure without a CQE, which submits
	// the deferred chain (NDKPI.md §8).
	if st := a.qps[0].PostSend(&SendWR{Op: OpSend, Flags: ndkpi.OpFlagDefer, SGL: []SGE{src.sge(0, 8)}}); st != ndkpi.StatusInsufficientResources {
		t.Fatalf("full ring: status %#x", st)
	}
	es := waitCQ(t, a.scq, 2, time.Second)
	checkEntry(t, es[0], ndkpi.StatusSuccess, ndkpi.OpSend, 0)
	checkEntry(t, es[1], ndkpi.StatusSuccess, ndkpi.OpSend, 1)
	expectNone(t, a.scq, 5*time.Millisecond)
}

func TestSend_InlineIgnoresTokenAndSgeLimit(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	a.qps[0].cfg.MaxSendSGE = 1
	raw := make([]byte, 200) // never registered
	fill(raw, 5)
	sgl := []SGE{
		{Addr: addrOf(raw), Length: 100, Token: 0xdeadbeef},
		{Addr: addrOf(raw[100:]), Length: 100, Token: 0},
	}
	dst := b.buffer(200, memreg.AccessLocalWrite, false)
	mustPost(t, b.qps[0].PostReceive(nil, []SGE{dst.sge(0, 200)}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Flags: ndkpi.OpFlagInline, Context: 1, SGL: sgl}))
	clear(raw) // inline data was taken at post time
	checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpSend, 1)
	waitCQ(t, b.rcq, 1, time.Second)
	want := make([]byte, 200)
	fill(want, 5)
	sameBytes(t, "inline", dst.b, want)
}

func TestSend_InlineOverLimitRejected(t *testing.T) {
	a, _ := newPair(t, pairOptions{})
	a.qps[0].cfg.InlineSize = 64
	raw := make([]byte, 65)
	if st := a.qps[0].PostSend(&SendWR{Op: OpSend, Flags: ndkpi.OpFlagInline, SGL: []SGE{{Addr: addrOf(raw), Length: 65}}}); st != ndkpi.StatusInvalidParameter {
		t.Fatalf("65 inline bytes over a 64-byte limit: status %#x", st)
	}
	if st := a.qps[0].PostSend(&SendWR{Op: OpSend, Flags: ndkpi.OpFlagInline, SGL: []SGE{{Addr: 0, Length: 8}}}); st != ndkpi.StatusInvalidParameter {
		t.Fatalf("inline from address 0: status %#x", st)
	}
	expectNone(t, a.scq, 5*time.Millisecond)
}

func TestPost_RejectsTooManySGEs(t *testing.T) {
	a, _ := newPair(t, pairOptions{})
	a.qps[0].cfg.MaxSendSGE = 2
	a.qps[0].cfg.MaxRecvSGE = 2
	src := a.buffer(8, memreg.AccessLocalWrite, false)
	sgl := []SGE{src.sge(0, 1), src.sge(1, 1), src.sge(2, 1)}
	if st := a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: sgl}); st != ndkpi.StatusInvalidParameter {
		t.Fatalf("3 SGEs over 2: %#x", st)
	}
	if st := a.qps[0].PostReceive(nil, sgl); st != ndkpi.StatusInvalidParameter {
		t.Fatalf("receive with 3 SGEs over 2: %#x", st)
	}
}

func TestPost_BadLocalTokenRejected(t *testing.T) {
	a, _ := newPair(t, pairOptions{})
	src := a.buffer(8, 0, false)
	bad := src.sge(0, 8)
	bad.Token ^= 0xff
	if st := a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{bad}}); st != ndkpi.StatusAccessViolation {
		t.Fatalf("bad token: %#x", st)
	}
	if st := a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(4, 8)}}); st != ndkpi.StatusAccessViolation {
		t.Fatalf("out of bounds: %#x", st)
	}
	// A receive needs local write; a READ sink too.
	if st := a.qps[0].PostReceive(nil, []SGE{src.sge(0, 8)}); st != ndkpi.StatusAccessViolation {
		t.Fatalf("receive into read-only memory: %#x", st)
	}
	if st := a.qps[0].PostSend(&SendWR{Op: OpRead, SGL: []SGE{src.sge(0, 8)}}); st != ndkpi.StatusAccessViolation {
		t.Fatalf("read into read-only memory: %#x", st)
	}
}

func TestSend_DoesNotBlockWhenQueueFull(t *testing.T) {
	// Nobody answers: the ring fills and posting returns at once.
	w := &wire{drop: func(porttest.Direction, *rocev2.Packet, int) bool { return true }}
	a, _ := newWiredPair(t, w, pairOptions{depth: 4, params: func(p *ConnParams) { p.AckTimeout = time.Hour }})
	src := a.buffer(8, 0, false)
	for i := 0; i < 4; i++ {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}}))
	}
	start := time.Now()
	if st := a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}}); st != ndkpi.StatusInsufficientResources {
		t.Fatalf("full: %#x", st)
	}
	if d := time.Since(start); d > 10*time.Millisecond {
		t.Fatalf("a post on a full queue took %v", d)
	}
	expectNone(t, a.scq, 5*time.Millisecond)
}

func TestFlush_CancelsEveryPendingRequest(t *testing.T) {
	w := &wire{drop: func(dir porttest.Direction, _ *rocev2.Packet, _ int) bool { return dir == porttest.AtoB }}
	a, _ := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = time.Hour }})
	src := a.buffer(8, memreg.AccessLocalWrite, false)
	for i := 0; i < 5; i++ {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: i, SGL: []SGE{src.sge(0, 8)}}))
		mustPost(t, a.qps[0].PostReceive(i, []SGE{src.sge(0, 8)}))
	}
	a.qps[0].Flush()
	ss := waitCQ(t, a.scq, 5, time.Second)
	rs := waitCQ(t, a.rcq, 5, time.Second)
	for i := 0; i < 5; i++ {
		checkEntry(t, ss[i], ndkpi.StatusCancelled, ndkpi.OpSend, i)
		checkEntry(t, rs[i], ndkpi.StatusCancelled, ndkpi.OpReceive, i)
	}
	if a.qps[0].State() != StateError {
		t.Fatalf("state %v", a.qps[0].State())
	}
	// Later requests complete CANCELLED too.
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 9, Flags: ndkpi.OpFlagSilentSuccess, SGL: []SGE{src.sge(0, 8)}}))
	checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusCancelled, ndkpi.OpSend, 9)
	mustPost(t, a.qps[0].PostReceive(9, []SGE{src.sge(0, 8)}))
	checkEntry(t, waitCQ(t, a.rcq, 1, time.Second)[0], ndkpi.StatusCancelled, ndkpi.OpReceive, 9)
}

func TestClose_CancelsAndRejects(t *testing.T) {
	w := &wire{drop: func(porttest.Direction, *rocev2.Packet, int) bool { return true }}
	a, _ := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = time.Hour }})
	src := a.buffer(8, 0, false)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 1, SGL: []SGE{src.sge(0, 8)}}))
	if err := a.qps[0].Close(); err != nil {
		t.Fatal(err)
	}
	checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusCancelled, ndkpi.OpSend, 1)
	if st := a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}}); st != ndkpi.StatusInvalidHandle {
		t.Fatalf("post after close: %#x", st)
	}
}

func TestManyQPs(t *testing.T) {
	const nqp = 64
	a, b := newPair(t, pairOptions{qps: nqp})
	var wg sync.WaitGroup
	var fails atomic.Int32
	srcs := make([]*buffer, nqp)
	dsts := make([]*buffer, nqp)
	for i := 0; i < nqp; i++ {
		srcs[i] = a.buffer(5000, 0, false)
		fill(srcs[i].b, uint64(i))
		dsts[i] = b.buffer(5000*4, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
		for k := 0; k < 4; k++ {
			mustPost(t, b.qps[i].PostReceive(k, []SGE{dsts[i].sge(k*5000, 5000)}))
		}
	}
	for i := 0; i < nqp; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for k := 0; k < 4; k++ {
				if a.qps[i].PostSend(&SendWR{Op: OpSend, Context: k, SGL: []SGE{srcs[i].sge(0, 5000)}}) != ndkpi.StatusSuccess {
					fails.Add(1)
				}
			}
		}(i)
	}
	wg.Wait()
	if fails.Load() != 0 {
		t.Fatalf("%d posts failed", fails.Load())
	}
	ss := waitCQ(t, a.scq, 4*nqp, 10*time.Second)
	rs := waitCQ(t, b.rcq, 4*nqp, 10*time.Second)
	next := map[any]int{}
	for _, e := range rs {
		if e.Status != ndkpi.StatusSuccess || e.BytesTransferred != 5000 {
			t.Fatalf("receive %+v", e)
		}
		if e.RequestContext != next[e.QPContext] {
			t.Fatalf("QP %v: receive %v out of order", e.QPContext, e.RequestContext)
		}
		next[e.QPContext]++
	}
	for _, e := range ss {
		if e.Status != ndkpi.StatusSuccess {
			t.Fatalf("send %+v", e)
		}
	}
	for i := 0; i < nqp; i++ {
		for k := 0; k < 4; k++ {
			sameBytes(t, "qp", dsts[i].b[k*5000:(k+1)*5000], srcs[i].b)
		}
	}
}
