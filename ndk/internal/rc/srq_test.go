package rc

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// srqRig is two senders, each on a pipe of its own, whose peers are QPs
// on two receiving engines that share one SRQ (and one token table, as the
// engines of one adapter do).
type srqRig struct {
	senders [2]*host
	recv    [2]*Engine
	rqps    [2]*QP
	srq     *SRQ
	regions *memreg.Table
	rcq     *cq.CQ
	buf     []byte
	tok     memreg.Tokens
}

const srqMsg = 64

func newSRQRig(t *testing.T, depth int) *srqRig {
	t.Helper()
	regions, err := memreg.New(1024)
	if err != nil {
		t.Fatal(err)
	}
	r := &srqRig{regions: regions}
	r.rcq, _ = cq.New(1<<16, nil)
	scq, _ := cq.New(1<<16, nil)
	if r.srq, err = NewSRQ(SRQConfig{Regions: regions, PD: testPD, Depth: depth, MaxSGE: 1}); err != nil {
		t.Fatal(err)
	}
	r.buf = make([]byte, depth*srqMsg)
	if r.tok, err = regions.Register(memreg.Region{PD: testPD, VA: addrOf(r.buf), Buf: r.buf, Access: memreg.AccessLocalWrite}); err != nil {
		t.Fatal(err)
	}
	o := pairOptions{}
	for i := range 2 {
		pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 4096})
		if err != nil {
			t.Fatal(err)
		}
		s := newHost(t, pipe.A(), "198.18.0.1", 1, &o)
		r.senders[i] = s
		eng, err := NewEngine(Config{Port: pipe.B(), Regions: regions})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(eng.Close)
		r.recv[i] = eng
		sq := s.createQP(0x100, 256)
		rq, err := eng.CreateQP(QPConfig{QPN: 0x200, PD: testPD, RecvCQ: r.rcq, SendCQ: scq, Context: i,
			SendDepth: 16, MaxSendSGE: 1, MaxReadSGE: 1, SRQ: r.srq})
		if err != nil {
			t.Fatal(err)
		}
		r.rqps[i] = rq
		p := defaultParams(rocev2.MTU1024)
		ea := Endpoint{IP: s.ip, MAC: s.mac, QPN: sq.QPN(), PSN: 10}
		eb := Endpoint{IP: netip.MustParseAddr("198.18.0.2"), MAC: rocev2.MAC{2, 0, 0, 0, 0, 2}, QPN: rq.QPN(), PSN: 20}
		pa, pb := p, p
		pa.Local, pa.Remote = ea, eb
		pb.Local, pb.Remote = eb, ea
		if err := sq.Connect(pa); err != nil {
			t.Fatal(err)
		}
		if err := rq.Connect(pb); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// post queues receive slot i of the rig's buffer on the SRQ.
func (r *srqRig) post(t testing.TB, i int) {
	t.Helper()
	sge := SGE{Addr: addrOf(r.buf) + uint64(i*srqMsg), Length: srqMsg, Token: r.tok.Local}
	if st := r.srq.PostReceive(i, []SGE{sge}); st != ndkpi.StatusSuccess {
		t.Fatalf("SRQ receive %d: %#x", i, st)
	}
}

// TestSRQ_SharedAcrossEnginesEveryMessageOnce: QPs on two engines take
// receives from one SRQ at once (run with -race); every message lands in
// exactly one receive, intact, and each receive completes on the CQ of the
// QP that took it with that QP's context.
func TestSRQ_SharedAcrossEnginesEveryMessageOnce(t *testing.T) {
	const depth, perSender = 32, 600
	r := newSRQRig(t, depth)
	for i := range depth {
		r.post(t, i)
	}
	for s := range 2 {
		h := r.senders[s]
		src := h.buffer(perSender*8, 0, false)
		go func(s int) {
			for k := range perSender {
				binary.LittleEndian.PutUint32(src.b[k*8:], uint32(s))
				binary.LittleEndian.PutUint32(src.b[k*8+4:], uint32(k))
				for h.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(k*8, 8)}}) == ndkpi.StatusInsufficientResources {
					time.Sleep(50 * time.Microsecond)
				}
			}
		}(s)
	}
	next := [2]uint32{}
	perQP := [2]int{}
	deadline := time.Now().Add(30 * time.Second)
	var e cq.Entry
	for got := 0; got < 2*perSender; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages after 30s", got, 2*perSender)
		}
		if !r.rcq.Pop(&e) {
			time.Sleep(20 * time.Microsecond)
			continue
		}
		slot := e.RequestContext.(int)
		qp := e.QPContext.(int)
		if e.Status != ndkpi.StatusSuccess || e.BytesTransferred != 8 {
			t.Fatalf("receive %+v", e)
		}
		b := r.buf[slot*srqMsg:]
		s, k := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		if int(s) != qp {
			t.Fatalf("sender %d's message completed on QP %d", s, qp)
		}
		if k != next[s] {
			t.Fatalf("sender %d: message %d, want %d (lost, duplicated or reordered)", s, k, next[s])
		}
		next[s]++
		perQP[qp]++
		got++
		r.post(t, slot)
	}
	if perQP[0] != perSender || perQP[1] != perSender {
		t.Fatalf("per QP %v", perQP)
	}
}

// TestSRQ_RNROnlyWhenEmpty: a QP on an SRQ answers a SEND with an RNR NAK
// only when the SRQ holds no receive, and the SEND lands once one is
// posted.
func TestSRQ_RNROnlyWhenEmpty(t *testing.T) {
	r := newSRQRig(t, 4)
	r.post(t, 0)
	h := r.senders[0]
	src := h.buffer(16, 0, false)
	mustPost(t, h.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}}))
	waitCQ(t, r.rcq, 1, 5*time.Second)
	if n := r.recv[0].Stats().RNRSent; n != 0 {
		t.Fatalf("%d RNR NAKs with a receive on the SRQ", n)
	}
	mustPost(t, h.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(8, 8)}}))
	for deadline := time.Now().Add(5 * time.Second); r.recv[0].Stats().RNRSent == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK for a SEND on an empty SRQ")
		}
	}
	expectNone(t, r.rcq, 20*time.Millisecond)
	r.post(t, 1)
	if e := waitCQ(t, r.rcq, 1, 5*time.Second)[0]; e.Status != ndkpi.StatusSuccess || e.RequestContext != 1 {
		t.Fatalf("receive after the RNR: %+v", e)
	}
}

// TestSRQ_FailedQPLeavesReceivesToOthers: a QP on the SRQ that is flushed
// cancels nothing of the SRQ's; the other QP still receives.
func TestSRQ_FailedQPLeavesReceivesToOthers(t *testing.T) {
	r := newSRQRig(t, 4)
	r.post(t, 0)
	r.post(t, 1)
	r.rqps[0].Flush()
	expectNone(t, r.rcq, 20*time.Millisecond)
	if n := r.srq.Len(); n != 2 {
		t.Fatalf("SRQ holds %d receives after a QP's flush, want 2", n)
	}
	h := r.senders[1]
	src := h.buffer(8, 0, false)
	mustPost(t, h.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}}))
	if e := waitCQ(t, r.rcq, 1, 5*time.Second)[0]; e.Status != ndkpi.StatusSuccess || e.QPContext != 1 {
		t.Fatalf("other QP's receive: %+v", e)
	}
	if st := r.rqps[0].PostReceive(nil, nil); st != ndkpi.StatusInvalidDeviceRequest {
		t.Fatalf("PostReceive on a QP of an SRQ: %#x", st)
	}
}

// TestSRQ_LimitEventOncePerArm: the limit event fires once when the queued
// receives drop below the threshold, not again until Modify re-arms it,
// and at once if they are below when it does.
func TestSRQ_LimitEventOncePerArm(t *testing.T) {
	regions, _ := memreg.New(16)
	buf := make([]byte, 64)
	tok, _ := regions.Register(memreg.Region{PD: 1, VA: addrOf(buf), Buf: buf, Access: memreg.AccessLocalWrite})
	s, err := NewSRQ(SRQConfig{Regions: regions, PD: 1, Depth: 8, MaxSGE: 1, NotifyThreshold: 2})
	if err != nil {
		t.Fatal(err)
	}
	events := func() int {
		n := 0
		for {
			select {
			case <-s.Events():
				n++
			default:
				return n
			}
		}
	}
	if n := events(); n != 0 {
		t.Fatalf("new SRQ armed at 2: %d events before any receive was taken", n)
	}
	sge := []SGE{{Addr: addrOf(buf), Length: 64, Token: tok.Local}}
	for range 4 {
		mustPost(t, s.PostReceive(nil, sge))
	}
	var slot uint32
	for i, want := range []int{0, 0, 1, 0} { // 3, 2, 1 (below 2: fire), 0 (disarmed)
		if !s.take(&slot) {
			t.Fatal("take failed")
		}
		s.release(slot)
		if n := events(); n != want {
			t.Fatalf("after take %d: %d events, want %d", i+1, n, want)
		}
	}
	if st := s.Modify(0, 0); st != ndkpi.StatusSuccess || events() != 0 {
		t.Fatal("Modify with threshold 0 re-armed")
	}
	if st := s.Modify(0, 1); st != ndkpi.StatusSuccess || events() != 1 {
		t.Fatal("re-arm below the threshold did not fire at once")
	}
	for _, c := range []struct{ depth, threshold int }{{-1, 0}, {9, 0}, {4, 5}, {0, 9}} {
		if st := s.Modify(c.depth, c.threshold); st != ndkpi.StatusInvalidParameter {
			t.Errorf("Modify(%d, %d) = %#x, want InvalidParameter", c.depth, c.threshold, st)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = s.PostReceive(nil, sge)
		s.take(&slot)
		s.release(slot)
	}); n != 0 {
		t.Fatalf("SRQ post and take allocate %v", n)
	}
}

// TestSRQ_DepthCountsOutstandingReceives: the depth bounds the receives
// outstanding (queued, or taken and not completed); Modify lowers it only
// to that many or more and raises it up to Cap, and no slab slot is ever
// handed out twice.
func TestSRQ_DepthCountsOutstandingReceives(t *testing.T) {
	regions, _ := memreg.New(16)
	buf := make([]byte, 64)
	tok, _ := regions.Register(memreg.Region{PD: 1, VA: addrOf(buf), Buf: buf, Access: memreg.AccessLocalWrite})
	sge := []SGE{{Addr: addrOf(buf), Length: 64, Token: tok.Local}}
	s, err := NewSRQ(SRQConfig{Regions: regions, PD: 1, Depth: 6, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	post := func(n int, want ndkpi.Status) {
		t.Helper()
		for i := range n {
			if st := s.PostReceive(nil, sge); st != want {
				t.Fatalf("post %d: %#x, want %#x", i, st, want)
			}
		}
	}
	post(6, ndkpi.StatusSuccess)
	post(1, ndkpi.StatusInsufficientResources)
	var held [3]uint32
	for i := range held { // taken, not completed: still outstanding
		if !s.take(&held[i]) {
			t.Fatal("take")
		}
	}
	post(1, ndkpi.StatusInsufficientResources)
	if st := s.Modify(5, 0); st != ndkpi.StatusInvalidParameter {
		t.Fatalf("depth 5 with 6 outstanding: %#x", st)
	}
	for _, slot := range held {
		s.release(slot)
	}
	if st := s.Modify(3, 0); st != ndkpi.StatusSuccess {
		t.Fatalf("depth 3 with 3 outstanding: %#x", st)
	}
	post(1, ndkpi.StatusInsufficientResources)
	if st := s.Modify(s.Cap(), 0); st != ndkpi.StatusSuccess {
		t.Fatalf("depth %d: %#x", s.Cap(), st)
	}
	post(s.Cap()-3, ndkpi.StatusSuccess)
	post(1, ndkpi.StatusInsufficientResources)
	seen := map[uint32]bool{}
	var slot uint32
	for s.take(&slot) {
		if seen[slot] {
			t.Fatalf("slot %d queued twice", slot)
		}
		seen[slot] = true
	}
	if len(seen) != s.Cap() {
		t.Fatalf("%d distinct slots, want %d", len(seen), s.Cap())
	}
}
