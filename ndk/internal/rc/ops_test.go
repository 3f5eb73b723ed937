package rc

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// sizesFor lists message sizes around the path-MTU boundaries.
func sizesFor(mtu rocev2.MTU, big bool) []int {
	m := mtu.Bytes()
	s := []int{0, 1, 3, m - 1, m, m + 1, 2*m - 1, 2 * m, 2*m + 1, 7*m + 3, 64 << 10}
	if big {
		s = append(s, 1<<20, 16<<20)
	}
	return s
}

func TestSendReceiveSizes(t *testing.T) {
	for _, mtu := range []rocev2.MTU{rocev2.MTU1024, rocev2.MTU4096} {
		t.Run(mtu.String(), func(t *testing.T) {
			a, b := newPair(t, pairOptions{mtu: mtu})
			for i, n := range sizesFor(mtu, !testing.Short()) {
				src := a.buffer(n, 0, false)
				dst := b.buffer(n+8, memreg.AccessLocalWrite, false)
				fill(src.b, uint64(n))
				mustPost(t, b.qps[0].PostReceive(i, []SGE{dst.sge(0, n+8)}))
				mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, Context: i, SGL: []SGE{src.sge(0, n)}}))
				r := waitCQ(t, b.rcq, 1, 20*time.Second)[0]
				checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, i)
				if r.BytesTransferred != uint32(n) {
					t.Fatalf("size %d: BytesTransferred %d", n, r.BytesTransferred)
				}
				checkEntry(t, waitCQ(t, a.scq, 1, 20*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpSend, i)
				sameBytes(t, sizeName(n), dst.b[:n], src.b)
				if !dst.guardsIntact() {
					t.Fatalf("size %d: guard bytes changed", n)
				}
			}
		})
	}
}

func TestWriteSizes(t *testing.T) {
	for _, mtu := range []rocev2.MTU{rocev2.MTU1024, rocev2.MTU4096} {
		t.Run(mtu.String(), func(t *testing.T) {
			a, b := newPair(t, pairOptions{mtu: mtu})
			for i, n := range sizesFor(mtu, !testing.Short()) {
				src := a.buffer(n, 0, false)
				dst := b.buffer(n, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
				fill(src.b, uint64(n)+1)
				mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, Context: i, SGL: []SGE{src.sge(0, n)},
					RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
				checkEntry(t, waitCQ(t, a.scq, 1, 20*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, i)
				sameBytes(t, sizeName(n), dst.b, src.b)
				if !dst.guardsIntact() {
					t.Fatalf("size %d: guard bytes changed", n)
				}
			}
		})
	}
}

func TestReadSizes(t *testing.T) {
	for _, mtu := range []rocev2.MTU{rocev2.MTU1024, rocev2.MTU4096} {
		t.Run(mtu.String(), func(t *testing.T) {
			a, b := newPair(t, pairOptions{mtu: mtu})
			for i, n := range sizesFor(mtu, !testing.Short()) {
				sink := a.buffer(n, memreg.AccessLocalWrite, false)
				src := b.buffer(n, memreg.AccessRemoteRead, false)
				fill(src.b, uint64(n)+2)
				mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpRead, Context: i, SGL: []SGE{sink.sge(0, n)},
					RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
				checkEntry(t, waitCQ(t, a.scq, 1, 20*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpRead, i)
				sameBytes(t, sizeName(n), sink.b, src.b)
				if !sink.guardsIntact() {
					t.Fatalf("size %d: guard bytes changed", n)
				}
			}
		})
	}
}
