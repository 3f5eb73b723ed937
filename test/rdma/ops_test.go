package rdma

import (
	"fmt"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestSizes runs SEND, WRITE and READ of every size from 0 B to 16 MiB
// with the path-MTU boundaries (MTU-1, MTU, MTU+1) at 1024 (netdev MTU
// 1500) and 4096 (MTU 9000, multi-buffer frames), checking the bytes and
// the guard bytes around every region.
func TestSizes(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		for _, c := range []struct{ netdev, pmtu int }{{1500, 1024}, {9000, 4096}} {
			t.Run(fmt.Sprintf("MTU%d", c.netdev), func(t *testing.T) {
				s.mtu = c.netdev
				a, b := newHosts(t, s)
				if a.Adapter.PathMTU() != c.pmtu {
					t.Fatalf("path MTU %d, want %d", a.Adapter.PathMTU(), c.pmtu)
				}
				qa, qb := a.pairWith(b, ndk.ConnectOptions{})
				m := c.pmtu
				sizes := []int{0, 1, m - 1, m, m + 1, 2*m - 1, 2 * m, 2*m + 1, 64 << 10, 1 << 20, 16 << 20}
				for _, n := range sizes {
					t.Run(fmt.Sprintf("%dB", n), func(t *testing.T) {
						d := 30 * time.Second
						src := a.region(n, ndk.MRFlagAllowLocalWrite)
						fill(src.b, uint64(n))
						// SEND
						dst := b.region(n, ndk.MRFlagAllowLocalWrite)
						must(t, qb.Receive("r", dst.sgl(0, n)))
						must(t, qa.Send("s", src.sgl(0, n), 0))
						r := wait(t, b.RCQ, 1, d)[0]
						expect(t, r, ndk.StatusSuccess, ndk.OpReceive, "r")
						if r.BytesTransferred != uint32(n) {
							t.Fatalf("received %d bytes", r.BytesTransferred)
						}
						expect(t, wait(t, a.ICQ, 1, d)[0], ndk.StatusSuccess, ndk.OpSend, "s")
						same(t, "send", dst.b, src.b)
						// WRITE
						wdst := b.region(n, ndk.MRFlagAllowRemoteWrite)
						must(t, qa.Write("w", src.sgl(0, n), wdst.mr.Addr(), wdst.mr.RemoteToken(), 0))
						expect(t, wait(t, a.ICQ, 1, d)[0], ndk.StatusSuccess, ndk.OpWrite, "w")
						b.settle()
						same(t, "write", wdst.b, src.b)
						// READ
						rsrc := b.region(n, ndk.MRFlagAllowRemoteRead)
						fill(rsrc.b, uint64(n)+1)
						b.settle()
						sink := a.region(n, ndk.MRFlagAllowLocalWrite)
						must(t, qa.Read("rd", sink.sgl(0, n), rsrc.mr.Addr(), rsrc.mr.RemoteToken(), 0))
						expect(t, wait(t, a.ICQ, 1, d)[0], ndk.StatusSuccess, ndk.OpRead, "rd")
						same(t, "read", sink.b, rsrc.b)
						b.settle()
						for _, r := range []*region{src, dst, wdst, rsrc, sink} {
							if !r.guardsIntact() {
								t.Fatal("guard bytes changed")
							}
						}
					})
				}
			})
		}
	})
}

// TestManyQPs runs 64 connected QP pairs at once, each with its own
// traffic, and checks every message.
func TestManyQPs(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		const nqp, msgs, size = 64, 8, 3000
		a, b := newHosts(t, s)
		qas := make([]*ndk.QP, nqp)
		qbs := make([]*ndk.QP, nqp)
		srcs := make([]*region, nqp)
		dsts := make([]*region, nqp)
		for i := range qas {
			qas[i], qbs[i] = a.qp(i), b.qp(i)
			connect(t, a, b, qas[i], qbs[i], ndk.ConnectOptions{})
			srcs[i] = a.region(size, 0)
			fill(srcs[i].b, uint64(i))
			dsts[i] = b.region(size*msgs, ndk.MRFlagAllowLocalWrite)
			for k := 0; k < msgs; k++ {
				must(t, qbs[i].Receive(k, dsts[i].sgl(k*size, size)))
			}
		}
		errs := make(chan error, nqp)
		for i := range qas {
			go func(i int) {
				for k := 0; k < msgs; k++ {
					if err := qas[i].Send(k, srcs[i].sgl(0, size), 0); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}(i)
		}
		for range qas {
			must(t, <-errs)
		}
		rs := wait(t, b.RCQ, nqp*msgs, 30*time.Second)
		next := make(map[any]int)
		for _, r := range rs {
			if r.Status != ndk.StatusSuccess || r.BytesTransferred != size {
				t.Fatalf("receive %+v", r)
			}
			if r.RequestContext != next[r.QPContext] {
				t.Fatalf("QP %v: receive %v out of order", r.QPContext, r.RequestContext)
			}
			next[r.QPContext]++
		}
		for _, s := range wait(t, a.ICQ, nqp*msgs, 10*time.Second) {
			if s.Status != ndk.StatusSuccess {
				t.Fatalf("send %+v", s)
			}
		}
		for i := range dsts {
			for k := 0; k < msgs; k++ {
				same(t, fmt.Sprintf("qp %d msg %d", i, k), dsts[i].b[k*size:(k+1)*size], srcs[i].b)
			}
		}
	})
}
