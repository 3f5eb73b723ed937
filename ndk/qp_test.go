package ndk

import (
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// pipeAdapter opens an adapter whose one engine runs over an in-memory
// pipe end instead of AF_XDP: the public API without privileges.
func pipeAdapter(t testing.TB, end port.Port, ip string, mac byte) *Adapter {
	t.Helper()
	return pipeAdapterWith(t, end, ip, mac, Options{})
}

// pipeAdapterWith is pipeAdapter with opts.
func pipeAdapterWith(t testing.TB, end port.Port, ip string, mac byte, opts Options) *Adapter {
	t.Helper()
	a, err := newAdapter(defaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	link := inproc.Link{Addr: netip.MustParseAddr(ip), MAC: rocev2.MAC{2, 0, 0, 0, 0, mac}, MTU: 1500, PathMTU: rocev2.MTU1024}
	p, err := inproc.OverPort(end, link, providerConfig(opts, a.regions))
	if err != nil {
		t.Fatal(err)
	}
	a.attach(p)
	t.Cleanup(a.Close)
	return a
}

type side struct {
	a        *Adapter
	pd       *PD
	rcq, icq *CQ
	qp       *QP
}

func newSide(t testing.TB, a *Adapter) *side {
	t.Helper()
	s := &side{a: a}
	var err error
	if s.pd, err = a.CreatePD(); err != nil {
		t.Fatal(err)
	}
	if s.rcq, err = a.CreateCQ(1024, nil); err != nil {
		t.Fatal(err)
	}
	if s.icq, err = a.CreateCQ(1024, nil); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = s.pd.CreateQP(QPConfig{ReceiveCQ: s.rcq, InitiatorCQ: s.icq, Context: "qp",
		ReceiveQueueDepth: 64, InitiatorQueueDepth: 64, MaxReceiveRequestSGE: 4, MaxInitiatorRequestSGE: 4, InlineDataSize: 128}); err != nil {
		t.Fatal(err)
	}
	return s
}

// vethSide opens an adapter on a harness host's link, closed with the
// test, and gives it a side.
func vethSide(t testing.TB, h *harness.Host) *side {
	t.Helper()
	var a *Adapter
	if err := h.Do(func() error {
		var err error
		a, err = Open(h.Link, Options{})
		return err
	}); err != nil {
		t.Fatalf("open %s: %v", h.Name, err)
	}
	t.Cleanup(a.Close)
	return newSide(t, a)
}

// connectSides connects x's QP and y's to each other out of band.
func connectSides(t testing.TB, x, y *side) {
	t.Helper()
	if err := x.qp.ConnectOOB(y.qp.LocalEndpoint(), ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.ConnectOOB(x.qp.LocalEndpoint(), ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
}

func pipePair(t testing.TB, connect bool) (*side, *side) {
	t.Helper()
	return pipePairWith(t, connect, Options{})
}

// pipePairWith is pipePair with opts on both adapters.
func pipePairWith(t testing.TB, connect bool, opts Options) (*side, *side) {
	t.Helper()
	p, err := porttest.NewPipe(porttest.PipeConfig{Depth: 1024})
	if err != nil {
		t.Fatal(err)
	}
	x := newSide(t, pipeAdapterWith(t, p.A(), "198.18.0.1", 1, opts))
	y := newSide(t, pipeAdapterWith(t, p.B(), "198.18.0.2", 2, opts))
	if connect {
		connectSides(t, x, y)
	}
	return x, y
}

func waitResult(t testing.TB, c *CQ) ResultEx {
	t.Helper()
	var r [1]ResultEx
	for deadline := time.Now().Add(5 * time.Second); c.GetResultsEx(r[:]) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no completion within 5s")
		}
		runtime.Gosched()
	}
	return r[0]
}

func TestQPSendReceiveOverPipe(t *testing.T) {
	x, y := pipePair(t, true)
	src := make([]byte, 3000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, 3000)
	smr, _ := x.pd.RegisterMR(src, 0)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ss, _ := smr.SGE(0, 3000)
	ds, _ := dmr.SGE(0, 3000)
	if err := y.qp.Receive("r", []SGE{ds}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.Send("s", []SGE{ss}, 0); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, y.rcq)
	if r.Status != StatusSuccess || r.Type != OpReceive || r.BytesTransferred != 3000 || r.RequestContext != "r" || r.QPContext != "qp" {
		t.Fatalf("receive %+v", r)
	}
	if s := waitResult(t, x.icq); s.Status != StatusSuccess || s.Type != OpSend || s.RequestContext != "s" {
		t.Fatalf("send %+v", s)
	}
	if string(dst) != string(src) {
		t.Fatal("payload differs")
	}
}

func TestQPNotConnectedAndBadFlags(t *testing.T) {
	x, _ := pipePair(t, false)
	if err := x.qp.Send(nil, nil, 0); !errors.Is(err, ErrConnectionInvalid) {
		t.Fatalf("send before connect: %v", err)
	}
	if err := x.qp.Send(nil, nil, OpFlagAllowRemoteRead); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("undocumented flag: %v", err)
	}
	if err := x.qp.Read(nil, nil, 0, 0, OpFlagInline); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("INLINE on a read: %v", err)
	}
}

func TestCreateQpChecksLimits(t *testing.T) {
	x, _ := pipePair(t, false)
	info := x.a.Info()
	base := QPConfig{ReceiveCQ: x.rcq, InitiatorCQ: x.icq, ReceiveQueueDepth: 1, InitiatorQueueDepth: 1}
	for name, mod := range map[string]func(*QPConfig){
		"ReceiveDepth":  func(c *QPConfig) { c.ReceiveQueueDepth = int(info.MaxReceiveQueueDepth) + 1 },
		"InitiatorZero": func(c *QPConfig) { c.InitiatorQueueDepth = 0 },
		"RecvSGE":       func(c *QPConfig) { c.MaxReceiveRequestSGE = int(info.MaxReceiveRequestSGE) + 1 },
		"SendSGE":       func(c *QPConfig) { c.MaxInitiatorRequestSGE = int(info.MaxInitiatorRequestSGE) + 1 },
		"Inline":        func(c *QPConfig) { c.InlineDataSize = int(info.MaxInlineDataSize) + 1 },
		"NoCQ":          func(c *QPConfig) { c.ReceiveCQ = nil },
	} {
		c := base
		mod(&c)
		if _, err := x.pd.CreateQP(c); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestQPPostAndPollAllocateNothing(t *testing.T) {
	x, y := pipePair(t, true)
	src := make([]byte, 64)
	dst := make([]byte, 64)
	smr, _ := x.pd.RegisterMR(src, 0)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ss, _ := smr.SGE(0, 64)
	ds, _ := dmr.SGE(0, 64)
	ssgl, dsgl := []SGE{ss}, []SGE{ds}
	ctx := new(int)
	var rs [4]Result
	wait := func(c *CQ) {
		for c.GetResults(rs[:1]) == 0 {
			runtime.Gosched()
		}
	}
	round := func() {
		_ = y.qp.Receive(ctx, dsgl)
		_ = x.qp.Send(ctx, ssgl, 0)
		wait(x.icq)
		wait(y.rcq)
	}
	for i := 0; i < 20; i++ {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per Receive+Send+GetResults round trip", n)
	}
}

// TestQueueFullAllocatesNothing checks that a post refused because the
// queue is full returns STATUS_INSUFFICIENT_RESOURCES, naming the
// operation, without allocating: a streaming consumer meets it on every
// retry.
func TestQueueFullAllocatesNothing(t *testing.T) {
	x, y := pipePair(t, false)
	// Only x is connected: y drops its frames, so no ACK retires x's
	// writes and the initiator queue (64 deep) fills.
	if err := x.qp.ConnectOOB(y.qp.LocalEndpoint(), ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 64)
	smr, _ := x.pd.RegisterMR(src, 0)
	ss, _ := smr.SGE(0, 64)
	dst := make([]byte, 64)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite|MRFlagAllowRemoteWrite)
	ds, _ := dmr.SGE(0, 64)
	ssgl, dsgl := []SGE{ss}, []SGE{ds}
	full := func(what string, post func() error) {
		t.Helper()
		var err error
		for i := 0; i < 65 && err == nil; i++ {
			err = post()
		}
		var e *Error
		if !errors.Is(err, ErrInsufficientResources) || !errors.As(err, &e) || e.Op != what {
			t.Fatalf("%s into a full queue: %v", what, err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = post() }); n != 0 {
			t.Fatalf("%s into a full queue: %.2f allocations", what, n)
		}
	}
	full("receive", func() error { return y.qp.Receive(nil, dsgl) })
	full("write", func() error { return x.qp.Write(nil, ssgl, dmr.Addr(), dmr.RemoteToken(), 0) })
}
