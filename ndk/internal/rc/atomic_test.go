package rc

import (
	"encoding/binary"
	"runtime"
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

const atomicAccess = memreg.AccessLocalWrite | memreg.AccessRemoteAtomic

// word reads the 8 bytes at off of b with an atomic load: the peer's
// engine writes them with sync/atomic, so this is no data race.
func word(b *buffer, off int) uint64 {
	return atomic.LoadUint64((*uint64)(ptrAt(b.b, off)))
}

func origAt(b *buffer, i int) uint64 { return binary.NativeEndian.Uint64(b.b[8*i:]) }

// TestAtomics runs FETCH_ADD and CMP_SWAP (a hit and a miss) and checks
// the original values the requester receives, the memory the responder
// holds afterwards and the completion types.
func TestAtomics(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	res := a.buffer(64, memreg.AccessLocalWrite, false)
	tgt := b.buffer(64, atomicAccess, false)
	binary.NativeEndian.PutUint64(tgt.b[8:], 1000)
	binary.NativeEndian.PutUint64(tgt.b[16:], 7)
	b.eng.Stats() // orders the stores above before the engine's accesses
	qp := a.qps[0]
	post := func(ctx int, op Op, slot, off int, cmp, swapAdd uint64) {
		mustPost(t, qp.PostSend(&SendWR{Op: op, Context: ctx, SGL: []SGE{res.sge(8*slot, 8)},
			RemoteAddr: tgt.addr(off), RemoteToken: tgt.tokens.Remote, Compare: cmp, SwapAdd: swapAdd}))
	}
	post(1, OpFetchAdd, 0, 8, 0, 5)          // 1000 -> 1005, orig 1000
	post(2, OpFetchAdd, 1, 8, 0, ^uint64(0)) // 1005 -> 1004 (adds wrap), orig 1005
	post(3, OpCompareSwap, 2, 16, 7, 42)     // hit: 7 -> 42, orig 7
	post(4, OpCompareSwap, 3, 16, 7, 99)     // miss: stays 42, orig 42
	es := waitCQ(t, a.scq, 4, 2*time.Second)
	types := []ndkpi.OperationType{ndkpi.OpFetchAndAdd, ndkpi.OpFetchAndAdd, ndkpi.OpCompareAndSwap, ndkpi.OpCompareAndSwap}
	for i, e := range es {
		checkEntry(t, e, ndkpi.StatusSuccess, types[i], i+1)
	}
	for i, want := range []uint64{1000, 1005, 7, 42} {
		if got := origAt(res, i); got != want {
			t.Errorf("original value %d: %d, want %d", i, got, want)
		}
	}
	if got := word(tgt, 8); got != 1004 {
		t.Errorf("fetch-add target %d, want 1004", got)
	}
	if got := word(tgt, 16); got != 42 {
		t.Errorf("compare-swap target %d, want 42", got)
	}
	if !tgt.guardsIntact() || !res.guardsIntact() {
		t.Fatal("guard bytes changed")
	}
	if s := b.eng.Stats(); s.Atomics != 4 || s.AtomicReplays != 0 {
		t.Fatalf("responder executed %d atomics, replayed %d; want 4, 0", s.Atomics, s.AtomicReplays)
	}
}

// TestAtomicDuplicateAnsweredFromSavedResult loses the first ATOMIC_ACK:
// the requester times out and sends the FETCH_ADD again, and the responder
// answers the duplicate from its responder resource. The counter is
// incremented once and the requester still learns the original value.
func TestAtomicDuplicateAnsweredFromSavedResult(t *testing.T) {
	var dropped atomic.Bool
	a, b := newPair(t, pairOptions{pipe: porttest.PipeConfig{Filter: func(dir porttest.Direction, f []byte) porttest.Verdict {
		var p rocev2.Packet
		if dir == porttest.BtoA && rocev2.Parse(f, &p) == nil && p.BTH.Opcode == rocev2.RCAtomicAck && dropped.CompareAndSwap(false, true) {
			return porttest.Drop
		}
		return porttest.Pass
	}}})
	res := a.buffer(8, memreg.AccessLocalWrite, false)
	tgt := b.buffer(8, atomicAccess, false)
	binary.NativeEndian.PutUint64(tgt.b, 41)
	b.eng.Stats()
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpFetchAdd, Context: 1, SGL: []SGE{res.sge(0, 8)},
		RemoteAddr: tgt.addr(0), RemoteToken: tgt.tokens.Remote, SwapAdd: 1}))
	checkEntry(t, waitCQ(t, a.scq, 1, 2*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpFetchAndAdd, 1)
	if !dropped.Load() {
		t.Fatal("no ATOMIC_ACK was dropped")
	}
	if got := origAt(res, 0); got != 41 {
		t.Fatalf("original value %d, want 41", got)
	}
	if got := word(tgt, 0); got != 42 {
		t.Fatalf("target %d after one FETCH_ADD of 1 from 41 (executed twice?)", got)
	}
	if s := b.eng.Stats(); s.Atomics != 1 || s.AtomicReplays != 1 {
		t.Fatalf("responder executed %d atomics, replayed %d; want 1, 1", s.Atomics, s.AtomicReplays)
	}
}

// TestAtomicsUnderLossAndDuplication runs many FETCH_ADDs of 1 over a link
// that loses, duplicates and reorders frames: every one completes, the
// counter ends at exactly their number, and the original values are
// 0..n-1 in order (each executed once, in PSN order).
func TestAtomicsUnderLossAndDuplication(t *testing.T) {
	const n = 300
	a, b := newPair(t, pairOptions{
		pipe: porttest.PipeConfig{Seed: 3, Loss: 0.05, Duplicate: 0.05, Reorder: 0.05},
		params: func(p *ConnParams) {
			// Short for a quick test, long enough that a loaded machine does
			// not spend all seven retries on a peer that is merely slow.
			p.AckTimeout = timeScale * 10 * time.Millisecond
			p.InboundReadLimit, p.OutboundReadLimit = 4, 4
		},
		depth: n,
	})
	res := a.buffer(8*n, memreg.AccessLocalWrite, false)
	tgt := b.buffer(8, atomicAccess, false)
	clear(tgt.b)
	b.eng.Stats()
	for i := 0; i < n; i++ {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpFetchAdd, Context: i, SGL: []SGE{res.sge(8*i, 8)},
			RemoteAddr: tgt.addr(0), RemoteToken: tgt.tokens.Remote, SwapAdd: 1}))
	}
	for i, e := range waitCQ(t, a.scq, n, 20*time.Second) {
		checkEntry(t, e, ndkpi.StatusSuccess, ndkpi.OpFetchAndAdd, i)
	}
	if got := word(tgt, 0); got != n {
		t.Fatalf("counter %d after %d FETCH_ADDs of 1", got, n)
	}
	for i := 0; i < n; i++ {
		if got := origAt(res, i); got != uint64(i) {
			t.Fatalf("FETCH_ADD %d saw %d", i, got)
		}
	}
	s := b.eng.Stats()
	if s.Atomics != n {
		t.Fatalf("responder executed %d atomics for %d requests", s.Atomics, n)
	}
	t.Logf("responder: %d duplicates, %d answered from saved results; link: %+v / %+v",
		s.Duplicates, s.AtomicReplays, a.pipe.Stats(porttest.AtoB), a.pipe.Stats(porttest.BtoA))
}

// TestAtomicsCountAgainstOutboundReadLimit holds every ATOMIC_ACK back for
// a while: the requester must not have more atomics outstanding than its
// outbound read limit (IBTA: initiator depth covers READs and atomics),
// and the responder's inbound limit is never exceeded.
func TestAtomicsCountAgainstOutboundReadLimit(t *testing.T) {
	const n, limit = 20, 2
	var mu sync.Mutex
	seen := map[rocev2.PSN]bool{}
	var holdUntil atomic.Int64
	a, b := newPair(t, pairOptions{
		pipe: porttest.PipeConfig{Filter: func(dir porttest.Direction, f []byte) porttest.Verdict {
			var p rocev2.Packet
			if rocev2.Parse(f, &p) != nil || time.Now().UnixNano() > holdUntil.Load() {
				return porttest.Pass
			}
			switch {
			case dir == porttest.AtoB && p.BTH.Opcode == rocev2.RCFetchAdd:
				mu.Lock()
				seen[p.BTH.PSN] = true
				mu.Unlock()
			case dir == porttest.BtoA && p.BTH.Opcode == rocev2.RCAtomicAck:
				return porttest.Drop
			}
			return porttest.Pass
		}},
		params: func(p *ConnParams) {
			p.InboundReadLimit, p.OutboundReadLimit = limit, limit
			p.AckTimeout = timeScale * 20 * time.Millisecond // 7 retries outlast the hold
		},
	})
	holdUntil.Store(time.Now().Add(50 * time.Millisecond).UnixNano())
	res := a.buffer(8*n, memreg.AccessLocalWrite, false)
	tgt := b.buffer(8, atomicAccess, false)
	clear(tgt.b)
	b.eng.Stats()
	for i := 0; i < n; i++ {
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpFetchAdd, Context: i, SGL: []SGE{res.sge(8*i, 8)},
			RemoteAddr: tgt.addr(0), RemoteToken: tgt.tokens.Remote, SwapAdd: 1}))
	}
	for i, e := range waitCQ(t, a.scq, n, 10*time.Second) {
		checkEntry(t, e, ndkpi.StatusSuccess, ndkpi.OpFetchAndAdd, i)
	}
	mu.Lock()
	distinct := len(seen)
	mu.Unlock()
	if distinct != limit {
		t.Fatalf("%d distinct atomics sent while their answers were held, want the limit %d", distinct, limit)
	}
	if got := word(tgt, 0); got != n {
		t.Fatalf("counter %d, want %d", got, n)
	}
}

// TestAtomicRefused checks the responder's refusals: a bad rkey, a region
// without the remote atomic right and an address beyond the region are
// remote access errors (STATUS_ACCESS_VIOLATION, IB_WC_REM_ACCESS_ERR); a
// misaligned address is an invalid request (STATUS_REMOTE_RESOURCES,
// IB_WC_REM_INV_REQ_ERR). The target never changes.
func TestAtomicRefused(t *testing.T) {
	cases := []struct {
		name   string
		access memreg.Access
		off    int
		token  func(*buffer) uint32
		status ndkpi.Status
		code   uint32
	}{
		{"BadRKey", atomicAccess, 0, func(b *buffer) uint32 { return b.tokens.Remote ^ 0x33 }, ndkpi.StatusAccessViolation, wcRemAccessErr},
		{"WithoutAtomicRight", memreg.AccessLocalWrite | memreg.AccessRemoteWrite | memreg.AccessRemoteRead, 0,
			func(b *buffer) uint32 { return b.tokens.Remote }, ndkpi.StatusAccessViolation, wcRemAccessErr},
		{"OutOfBounds", atomicAccess, 16, func(b *buffer) uint32 { return b.tokens.Remote }, ndkpi.StatusAccessViolation, wcRemAccessErr},
		{"Misaligned", atomicAccess, 4, func(b *buffer) uint32 { return b.tokens.Remote }, ndkpi.StatusRemoteResources, wcRemInvReqErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, pairOptions{})
			res := a.buffer(8, memreg.AccessLocalWrite, false)
			tgt := b.buffer(16, c.access, false)
			fill(tgt.b, 9)
			before := append([]byte(nil), tgt.all...)
			b.eng.Stats()
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpCompareSwap, Context: 1, SGL: []SGE{res.sge(0, 8)},
				RemoteAddr: tgt.addr(c.off), RemoteToken: c.token(tgt), Compare: binary.NativeEndian.Uint64(tgt.b), SwapAdd: 1}))
			e := waitCQ(t, a.scq, 1, 2*time.Second)[0]
			checkEntry(t, e, c.status, ndkpi.OpCompareAndSwap, 1)
			if e.ProviderErrorCode != c.code {
				t.Fatalf("provider error %d, want %d", e.ProviderErrorCode, c.code)
			}
			b.eng.Stats()
			sameBytes(t, "target and guards", tgt.all, before)
			if s := b.eng.Stats(); s.Atomics != 0 || s.NAKsSent != 1 {
				t.Fatalf("responder: %d atomics executed, %d NAKs sent; want 0, 1", s.Atomics, s.NAKsSent)
			}
		})
	}
}

// TestAtomicPostChecks: an atomic takes exactly one 8-byte SGE with local
// write (the original value lands there); anything else fails inline.
func TestAtomicPostChecks(t *testing.T) {
	a, _ := newPair(t, pairOptions{})
	res := a.buffer(16, memreg.AccessLocalWrite, false)
	ro := a.buffer(8, 0, false)
	for name, sgl := range map[string][]SGE{
		"short":    {res.sge(0, 4)},
		"long":     {res.sge(0, 16)},
		"two SGEs": {res.sge(0, 4), res.sge(4, 4)},
		"none":     nil,
	} {
		if st := a.qps[0].PostSend(&SendWR{Op: OpFetchAdd, SGL: sgl, RemoteAddr: 8, RemoteToken: 1}); st != ndkpi.StatusInvalidParameter {
			t.Errorf("%s: status %#x, want INVALID_PARAMETER", name, st)
		}
	}
	if st := a.qps[0].PostSend(&SendWR{Op: OpFetchAdd, SGL: []SGE{ro.sge(0, 8)}, RemoteAddr: 8, RemoteToken: 1}); st != ndkpi.StatusAccessViolation {
		t.Errorf("read-only result buffer: status %#x, want ACCESS_VIOLATION", st)
	}
}

// TestAtomicRoundTripAllocatesNothing: posting an atomic, executing it and
// completing it allocate nothing on either side.
func TestAtomicRoundTripAllocatesNothing(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	res := a.buffer(8, memreg.AccessLocalWrite, false)
	tgt := b.buffer(8, atomicAccess, false)
	ctx := new(int)
	fa := SendWR{Op: OpFetchAdd, Context: ctx, SGL: []SGE{res.sge(0, 8)}, RemoteAddr: tgt.addr(0), RemoteToken: tgt.tokens.Remote, SwapAdd: 1}
	cs := SendWR{Op: OpCompareSwap, Context: ctx, SGL: []SGE{res.sge(0, 8)}, RemoteAddr: tgt.addr(0), RemoteToken: tgt.tokens.Remote}
	var e cq.Entry
	round := func() {
		a.qps[0].PostSend(&fa)
		a.qps[0].PostSend(&cs)
		for i := 0; i < 2; i++ {
			for !a.scq.Pop(&e) {
				runtime.Gosched()
			}
			if e.Status != ndkpi.StatusSuccess {
				t.Fatalf("completion %+v", e)
			}
		}
	}
	for i := 0; i < 50; i++ {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per atomic round trip, want 0", n)
	}
}
