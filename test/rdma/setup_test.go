package rdma

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// host is one RDMA host of the veth pair: an adapter opened inside its
// namespace, one PD and a receive and an initiator CQ, which fails its
// test where the helpers below meet an error.
type host struct {
	t testing.TB
	*ndkhost.Host
	mem []byte // what is left of the chunk small regions are cut from
}

type setup struct {
	daemon   bool // both hosts served by a daemon (ndkhost.Config.Daemon)
	mtu      int
	opts     ndk.Options
	cqNotify func(ndk.Status) // for B's receive CQ
	cqDepth  int
}

// modes are the two ways an adapter is served: in the test process
// (ndk.Open) and by a daemon through its client (ndk.Dial).
var modes = []struct {
	name   string
	daemon bool
}{{"inproc", false}, {"daemon", true}}

// forEachMode runs f as a subtest per mode, with a setup for that mode.
func forEachMode(t *testing.T, f func(t *testing.T, s setup)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, setup{daemon: m.daemon}) })
	}
}

func openHost(t testing.TB, h *harness.Host, s setup, notify func(ndk.Status)) *host {
	t.Helper()
	x, err := ndkhost.Open(h, ndkhost.Config{Options: s.opts, Daemon: s.daemon, CQDepth: s.cqDepth, ReceiveNotify: notify})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	return &host{t: t, Host: x}
}

// newHosts builds a veth pair in fresh namespaces and opens ndkxdp on both
// ends.
func newHosts(t testing.TB, s setup) (*host, *host) {
	t.Helper()
	if s.mtu == 0 {
		s.mtu = 1500
	}
	p := harness.New(t, harness.Config{MTU: s.mtu, StaticNeighbours: true})
	a := openHost(t, p.A, s, nil)
	b := openHost(t, p.B, s, s.cqNotify)
	return a, b
}

var defaultQP = ndk.QPConfig{ReceiveQueueDepth: 512, InitiatorQueueDepth: 512,
	MaxReceiveRequestSGE: 4, MaxInitiatorRequestSGE: 4, InlineDataSize: 256}

func (x *host) qp(ctx any) *ndk.QP { return x.qpWith(ctx, defaultQP) }

func (x *host) qpWith(ctx any, c ndk.QPConfig) *ndk.QP {
	x.t.Helper()
	c.ReceiveCQ, c.InitiatorCQ, c.Context = x.RCQ, x.ICQ, ctx
	q, err := x.PD.CreateQP(c)
	if err != nil {
		x.t.Fatal(err)
	}
	return q
}

// connect joins qa and qb out of band, as two ibv_rc_pingpong processes
// would after swapping endpoints.
func connect(t testing.TB, a, b *host, qa, qb *ndk.QP, o ndk.ConnectOptions) {
	t.Helper()
	ea, eb := qa.LocalEndpoint(), qb.LocalEndpoint()
	if err := a.Net.Do(func() error { return qa.ConnectOOB(eb, o) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Net.Do(func() error { return qb.ConnectOOB(ea, o) }); err != nil {
		t.Fatal(err)
	}
}

func (x *host) pairWith(y *host, o ndk.ConnectOptions) (*ndk.QP, *ndk.QP) {
	qa, qb := x.qp("a"), y.qp("b")
	connect(x.t, x, y, qa, qb, o)
	return qa, qb
}

// region is registered memory framed by guard bytes that must not change.
type region struct {
	all []byte
	b   []byte
	mr  *ndk.MR
}

const guard = 64

func (x *host) region(n int, flags ndk.MRFlag) *region {
	return x.regionWith(n, flags, false)
}

func (x *host) regionWith(n int, flags ndk.MRFlag, invalidatable bool) *region {
	x.t.Helper()
	all := x.memory(n + 2*guard)
	for i := range all {
		all[i] = 0xEE
	}
	r := &region{all: all, b: all[guard : guard+n]}
	reg := all[guard : guard+max(n, 1)]
	var err error
	if invalidatable {
		r.mr, err = x.PD.RegisterInvalidatableMR(reg, flags)
	} else {
		r.mr, err = x.PD.RegisterMR(reg, flags)
	}
	if err != nil {
		x.t.Fatal(err)
	}
	return r
}

// chunk is the size of the Adapter.Memory chunks that small regions are
// cut from: a daemon maps a client's memory as a few hundred memfds at
// most (one per Memory call), and frees them only with the client.
const chunk = 1 << 20

// memory returns n bytes the adapter can register (Adapter.Memory), kept
// until the host closes.
func (x *host) memory(n int) []byte {
	x.t.Helper()
	if n > chunk/4 {
		b, err := x.Adapter.Memory(n)
		if err != nil {
			x.t.Fatal(err)
		}
		return b
	}
	if len(x.mem) < n {
		var err error
		if x.mem, err = x.Adapter.Memory(chunk); err != nil {
			x.t.Fatal(err)
		}
	}
	b := x.mem[:n:n]
	x.mem = x.mem[min(len(x.mem), (n+63)&^63):]
	return b
}

func (r *region) sge(off, n int) ndk.SGE {
	return ndk.SGE{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), Token: r.mr.LocalToken()}
}

func (r *region) sgl(off, n int) []ndk.SGE { return []ndk.SGE{r.sge(off, n)} }

func (r *region) guardsIntact() bool {
	for _, x := range append(append([]byte(nil), r.all[:guard]...), r.all[len(r.all)-guard:]...) {
		if x != 0xEE {
			return false
		}
	}
	return true
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// wait returns the next n completions of c, failing after d.
func wait(t testing.TB, c *ndk.CQ, n int, d time.Duration) []ndk.ResultEx {
	t.Helper()
	out := make([]ndk.ResultEx, 0, n)
	buf := make([]ndk.ResultEx, 64)
	deadline := time.Now().Add(d)
	for len(out) < n {
		k := c.GetResultsEx(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions within %v", len(out), n, d)
			}
			runtime.Gosched()
		}
	}
	return out
}

func none(t testing.TB, c *ndk.CQ, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	var r [1]ndk.ResultEx
	if c.GetResultsEx(r[:]) != 0 {
		t.Fatalf("unexpected completion %+v", r[0])
	}
}

func expect(t testing.TB, r ndk.ResultEx, st ndk.Status, typ ndk.OperationType, ctx any) {
	t.Helper()
	if r.Status != st || r.Type != typ || r.RequestContext != ctx {
		t.Fatalf("completion %+v (%v), want %v %v ctx %v", r, r.Status, st, typ, ctx)
	}
}

func same(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: contents differ at byte %d of %d (got %d bytes)", what, i, len(want), len(got))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// settle orders the test's memory accesses with x's engines. A peer's
// WRITE completion proves that x's engine placed the bytes, and a READ is
// posted after its source was filled, but those orders cross the kernel,
// where the race detector cannot see them; Adapter.Stats synchronizes
// with every engine of x.
func (x *host) settle() { x.Adapter.Stats() }
