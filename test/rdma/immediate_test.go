package rdma

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestImmediate: the immediate-data extension on the veth pair, in process
// and through the daemon, with one semantics. SEND and WRITE with
// immediate of 0 bytes, one packet and several (MTU 1500: PMTU 1024)
// carry the immediate to the peer's receive, which says it has one
// (ResultWithImmediate); the SEND's receive counts the bytes it holds,
// the WRITE's the WRITE's length with Type OpReceiveWriteWithImmediate
// and its buffer untouched; a plain receive has no flag; a WRITE with
// immediate waits out RNR NAKs for a receive, and completes once one is
// posted.
func TestImmediate(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		const n = 5000
		src := a.region(n, 0)
		fill(src.b, 9)
		rbuf := b.region(n, ndk.MRFlagAllowLocalWrite)
		dst := b.region(n, ndk.MRFlagAllowRemoteWrite)
		for _, size := range []int{0, 700, n} {
			imm := uint32(0xA5000000 + size)
			must(t, qb.Receive("rs", rbuf.sgl(0, n)))
			must(t, qb.Receive("rw", rbuf.sgl(0, 8)))
			must(t, qb.Receive("rp", rbuf.sgl(0, n)))
			must(t, qa.SendWithImmediate("s", src.sgl(0, size), 0, imm))
			must(t, qa.WriteWithImmediate("w", src.sgl(0, size), dst.mr.Addr(), dst.mr.RemoteToken(), 0, imm+1))
			must(t, qa.Send("p", src.sgl(0, size), 0))
			is := wait(t, a.ICQ, 3, 5*time.Second)
			expect(t, is[0], ndk.StatusSuccess, ndk.OpSend, "s")
			expect(t, is[1], ndk.StatusSuccess, ndk.OpWrite, "w")
			expect(t, is[2], ndk.StatusSuccess, ndk.OpSend, "p")
			rs := wait(t, b.RCQ, 3, 5*time.Second)
			expect(t, rs[0], ndk.StatusSuccess, ndk.OpReceive, "rs")
			expect(t, rs[1], ndk.StatusSuccess, ndk.OpReceiveWriteWithImmediate, "rw")
			expect(t, rs[2], ndk.StatusSuccess, ndk.OpReceive, "rp")
			for i, want := range []struct {
				flags ndk.ResultFlag
				imm   uint32
			}{{ndk.ResultWithImmediate, imm}, {ndk.ResultWithImmediate, imm + 1}, {0, 0}} {
				if r := rs[i]; r.Flags != want.flags || r.Immediate != want.imm || r.BytesTransferred != uint32(size) {
					t.Fatalf("%d bytes: receive %d: %+v, want flags %v immediate %#x", size, i, r, want.flags, want.imm)
				}
			}
			b.settle()
			same(t, "WRITE target", dst.b[:size], src.b[:size])
			same(t, "SEND receive", rbuf.b[:size], src.b[:size])
			if !dst.guardsIntact() || !rbuf.guardsIntact() {
				t.Fatal("guard bytes changed")
			}
			b.settle() // the reads above before the engine's next placement
		}

		t.Run("WriteWaitsForReceive", func(t *testing.T) {
			fill(src.b, 10)
			must(t, qa.WriteWithImmediate("w", src.sgl(0, n), dst.mr.Addr(), dst.mr.RemoteToken(), 0, 99))
			none(t, a.ICQ, 50*time.Millisecond)
			must(t, qb.Receive("late", rbuf.sgl(0, 8)))
			expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpWrite, "w")
			r := wait(t, b.RCQ, 1, 5*time.Second)[0]
			expect(t, r, ndk.StatusSuccess, ndk.OpReceiveWriteWithImmediate, "late")
			if r.Flags != ndk.ResultWithImmediate || r.Immediate != 99 || r.BytesTransferred != n {
				t.Fatalf("receive %+v", r)
			}
			b.settle()
			same(t, "WRITE target", dst.b, src.b)
			if st := b.Adapter.Stats()[0]; st.RNRSent == 0 {
				t.Fatalf("the responder sent no RNR NAK: %+v", st)
			}
		})
	})
}
