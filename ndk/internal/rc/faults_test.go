package rc

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestFaultyLink runs a mixed stream of SENDs, WRITEs and READs over a link
// that loses, duplicates and reorders frames in both directions with fixed
// seeds: every message must arrive once, in order and intact, and every
// request must complete exactly once, in order, successfully.
func TestFaultyLink(t *testing.T) {
	cases := []struct {
		loss, dup, reorder float64
		seeds              []uint64
	}{
		{0.02, 0.02, 0.02, []uint64{1, 2, 3, 4, 5}},
		{0.10, 0.05, 0.05, []uint64{6, 7}},
		{0, 0.2, 0.2, []uint64{8}},
	}
	for _, c := range cases {
		for _, seed := range c.seeds {
			name := fmt.Sprintf("loss%.2f_dup%.2f_reorder%.2f_seed%d", c.loss, c.dup, c.reorder, seed)
			t.Run(name, func(t *testing.T) {
				pc := porttest.PipeConfig{Seed: int64(seed), Loss: c.loss, Duplicate: c.dup, Reorder: c.reorder}
				a, b := newPair(t, pairOptions{pipe: pc, mtu: rocev2.MTU1024,
					params: func(p *ConnParams) {
						// Short enough for a quick test, long enough that a
						// peer engine slowed by -race on a loaded machine
						// does not spend every retry while still working.
						p.AckTimeout = timeScale * 30 * time.Millisecond
						p.InboundReadLimit, p.OutboundReadLimit = 4, 4
					}})
				runStream(t, a, b, seed, 240)
				st := a.eng.Stats()
				if d := a.pipe.Stats(porttest.AtoB).Dropped; c.loss > 0 && d > 0 && st.Retransmits == 0 {
					t.Errorf("%d frames lost but no retransmission counted", d)
				}
				t.Logf("A: %+v", st)
			})
		}
	}
}

type streamOp struct {
	op   Op
	n    int
	src  *buffer // A's source (send, write) or sink (read)
	dst  *buffer // B's receive buffer, write target or read source
	recv int     // index among receives, for sends
}

// runStream posts n random operations on A's first QP and checks them all.
func runStream(t *testing.T, a, b *host, seed uint64, n int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	mtu := int(a.qps[0].t.pmtu)
	ops := make([]streamOp, n)
	sends := 0
	for i := range ops {
		o := &ops[i]
		o.op = []Op{OpSend, OpWrite, OpRead}[r.IntN(3)]
		o.n = r.IntN(5*mtu + 17)
		if r.IntN(20) == 0 {
			o.n = 64 << 10
		}
		switch o.op {
		case OpSend:
			o.src = a.buffer(o.n, 0, false)
			o.dst = b.buffer(o.n, memreg.AccessLocalWrite, false)
			fill(o.src.b, seed<<20|uint64(i))
			o.recv = sends
			sends++
			mustPost(t, b.qps[0].PostReceive(o.recv, []SGE{o.dst.sge(0, o.n)}))
		case OpWrite:
			o.src = a.buffer(o.n, 0, false)
			o.dst = b.buffer(o.n, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
			fill(o.src.b, seed<<20|uint64(i))
		case OpRead:
			o.src = a.buffer(o.n, memreg.AccessLocalWrite, false)
			o.dst = b.buffer(o.n, memreg.AccessRemoteRead, false)
			fill(o.dst.b, seed<<20|uint64(i))
		}
	}
	var done []cq.Entry
	collect := func() {
		var e cq.Entry
		for a.scq.Pop(&e) {
			done = append(done, e)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < n; {
		o := &ops[i]
		wr := SendWR{Op: o.op, Context: i, SGL: []SGE{o.src.sge(0, o.n)}}
		if o.op != OpSend {
			wr.RemoteAddr, wr.RemoteToken = o.dst.addr(0), o.dst.tokens.Remote
		}
		switch st := a.qps[0].PostSend(&wr); st {
		case ndkpi.StatusSuccess:
			i++
		case ndkpi.StatusInsufficientResources:
			collect()
			if time.Now().After(deadline) {
				t.Fatalf("send queue still full after %d of %d posts", i, n)
			}
			time.Sleep(50 * time.Microsecond)
		default:
			t.Fatalf("post %d: status %#x", i, st)
		}
	}
	for len(done) < n && time.Now().Before(deadline) {
		collect()
		time.Sleep(100 * time.Microsecond)
	}
	if len(done) != n {
		t.Fatalf("%d of %d requests completed; A %+v; B %+v", len(done), n, a.eng.Stats(), b.eng.Stats())
	}
	for i, e := range done {
		typ := map[Op]ndkpi.OperationType{OpSend: ndkpi.OpSend, OpWrite: ndkpi.OpWrite, OpRead: ndkpi.OpRead}[ops[i].op]
		checkEntry(t, e, ndkpi.StatusSuccess, typ, i)
	}
	recvs := waitCQ(t, b.rcq, sends, 10*time.Second)
	expectNone(t, b.rcq, 10*time.Millisecond)
	expectNone(t, a.scq, 0)
	for i, o := range ops {
		switch o.op {
		case OpSend:
			e := recvs[o.recv]
			checkEntry(t, e, ndkpi.StatusSuccess, ndkpi.OpReceive, o.recv)
			if e.BytesTransferred != uint32(o.n) {
				t.Fatalf("op %d: received %d bytes, sent %d", i, e.BytesTransferred, o.n)
			}
			sameBytes(t, fmt.Sprintf("op %d send", i), o.dst.b, o.src.b)
		case OpWrite:
			sameBytes(t, fmt.Sprintf("op %d write", i), o.dst.b, o.src.b)
		case OpRead:
			sameBytes(t, fmt.Sprintf("op %d read", i), o.src.b, o.dst.b)
		}
		if !o.src.guardsIntact() || !o.dst.guardsIntact() {
			t.Fatalf("op %d: guard bytes changed", i)
		}
	}
}
