package rc

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// TestRemoteAccessViolations checks each way a peer's access can be refused:
// the request completes with the status NDKPI.md §9 suggests, both QPs
// enter the error state, later requests are cancelled, and no byte outside
// the region (or inside it, for a refused request) changes.
func TestRemoteAccessViolations(t *testing.T) {
	const n = 3000
	cases := []struct {
		name   string
		op     Op
		access memreg.Access
		addr   func(*buffer) uint64
		token  func(*buffer) uint32
		inval  bool // invalidate the target first
		status ndkpi.Status
	}{
		{"WriteBadToken", OpWrite, memreg.AccessRemoteWrite | memreg.AccessLocalWrite,
			func(b *buffer) uint64 { return b.addr(0) }, func(b *buffer) uint32 { return b.tokens.Remote ^ 0x5a }, false, ndkpi.StatusAccessViolation},
		{"WriteLocalTokenAsRemote", OpWrite, memreg.AccessRemoteWrite | memreg.AccessLocalWrite,
			func(b *buffer) uint64 { return b.addr(0) }, func(b *buffer) uint32 { return b.tokens.Local }, false, ndkpi.StatusAccessViolation},
		{"WriteOutOfBounds", OpWrite, memreg.AccessRemoteWrite | memreg.AccessLocalWrite,
			func(b *buffer) uint64 { return b.addr(1) }, func(b *buffer) uint32 { return b.tokens.Remote }, false, ndkpi.StatusAccessViolation},
		{"WriteBeforeRegion", OpWrite, memreg.AccessRemoteWrite | memreg.AccessLocalWrite,
			func(b *buffer) uint64 { return b.addr(0) - 1 }, func(b *buffer) uint32 { return b.tokens.Remote }, false, ndkpi.StatusAccessViolation},
		{"WriteWithoutRemoteWrite", OpWrite, memreg.AccessRemoteRead | memreg.AccessLocalWrite,
			func(b *buffer) uint64 { return b.addr(0) }, func(b *buffer) uint32 { return b.tokens.Remote }, false, ndkpi.StatusAccessViolation},
		{"WriteInvalidatedToken", OpWrite, memreg.AccessRemoteWrite | memreg.AccessLocalWrite,
			func(b *buffer) uint64 { return b.addr(0) }, func(b *buffer) uint32 { return b.tokens.Remote }, true, ndkpi.StatusAccessViolation},
		{"ReadBadToken", OpRead, memreg.AccessRemoteRead,
			func(b *buffer) uint64 { return b.addr(0) }, func(b *buffer) uint32 { return b.tokens.Remote + 0x100 }, false, ndkpi.StatusRemoteResources},
		{"ReadOutOfBounds", OpRead, memreg.AccessRemoteRead,
			func(b *buffer) uint64 { return b.addr(2) }, func(b *buffer) uint32 { return b.tokens.Remote }, false, ndkpi.StatusRemoteResources},
		{"ReadWithoutRemoteRead", OpRead, memreg.AccessRemoteWrite | memreg.AccessLocalWrite,
			func(b *buffer) uint64 { return b.addr(0) }, func(b *buffer) uint32 { return b.tokens.Remote }, false, ndkpi.StatusRemoteResources},
		{"ReadInvalidatedToken", OpRead, memreg.AccessRemoteRead,
			func(b *buffer) uint64 { return b.addr(0) }, func(b *buffer) uint32 { return b.tokens.Remote }, true, ndkpi.StatusRemoteResources},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, pairOptions{})
			local := a.buffer(n, memreg.AccessLocalWrite, false)
			fill(local.b, 1)
			target := b.buffer(n, c.access, c.inval)
			fill(target.b, 2)
			before := append([]byte(nil), target.all...)
			localBefore := append([]byte(nil), local.all...)
			if c.inval {
				if f := b.regions.Invalidate(testPD, target.tokens.Remote); f != memreg.OK {
					t.Fatal(f)
				}
			}
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: c.op, Context: 1, SGL: []SGE{local.sge(0, n)},
				RemoteAddr: c.addr(target), RemoteToken: c.token(target)}))
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 2, SGL: []SGE{local.sge(0, 1)}}))
			es := waitCQ(t, a.scq, 2, time.Second)
			checkEntry(t, es[0], c.status, map[Op]ndkpi.OperationType{OpWrite: ndkpi.OpWrite, OpRead: ndkpi.OpRead}[c.op], 1)
			if es[0].ProviderErrorCode != wcRemAccessErr {
				t.Fatalf("provider error %d, want REM_ACCESS_ERR", es[0].ProviderErrorCode)
			}
			checkEntry(t, es[1], ndkpi.StatusCancelled, ndkpi.OpSend, 2)
			sameBytes(t, "target region and guards", target.all, before)
			sameBytes(t, "local sink and guards", local.all, localBefore)
			if a.qps[0].State() != StateError || b.qps[0].State() != StateError {
				t.Fatalf("states %v/%v, want error on both sides", a.qps[0].State(), b.qps[0].State())
			}
			if b.eng.Stats().NAKsSent != 1 {
				t.Fatalf("responder sent %d NAKs", b.eng.Stats().NAKsSent)
			}
		})
	}
}

func TestSendAndInvalidate(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	src := a.buffer(1500, 0, false)
	fill(src.b, 9)
	dst := b.buffer(1500, memreg.AccessLocalWrite, false)
	target := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, true)
	mustPost(t, b.qps[0].PostReceive(7, []SGE{dst.sge(0, 1500)}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSendInvalidate, Context: 1, SGL: []SGE{src.sge(0, 1500)},
		InvalidateToken: target.tokens.Remote}))

	t.Run("InitiatorCompletionTypeSend", func(t *testing.T) {
		checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpSend, 1)
	})
	r := waitCQ(t, b.rcq, 1, time.Second)[0]
	t.Run("ReceiverCompletionCarriesToken", func(t *testing.T) {
		checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceiveAndInvalidate, 7)
		if r.TypeSpecificCompletionOutput != uint64(target.tokens.Remote) || r.BytesTransferred != 1500 {
			t.Fatalf("completion %+v, want token %#x", r, target.tokens.Remote)
		}
		sameBytes(t, "payload", dst.b, src.b)
	})
	t.Run("ReceiverTokenInvalidated", func(t *testing.T) {
		if _, f := b.regions.CheckRemote(testPD, target.tokens.Remote, target.addr(0), 8, memreg.AccessRemoteWrite); f != memreg.FaultInvalidated {
			t.Fatalf("remote use after invalidation: %v", f)
		}
		if f := b.regions.Invalidate(testPD, target.tokens.Local); f != memreg.FaultInvalidated {
			t.Fatalf("a later invalidation: %v, want it to fail", f)
		}
		// And a peer WRITE with the token now fails as an access error.
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, Context: 2, SGL: []SGE{src.sge(0, 8)},
			RemoteAddr: target.addr(0), RemoteToken: target.tokens.Remote}))
		checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusAccessViolation, ndkpi.OpWrite, 2)
		if !target.guardsIntact() || target.b[0] != 0xEE {
			t.Fatal("invalidated region written")
		}
	})
}

func TestSendAndInvalidate_InvalidTokenAbortsConnection(t *testing.T) {
	for _, c := range []struct {
		name  string
		token func(ok *buffer, plain *buffer) uint32
	}{
		{"UnknownToken", func(ok, _ *buffer) uint32 { return ok.tokens.Remote ^ 0x33 }},
		{"NotInvalidatable", func(_, plain *buffer) uint32 { return plain.tokens.Remote }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, pairOptions{})
			src := a.buffer(100, 0, false)
			dst := b.buffer(100, memreg.AccessLocalWrite, false)
			ok := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, true)
			plain := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
			mustPost(t, b.qps[0].PostReceive(1, []SGE{dst.sge(0, 100)}))
			mustPost(t, b.qps[0].PostReceive(2, []SGE{dst.sge(0, 100)}))
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSendInvalidate, Context: 1, SGL: []SGE{src.sge(0, 100)},
				InvalidateToken: c.token(ok, plain)}))
			mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 2, SGL: []SGE{src.sge(0, 100)}}))
			rs := waitCQ(t, b.rcq, 2, time.Second)
			if rs[0].Status != ndkpi.StatusAccessViolation || rs[0].ProviderErrorCode != wcRemInvReqErr || rs[1].Status != ndkpi.StatusCancelled {
				t.Fatalf("receiver completions %+v", rs)
			}
			ss := waitCQ(t, a.scq, 2, time.Second)
			checkEntry(t, ss[0], ndkpi.StatusRemoteResources, ndkpi.OpSend, 1)
			checkEntry(t, ss[1], ndkpi.StatusCancelled, ndkpi.OpSend, 2)
			if a.qps[0].State() != StateError || b.qps[0].State() != StateError {
				t.Fatal("connection not aborted")
			}
			if _, f := b.regions.CheckRemote(testPD, ok.tokens.Remote, ok.addr(0), 8, memreg.AccessRemoteWrite); f != memreg.OK {
				t.Fatalf("a valid token was touched: %v", f)
			}
		})
	}
}

func TestReceiveTooSmall(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	src := a.buffer(2000, 0, false)
	dst := b.buffer(1000, memreg.AccessLocalWrite, false)
	mustPost(t, b.qps[0].PostReceive(1, []SGE{dst.sge(0, 1000)}))
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: 1, SGL: []SGE{src.sge(0, 2000)}}))
	r := waitCQ(t, b.rcq, 1, time.Second)[0]
	if r.Status != ndkpi.StatusBufferOverflow || r.ProviderErrorCode != wcLocLenErr {
		t.Fatalf("receive %+v", r)
	}
	checkEntry(t, waitCQ(t, a.scq, 1, time.Second)[0], ndkpi.StatusRemoteResources, ndkpi.OpSend, 1)
	if !dst.guardsIntact() {
		t.Fatal("guard bytes changed")
	}
}

// TestScatterGather spreads a message over several SGEs on both sides.
func TestScatterGather(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	src := a.buffer(5000, memreg.AccessLocalWrite, false)
	fill(src.b, 11)
	dst := b.buffer(5000, memreg.AccessLocalWrite|memreg.AccessRemoteWrite|memreg.AccessRemoteRead, false)
	mustPost(t, b.qps[0].PostReceive(nil, []SGE{dst.sge(0, 1), dst.sge(1, 2047), dst.sge(2048, 100), dst.sge(2148, 2852)}))
	sgl := []SGE{src.sge(0, 700), src.sge(700, 1), src.sge(701, 3000), src.sge(3701, 1299)}
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: sgl}))
	waitCQ(t, b.rcq, 1, time.Second)
	sameBytes(t, "send sg", dst.b, src.b)
	clear(src.b)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, SGL: sgl, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	waitCQ(t, a.scq, 2, time.Second)
	sameBytes(t, "read sg", src.b, dst.b)
}
