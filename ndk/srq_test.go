package ndk

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
)

// srqSides is n connected QP pairs over one in-memory pipe: x's QPs have
// receive queues of their own, y's take their receives from one SRQ (or,
// with srq false, have their own too).
type srqSides struct {
	x, y     *side
	xqps     []*QP
	yqps     []*QP
	srq      *SRQ
	recv     []byte
	recvMR   *MR
	msg      int
	ctxs     []any // each slot's RequestContext, boxed once
	primed   bool  // BenchmarkSRQReceiveRate posted every slot
	notified chan Status
}

func newSRQSides(t testing.TB, n, depth, msg int, srq bool) *srqSides {
	t.Helper()
	p, err := porttest.NewPipe(porttest.PipeConfig{Depth: 4096})
	if err != nil {
		t.Fatal(err)
	}
	s := &srqSides{msg: msg, notified: make(chan Status, 16)}
	s.x = newSide(t, pipeAdapter(t, p.A(), "198.18.0.1", 1))
	s.y = newSide(t, pipeAdapter(t, p.B(), "198.18.0.2", 2))
	for _, d := range []*side{s.x, s.y} {
		_ = d.qp.Close()
		for _, c := range []**CQ{&d.rcq, &d.icq} {
			if *c, err = d.a.CreateCQ(1<<16, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if srq {
		if s.srq, err = s.y.pd.CreateSRQ(depth, 1, 0, func(st Status) { s.notified <- st }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		xq, err := s.x.pd.CreateQP(QPConfig{ReceiveCQ: s.x.rcq, InitiatorCQ: s.x.icq, Context: i,
			ReceiveQueueDepth: 1, InitiatorQueueDepth: 256, MaxInitiatorRequestSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		cfg := QPConfig{ReceiveCQ: s.y.rcq, InitiatorCQ: s.y.icq, Context: i, InitiatorQueueDepth: 4, SRQ: s.srq}
		if !srq {
			cfg.ReceiveQueueDepth, cfg.MaxReceiveRequestSGE = max(depth/n, 1), 1
		}
		yq, err := s.y.pd.CreateQP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := xq.ConnectOOB(yq.LocalEndpoint(), ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := yq.ConnectOOB(xq.LocalEndpoint(), ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		s.xqps, s.yqps = append(s.xqps, xq), append(s.yqps, yq)
	}
	s.recv = make([]byte, depth*msg)
	for i := range depth {
		s.ctxs = append(s.ctxs, i)
	}
	if s.recvMR, err = s.y.pd.RegisterMR(s.recv, MRFlagAllowLocalWrite); err != nil {
		t.Fatal(err)
	}
	return s
}

// post posts receive slot i: on the SRQ, or on y's QP qp.
func (s *srqSides) post(slot, qp int) error {
	sge, _ := s.recvMR.SGE(slot*s.msg, s.msg)
	if s.srq != nil {
		return s.srq.Receive(s.ctxs[slot], []SGE{sge})
	}
	return s.yqps[qp].Receive(s.ctxs[slot], []SGE{sge})
}

// TestSRQ_CreateChecksLimits: NdkCreateSrq's values over their limits, and
// NdkCreateQpWithSrq's, are STATUS_INVALID_PARAMETER.
func TestSRQ_CreateChecksLimits(t *testing.T) {
	x, y := pipePair(t, false)
	info := x.a.Info()
	if info.MaxSRQDepth == 0 {
		t.Fatal("MaxSRQDepth is 0: the adapter reports no SRQ support")
	}
	for name, c := range map[string][3]int{
		"DepthZero":        {0, 1, 0},
		"DepthOverMax":     {int(info.MaxSRQDepth) + 1, 1, 0},
		"SGEOverMax":       {16, int(info.MaxReceiveRequestSGE) + 1, 0},
		"ThresholdOverMax": {16, 1, 17},
		"Negative":         {16, -1, 0},
	} {
		if _, err := x.pd.CreateSRQ(c[0], c[1], c[2], nil); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("%s: %v", name, err)
		}
	}
	srq, err := x.pd.CreateSRQ(16, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	otherPD, _ := y.a.CreatePD()
	otherSRQ, _ := otherPD.CreateSRQ(4, 1, 0, nil)
	defer otherSRQ.Close()
	base := QPConfig{ReceiveCQ: x.rcq, InitiatorCQ: x.icq, InitiatorQueueDepth: 1, SRQ: srq}
	for name, mod := range map[string]func(*QPConfig){
		"ReceiveDepth": func(c *QPConfig) { c.ReceiveQueueDepth = 1 },
		"ReceiveSGE":   func(c *QPConfig) { c.MaxReceiveRequestSGE = 1 },
		"OtherPD":      func(c *QPConfig) { c.SRQ = otherSRQ },
	} {
		cfg := base
		mod(&cfg)
		if _, err := x.pd.CreateQP(cfg); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("CreateQP with SRQ, %s: %v", name, err)
		}
	}
	qp, err := x.pd.CreateQP(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Receive(nil, nil); !errors.Is(err, ErrInvalidDeviceRequest) {
		t.Fatalf("Receive on a QP of an SRQ: %v", err)
	}
	_ = qp.Close()
}

// TestSRQ_ReceivesSharedByQPs: receives posted once on the SRQ serve SENDs
// arriving on several QPs; each completion is on the receiving QP's CQ
// with its context, and the SRQ's depth bounds the posts.
func TestSRQ_ReceivesSharedByQPs(t *testing.T) {
	s := newSRQSides(t, 4, 8, 64, true)
	for i := range 8 {
		if err := s.post(i, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.post(0, 0); !errors.Is(err, ErrInsufficientResources) {
		t.Fatalf("ninth receive on a depth-8 SRQ: %v", err)
	}
	src := make([]byte, 64)
	smr, _ := s.x.pd.RegisterMR(src, 0)
	ss, _ := smr.SGE(0, 8)
	for i, q := range s.xqps {
		src[i] = byte(i)
		if err := q.Send(nil, []SGE{ss}, 0); err != nil {
			t.Fatal(err)
		}
		r := waitResult(t, s.y.rcq)
		if r.Status != StatusSuccess || r.QPContext != i || r.BytesTransferred != 8 || r.Type != OpReceive {
			t.Fatalf("QP %d's receive: %+v", i, r)
		}
	}
	if n := s.srq.Len(); n != 4 {
		t.Fatalf("SRQ holds %d receives after 4 SENDs, want 4", n)
	}
}

// TestSRQ_NotificationOncePerArm: the SRQ notification fires once when the
// queued receives drop below NotifyThreshold and again only after
// NdkModifySrq re-arms it (at once if they are already below).
func TestSRQ_NotificationOncePerArm(t *testing.T) {
	s := newSRQSides(t, 1, 8, 64, true)
	for i := range 4 {
		if err := s.post(i, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.srq.Modify(0, 3); err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 8)
	smr, _ := s.x.pd.RegisterMR(src, 0)
	ss, _ := smr.SGE(0, 8)
	expect := func(n int) {
		t.Helper()
		for i := range n {
			select {
			case st := <-s.notified:
				if st != StatusSuccess {
					t.Fatalf("notification status %v", st)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("notification %d of %d missing", i+1, n)
			}
		}
		select {
		case <-s.notified:
			t.Fatal("a notification more than the arms")
		case <-time.After(20 * time.Millisecond):
		}
	}
	for range 3 { // 4 -> 3 -> 2 (below 3: fire) -> 1
		if err := s.xqps[0].Send(nil, []SGE{ss}, 0); err != nil {
			t.Fatal(err)
		}
		waitResult(t, s.y.rcq)
	}
	expect(1)
	if err := s.srq.Modify(0, 0); err != nil {
		t.Fatal(err)
	}
	expect(0) // 0 keeps the arming, which is spent
	if err := s.srq.Modify(16, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("depth above Cap: %v", err)
	}
	if err := s.srq.Modify(0, 2); err != nil {
		t.Fatal(err)
	}
	expect(1) // 1 queued, already below 2
}

// TestSRQ_CloseRules: an SRQ closed while a QP uses it pends until the QP
// closes; posts fail at once; no QP can be created on it; its PD's close
// waits for it.
func TestSRQ_CloseRules(t *testing.T) {
	s := newSRQSides(t, 1, 8, 64, true)
	if err := s.post(0, 0); err != nil {
		t.Fatal(err)
	}
	s.y.pd.Close()
	s.srq.Close()
	if err := s.post(1, 0); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("receive on a closed SRQ: %v", err)
	}
	if err := s.srq.Modify(0, 1); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("modify of a closed SRQ: %v", err)
	}
	select {
	case <-s.srq.Closed():
		t.Fatal("SRQ close completed with a QP on it")
	case <-time.After(10 * time.Millisecond):
	}
	_ = s.yqps[0].Close()
	select {
	case <-s.srq.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("SRQ close did not complete when its last QP closed")
	}
	if err := s.recvMR.Deregister(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.y.pd.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("PD close did not complete after its SRQ and MR closed")
	}
}

// TestSRQReceiveAllocatesNothing: NdkSrqReceive and the SRQ receive path
// allocate nothing.
func TestSRQReceiveAllocatesNothing(t *testing.T) {
	s := newSRQSides(t, 1, 8, 64, true)
	src := make([]byte, 64)
	smr, _ := s.x.pd.RegisterMR(src, 0)
	ssgl := []SGE{{}}
	ssgl[0], _ = smr.SGE(0, 64)
	var rs [4]Result
	round := func() {
		if err := s.post(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.xqps[0].Send(nil, ssgl, OpFlagSilentSuccess); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); s.y.rcq.GetResults(rs[:]) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("no receive")
			}
		}
	}
	round()
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("SRQ receive round allocates %v", n)
	}
}

// TestSRQ_AdapterCloseWaitsForNotification: the adapter's close returns
// only after a running SRQ notification callback has (NDKPI.md §8), and
// none follows.
func TestSRQ_AdapterCloseWaitsForNotification(t *testing.T) {
	s := newSRQSides(t, 1, 8, 64, true)
	if err := s.post(0, 0); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	srq, err := s.y.pd.CreateSRQ(4, 1, 0, func(Status) {
		calls.Add(1)
		close(entered)
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srq.Modify(0, 1); err != nil { // empty: fires at once
		t.Fatal(err)
	}
	<-entered
	closed := make(chan struct{})
	go func() { s.y.a.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("adapter close returned while an SRQ callback ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("adapter close did not return after the callback")
	}
	select {
	case <-srq.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("the adapter's close left the SRQ open")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d callbacks", n)
	}
}
