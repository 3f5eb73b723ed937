package rc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

const testPD = 7

// host is one side of an engine-to-engine test: an engine on one end of
// the link, its token table, CQs and QPs.
type host struct {
	t       testing.TB
	eng     *Engine
	port    port.Port
	regions *memreg.Table
	rcq     *cq.CQ
	scq     *cq.CQ
	ip      netip.Addr
	mac     rocev2.MAC
	qps     []*QP
	pipe    *porttest.Pipe
}

type pairOptions struct {
	pipe      porttest.PipeConfig
	mtu       rocev2.MTU
	params    func(*ConnParams) // adjusts both sides' parameters
	paramsB   func(*ConnParams) // then B's only
	qps       int
	depth     int
	poll      PollMode
	cqDepth   int
	noConnect bool
	anySource bool // Config.AnySource
	// cc and traffic are Config.CC and Config.Traffic of both engines;
	// v6 puts the hosts on 2001:2::1 and 2001:2::2.
	cc      CCConfig
	traffic TrafficClass
	v6      bool
	cpus    []int // Config.CPUs of both engines
	// qpFailed is Config.QPFailed, told which host (1: A, 2: B) it is.
	qpFailed func(host byte, qpn, wcStatus uint32)
	// uc makes the QPs unreliable-connection ones (uc.go).
	uc bool
	// owner is Config.Owner of both engines, groups Config.Groups of
	// B's (host 2): A is another adapter.
	owner  func(qpn uint32) *Engine
	groups func(group netip.Addr) []*Engine
}

func newHost(t testing.TB, p port.Port, ip string, mac byte, o *pairOptions) *host {
	t.Helper()
	regions, err := memreg.New(1024)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Port: p, Regions: regions, Poll: o.poll, AnySource: o.anySource, CC: o.cc, Traffic: o.traffic, CPUs: o.cpus,
		Owner: o.owner}
	if mac == 2 {
		cfg.Groups = o.groups
	}
	if f := o.qpFailed; f != nil {
		cfg.QPFailed = func(qpn, wc uint32) { f(mac, qpn, wc) }
	}
	eng, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	depth := o.cqDepth
	if depth == 0 {
		depth = 1 << 16
	}
	rcq, _ := cq.New(depth, nil)
	scq, _ := cq.New(depth, nil)
	return &host{t: t, eng: eng, port: p, regions: regions, rcq: rcq, scq: scq,
		ip: netip.MustParseAddr(ip), mac: rocev2.MAC{2, 0, 0, 0, 0, mac}}
}

func (h *host) createQP(qpn uint32, depth int) *QP {
	h.t.Helper()
	return h.createQPOf(qpn, depth, false)
}

// createQPOf is createQP of an RC QP, or of a UC one if uc.
func (h *host) createQPOf(qpn uint32, depth int, uc bool) *QP {
	h.t.Helper()
	q, err := h.eng.CreateQP(QPConfig{
		QPN: qpn, PD: testPD, RecvCQ: h.rcq, SendCQ: h.scq, Context: qpn,
		RecvDepth: depth, SendDepth: depth,
		MaxRecvSGE: MaxSGE, MaxSendSGE: MaxSGE, MaxReadSGE: MaxSGE, InlineSize: MaxInline,
		UC: uc,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.qps = append(h.qps, q)
	return q
}

func defaultParams(mtu rocev2.MTU) ConnParams {
	return ConnParams{
		PathMTU:           mtu,
		InboundReadLimit:  16,
		OutboundReadLimit: 16,
		// Long enough that a peer engine descheduled on a loaded 2-core
		// machine (or under -race) does not exhaust RetryCount: 8 timeouts
		// without progress fail the QP. Tests of the timer set their own.
		AckTimeout:  timeScale * 25 * time.Millisecond,
		RetryCount:  7,
		RNRRetry:    7,
		MinRNRTimer: rocev2.RNRTimer(1), // 10 us
	}
}

// newPair builds two hosts joined by a faulty link with o.qps connected QP
// pairs (QPNs 0x100+i on both sides).
func newPair(t testing.TB, o pairOptions) (*host, *host) {
	t.Helper()
	if o.mtu == 0 {
		o.mtu = rocev2.MTU1024
	}
	if o.qps == 0 {
		o.qps = 1
	}
	if o.depth == 0 {
		o.depth = 256
	}
	if o.pipe.Depth == 0 {
		o.pipe.Depth = 4096
	}
	pipe, err := porttest.NewPipe(o.pipe)
	if err != nil {
		t.Fatal(err)
	}
	ipA, ipB := "198.18.0.1", "198.18.0.2"
	if o.v6 {
		ipA, ipB = "2001:2::1", "2001:2::2"
	}
	a := newHost(t, pipe.A(), ipA, 1, &o)
	b := newHost(t, pipe.B(), ipB, 2, &o)
	a.pipe, b.pipe = pipe, pipe
	for i := 0; i < o.qps; i++ {
		qa := a.createQPOf(0x100+uint32(i), o.depth, o.uc)
		qb := b.createQPOf(0x100+uint32(i), o.depth, o.uc)
		if o.noConnect {
			continue
		}
		pA := defaultParams(o.mtu)
		if o.params != nil {
			o.params(&pA)
		}
		pB := pA
		if o.paramsB != nil {
			o.paramsB(&pB)
		}
		epA := Endpoint{IP: a.ip, MAC: a.mac, QPN: qa.QPN(), PSN: uint32(0xFFFF00 + i)} // near the 2^24 wrap
		epB := Endpoint{IP: b.ip, MAC: b.mac, QPN: qb.QPN(), PSN: uint32(0x1000 * (i + 1))}
		pA.Local, pA.Remote = epA, epB
		pB.Local, pB.Remote = epB, epA
		if err := qa.Connect(pA); err != nil {
			t.Fatal(err)
		}
		if err := qb.Connect(pB); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// buffer registers n bytes framed by guard bytes that must never change.
type buffer struct {
	all    []byte
	b      []byte
	tokens memreg.Tokens
}

const guardLen = 64

func (h *host) buffer(n int, access memreg.Access, invalidatable bool) *buffer {
	h.t.Helper()
	all := make([]byte, n+2*guardLen)
	for i := range all {
		all[i] = 0xEE
	}
	b := all[guardLen : guardLen+n]
	reg := b
	if n == 0 {
		reg = all[guardLen : guardLen+1]
	}
	tok, err := h.regions.Register(memreg.Region{PD: testPD, VA: addrOf(reg), Buf: reg, Access: access, Invalidatable: invalidatable})
	if err != nil {
		h.t.Fatal(err)
	}
	return &buffer{all: all, b: b, tokens: tok}
}

func (b *buffer) guardsIntact() bool {
	for _, g := range [][]byte{b.all[:guardLen], b.all[len(b.all)-guardLen:]} {
		for _, x := range g {
			if x != 0xEE {
				return false
			}
		}
	}
	return true
}

func (b *buffer) sge(off, n int) SGE {
	return SGE{Addr: addrOf(b.all[guardLen:]) + uint64(off), Length: uint32(n), Token: b.tokens.Local}
}

func (b *buffer) addr(off int) uint64 { return addrOf(b.all[guardLen:]) + uint64(off) }

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// waitCQ polls c until n completions arrived or the deadline passes.
func waitCQ(t testing.TB, c *cq.CQ, n int, d time.Duration) []cq.Entry {
	t.Helper()
	out := make([]cq.Entry, 0, n)
	deadline := time.Now().Add(d)
	var e cq.Entry
	for len(out) < n {
		if c.Pop(&e) {
			out = append(out, e)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d completions within %v", len(out), n, d)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return out
}

// expectNone checks that c stays empty for d.
func expectNone(t testing.TB, c *cq.CQ, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	var e cq.Entry
	if c.Pop(&e) {
		t.Fatalf("unexpected completion %+v", e)
	}
}

func mustPost(t testing.TB, st ndkpi.Status) {
	t.Helper()
	if st != ndkpi.StatusSuccess {
		t.Fatalf("post: status %#x", st)
	}
}

func checkEntry(t testing.TB, e cq.Entry, status ndkpi.Status, typ ndkpi.OperationType, ctx any) {
	t.Helper()
	if e.Status != status || e.Type != typ || e.RequestContext != ctx {
		t.Fatalf("completion %+v, want status %#x type %d ctx %v", e, status, typ, ctx)
	}
}

func sameBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from byte %d (len %d, want %d)", what, len(want), i, len(got), len(want))
	}
}

func sizeName(n int) string { return fmt.Sprintf("%dB", n) }
