package rdma

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestRemoteAccessViolations: a bad token, out-of-bounds ranges, a WRITE
// without REMOTE_WRITE, a READ without REMOTE_READ and an invalidated token
// fail as NDKPI.md §9 maps IB's remote access error (WRITE:
// STATUS_ACCESS_VIOLATION; READ: STATUS_REMOTE_RESOURCES, NdkRead's status
// for reading beyond the remote region), the connection fails on both
// sides, and no byte changes outside (or inside) the regions.
func TestRemoteAccessViolations(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		const n = 3000
		cases := []struct {
			name  string
			read  bool
			flags ndk.MRFlag
			inval bool
			addr  func(*region) uint64
			token func(*region) uint32
		}{
			{"WriteBadToken", false, ndk.MRFlagAllowRemoteWrite, false, start, func(r *region) uint32 { return r.mr.RemoteToken() ^ 0x5a }},
			{"WriteLocalTokenAsRemote", false, ndk.MRFlagAllowRemoteWrite, false, start, func(r *region) uint32 { return r.mr.LocalToken() }},
			{"WriteOutOfBoundsEnd", false, ndk.MRFlagAllowRemoteWrite, false, func(r *region) uint64 { return r.mr.Addr() + 1 }, remote},
			{"WriteOutOfBoundsStart", false, ndk.MRFlagAllowRemoteWrite, false, func(r *region) uint64 { return r.mr.Addr() - 1 }, remote},
			{"WriteWithoutRemoteWrite", false, ndk.MRFlagAllowRemoteRead | ndk.MRFlagAllowLocalWrite, false, start, remote},
			{"WriteInvalidatedToken", false, ndk.MRFlagAllowRemoteWrite, true, start, remote},
			{"ReadBadToken", true, ndk.MRFlagAllowRemoteRead, false, start, func(r *region) uint32 { return r.mr.RemoteToken() + 0x100 }},
			{"ReadOutOfBounds", true, ndk.MRFlagAllowRemoteRead, false, func(r *region) uint64 { return r.mr.Addr() + 2 }, remote},
			{"ReadWithoutRemoteRead", true, ndk.MRFlagAllowRemoteWrite, false, start, remote},
			{"ReadInvalidatedToken", true, ndk.MRFlagAllowRemoteRead, true, start, remote},
		}
		a, b := newHosts(t, s)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				qa, qb := a.pairWith(b, ndk.ConnectOptions{})
				local := a.region(n, ndk.MRFlagAllowLocalWrite)
				fill(local.b, 1)
				tg := b.regionWith(n, c.flags, c.inval)
				fill(tg.b, 2)
				if c.inval {
					// Invalidate the target through the wire first.
					dst := b.region(8, ndk.MRFlagAllowLocalWrite)
					must(t, qb.Receive(nil, dst.sgl(0, 8)))
					must(t, qa.SendAndInvalidate("inv", local.sgl(0, 8), 0, tg.mr.RemoteToken()))
					expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpSend, "inv")
					wait(t, b.RCQ, 1, 5*time.Second)
				}
				b.settle()
				targetBefore := append([]byte(nil), tg.all...)
				localBefore := append([]byte(nil), local.all...)
				want, typ := ndk.StatusAccessViolation, ndk.OpWrite
				if c.read {
					want, typ = ndk.StatusRemoteResources, ndk.OpRead
					must(t, qa.Read(1, local.sgl(0, n), c.addr(tg), c.token(tg), 0))
				} else {
					must(t, qa.Write(1, local.sgl(0, n), c.addr(tg), c.token(tg), 0))
				}
				must(t, qa.Send(2, local.sgl(0, 1), 0))
				es := wait(t, a.ICQ, 2, 5*time.Second)
				expect(t, es[0], want, typ, 1)
				expect(t, es[1], ndk.StatusCancelled, ndk.OpSend, 2)
				b.settle()
				same(t, "target and its guards", tg.all, targetBefore)
				same(t, "local memory and its guards", local.all, localBefore)
				for deadline := time.Now().Add(time.Second); qb.Connected(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the responder's QP stayed connected")
					}
				}
				if qa.Connected() {
					t.Fatal("the requester's QP stayed connected")
				}
				must(t, qa.Close())
				must(t, qb.Close())
			})
		}
	})
}

func start(r *region) uint64  { return r.mr.Addr() }
func remote(r *region) uint32 { return r.mr.RemoteToken() }
