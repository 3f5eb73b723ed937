package rdma

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// Seed 003 (NdkSend) and 000/004 (NdkSendAndInvalidate), one test per
// rule, over the veth pair. ndk/SEEDS.md maps rules to these names.

func TestSend_NotConnectedReturnsConnectionInvalid(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, _ := newHosts(t, s)
		q := a.qp(nil)
		src := a.region(8, 0)
		for name, post := range map[string]func() error{
			"Send":              func() error { return q.Send(nil, src.sgl(0, 8), 0) },
			"SendAndInvalidate": func() error { return q.SendAndInvalidate(nil, src.sgl(0, 8), 0, 1) },
			"Write":             func() error { return q.Write(nil, src.sgl(0, 8), 0x1000, 1, 0) },
			"Read":              func() error { return q.Read(nil, src.sgl(0, 8), 0x1000, 1, 0) },
		} {
			if err := post(); !errors.Is(err, ndk.ErrConnectionInvalid) {
				t.Errorf("%s before connect: %v", name, err)
			}
		}
		// Receives may be posted before the connection.
		dst := a.region(8, ndk.MRFlagAllowLocalWrite)
		must(t, q.Receive(nil, dst.sgl(0, 8)))
		none(t, a.ICQ, 10*time.Millisecond)
	})
}

func TestSend_RejectsUndocumentedFlags(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, _ := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(8, 0)
		for _, f := range []ndk.OpFlag{ndk.OpFlagAllowRemoteRead, ndk.OpFlagAllowLocalWrite, ndk.OpFlagRDMAReadSink, ndk.OpFlagRDMAReadLocalInvalidate, 0x400} {
			if err := qa.Send(nil, src.sgl(0, 8), f); !errors.Is(err, ndk.ErrInvalidParameter) {
				t.Errorf("Send with %v: %v", f, err)
			}
			if err := qa.SendAndInvalidate(nil, src.sgl(0, 8), f, 1); !errors.Is(err, ndk.ErrInvalidParameter) {
				t.Errorf("SendAndInvalidate with %v: %v", f, err)
			}
		}
		none(t, a.ICQ, 10*time.Millisecond)
	})
}

func TestSend_RequestContextInResult(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(100, 0)
		dst := b.region(100, ndk.MRFlagAllowLocalWrite)
		type tag struct{ n int }
		sctx, rctx := &tag{1}, &tag{2}
		must(t, qb.Receive(rctx, dst.sgl(0, 100)))
		must(t, qa.Send(sctx, src.sgl(0, 100), 0))
		var r [1]ndk.Result // plain NdkGetCqResults
		for deadline := time.Now().Add(5 * time.Second); b.RCQ.GetResults(r[:]) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("no receive")
			}
		}
		if r[0].RequestContext != rctx || r[0].QPContext != "b" {
			t.Fatalf("receive result %+v", r[0])
		}
		sent := wait(t, a.ICQ, 1, 5*time.Second)[0]
		if sent.RequestContext != sctx || sent.QPContext != "a" {
			t.Fatalf("send result %+v", sent)
		}
	})
}

func TestSeedSend_SolicitEventNotifiesPeer(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		var fired atomic.Int32
		s.cqNotify = func(ndk.Status) { fired.Add(1) }
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(3000, 0)
		dst := b.region(3000, ndk.MRFlagAllowLocalWrite)
		for i := 0; i < 3; i++ {
			must(t, qb.Receive(i, dst.sgl(0, 3000)))
		}
		must(t, b.RCQ.Arm(ndk.CQNotifySolicited))
		// Related sends: only the last carries SEND_AND_SOLICIT_EVENT.
		must(t, qa.Send(0, src.sgl(0, 3000), 0))
		must(t, qa.Send(1, src.sgl(0, 3000), 0))
		wait(t, a.ICQ, 2, 5*time.Second)
		time.Sleep(20 * time.Millisecond)
		if fired.Load() != 0 {
			t.Fatal("a SOLICITED arm fired for unsolicited receives")
		}
		must(t, qa.Send(2, src.sgl(0, 3000), ndk.OpFlagSendAndSolicitEvent))
		wait(t, a.ICQ, 1, 5*time.Second)
		for deadline := time.Now().Add(5 * time.Second); fired.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the solicited receive did not notify")
			}
		}
		if n := len(wait(t, b.RCQ, 3, time.Second)); n != 3 {
			t.Fatalf("%d receives", n)
		}
	})
}

func TestSeedSend_ErrorCompletionMatchesSolicited(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		var fired atomic.Int32
		s.cqNotify = func(ndk.Status) { fired.Add(1) }
		a, b := newHosts(t, s)
		_, qb := a.pairWith(b, ndk.ConnectOptions{})
		dst := b.region(8, ndk.MRFlagAllowLocalWrite)
		must(t, qb.Receive(1, dst.sgl(0, 8)))
		must(t, b.RCQ.Arm(ndk.CQNotifySolicited))
		qb.Flush() // the receive completes with an error status
		expect(t, wait(t, b.RCQ, 1, 5*time.Second)[0], ndk.StatusCancelled, ndk.OpReceive, 1)
		for deadline := time.Now().Add(5 * time.Second); fired.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("an error completion did not satisfy the SOLICITED arm")
			}
		}
	})
}

func TestSend_SilentSuccessCompletesOnlyOnFailure(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, _ := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(64, 0)
		dst := b.region(64, ndk.MRFlagAllowRemoteWrite)
		fill(src.b, 3)
		for i := 0; i < 8; i++ {
			must(t, qa.Write(i, src.sgl(0, 64), dst.mr.Addr(), dst.mr.RemoteToken(), ndk.OpFlagSilentSuccess))
		}
		must(t, qa.Write(8, src.sgl(0, 64), dst.mr.Addr(), dst.mr.RemoteToken(), 0))
		expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpWrite, 8)
		none(t, a.ICQ, 10*time.Millisecond)
		b.settle()
		same(t, "silent writes", dst.b, src.b)
		// A silent request that fails still completes.
		must(t, qa.Write(9, src.sgl(0, 64), dst.mr.Addr(), dst.mr.RemoteToken()^0x55, ndk.OpFlagSilentSuccess))
		expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusAccessViolation, ndk.OpWrite, 9)
	})
}

func TestSend_ReadFenceWaitsForReads(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		const n = 4 << 20
		sink := a.region(n, ndk.MRFlagAllowLocalWrite)
		src := b.region(n, ndk.MRFlagAllowRemoteRead)
		msg := a.region(8, 0)
		dst := b.region(8, ndk.MRFlagAllowLocalWrite)
		must(t, qb.Receive("recv", dst.sgl(0, 8)))
		must(t, qa.Read("read", sink.sgl(0, n), src.mr.Addr(), src.mr.RemoteToken(), ndk.OpFlagDefer))
		must(t, qa.Send("send", msg.sgl(0, 8), ndk.OpFlagReadFence))
		// The fenced SEND leaves only after the READ completed, so the READ's
		// completion is seen before the peer's receive. The SEND's own
		// completion may come at any point once the peer has it (its ACK can
		// beat our poll of the peer's CQ): keep it, do not drop it.
		var order []string
		var sent *ndk.ResultEx
		var r [1]ndk.ResultEx
		pollA := func() {
			if a.ICQ.GetResultsEx(r[:]) == 1 {
				switch r[0].RequestContext {
				case "read":
					order = append(order, "read")
				case "send":
					c := r[0]
					sent = &c
				default:
					t.Fatalf("unexpected completion %+v", r[0])
				}
			}
		}
		for deadline := time.Now().Add(10 * time.Second); len(order) < 2; {
			pollA()
			if b.RCQ.GetResultsEx(r[:]) == 1 {
				// The READ may have completed, and the SEND crossed the pair,
				// between our poll of a.ICQ above and this one: its
				// completion, pushed before the SEND left, is there now.
				if len(order) == 0 {
					pollA()
				}
				if len(order) == 0 {
					t.Fatal("the fenced SEND arrived before the READ completed")
				}
				order = append(order, "recv")
			}
			if time.Now().After(deadline) {
				t.Fatalf("events %v", order)
			}
		}
		if sent == nil {
			sent = &wait(t, a.ICQ, 1, 10*time.Second)[0]
		}
		expect(t, *sent, ndk.StatusSuccess, ndk.OpSend, "send")
	})
}

func TestSend_InlineIgnoresTokenAndSgeLimit(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		c := defaultQP
		c.ReceiveCQ, c.InitiatorCQ, c.MaxInitiatorRequestSGE = a.RCQ, a.ICQ, 1
		qa, err := a.PD.CreateQP(c)
		must(t, err)
		qb := b.qp(nil)
		connect(t, a, b, qa, qb, ndk.ConnectOptions{})
		raw := make([]byte, 200) // never registered
		fill(raw, 4)
		want := append([]byte(nil), raw...)
		sgl := []ndk.SGE{
			{Addr: addr(raw[:100]), Length: 100, Token: 0xdeadbeef},
			{Addr: addr(raw[100:]), Length: 100},
		}
		dst := b.region(200, ndk.MRFlagAllowLocalWrite)
		must(t, qb.Receive(nil, dst.sgl(0, 200)))
		must(t, qa.Send(1, sgl, ndk.OpFlagInline)) // two SGEs over a limit of one
		clear(raw)                                 // inline bytes were taken at post time
		expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpSend, 1)
		wait(t, b.RCQ, 1, 5*time.Second)
		same(t, "inline", dst.b, want)
	})
}

func TestSend_InlineOverLimitRejected(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, _ := a.pairWith(b, ndk.ConnectOptions{}) // InlineDataSize 256
		raw := make([]byte, 257)
		err := qa.Send(nil, []ndk.SGE{{Addr: addr(raw), Length: 257}}, ndk.OpFlagInline)
		if !errors.Is(err, ndk.ErrInvalidParameter) {
			t.Fatalf("257 inline bytes: %v", err)
		}
		none(t, a.ICQ, 10*time.Millisecond)
	})
}

func TestSend_DeferBatchesDoorbell(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(8, 0)
		dst := b.region(8, ndk.MRFlagAllowLocalWrite)
		for i := 0; i < 3; i++ {
			must(t, qb.Receive(i, dst.sgl(0, 8)))
		}
		must(t, qa.Send(0, src.sgl(0, 8), ndk.OpFlagDefer))
		must(t, qa.Send(1, src.sgl(0, 8), ndk.OpFlagDefer))
		none(t, b.RCQ, 30*time.Millisecond) // no doorbell: nothing left
		must(t, qa.Send(2, src.sgl(0, 8), 0))
		for i, r := range wait(t, b.RCQ, 3, 5*time.Second) {
			expect(t, r, ndk.StatusSuccess, ndk.OpReceive, i)
		}
	})
}

// TestSend_InlineFailureRingsDeferredDoorbell: a post that fails inline
// still submits the DEFER posts before it (NDKPI.md §8), as a successful
// post without DEFER would.
func TestSend_InlineFailureRingsDeferredDoorbell(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(8, 0)
		dst := b.region(8, ndk.MRFlagAllowLocalWrite)
		for i := 0; i < 2; i++ {
			must(t, qb.Receive(i, dst.sgl(0, 8)))
		}
		must(t, qa.Send(0, src.sgl(0, 8), ndk.OpFlagDefer))
		must(t, qa.Send(1, src.sgl(0, 8), ndk.OpFlagDefer))
		none(t, b.RCQ, 30*time.Millisecond) // no doorbell: nothing left
		bad := src.sge(0, 8)
		bad.Token ^= 0x5a
		if err := qa.Send(2, []ndk.SGE{bad}, 0); !errors.Is(err, ndk.ErrAccessViolation) {
			t.Fatalf("send with a bad local token: %v", err)
		}
		for i, r := range wait(t, b.RCQ, 2, 5*time.Second) {
			expect(t, r, ndk.StatusSuccess, ndk.OpReceive, i)
		}
	})
}

func TestSend_DoesNotBlockWhenQueueFull(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		c := defaultQP
		c.ReceiveCQ, c.InitiatorCQ, c.InitiatorQueueDepth = a.RCQ, a.ICQ, 4
		qa, err := a.PD.CreateQP(c)
		must(t, err)
		qb := b.qp(nil)
		connect(t, a, b, qa, qb, ndk.ConnectOptions{})
		src := a.region(8, 0)
		// No receive at the peer: RNR NAKs keep the sends queued.
		for i := 0; i < 4; i++ {
			must(t, qa.Send(i, src.sgl(0, 8), 0))
		}
		// However long they have been on their way (through a daemon,
		// its relay has moved them out of the shared ring by now).
		time.Sleep(20 * time.Millisecond)
		start := time.Now()
		if err := qa.Send(4, src.sgl(0, 8), 0); !errors.Is(err, ndk.ErrInsufficientResources) {
			t.Fatalf("post on a full queue: %v", err)
		}
		if d := time.Since(start); d > 10*time.Millisecond {
			t.Fatalf("the refused post took %v", d)
		}
		none(t, a.ICQ, 10*time.Millisecond)
	})
}

func TestSendAndInvalidate(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(2000, 0)
		fill(src.b, 5)
		dst := b.region(2000, ndk.MRFlagAllowLocalWrite)
		target := b.regionWith(4096, ndk.MRFlagAllowRemoteWrite|ndk.MRFlagAllowRemoteRead, true)
		tok := target.mr.RemoteToken()
		must(t, qb.Receive("r", dst.sgl(0, 2000)))
		must(t, qa.SendAndInvalidate("s", src.sgl(0, 2000), 0, tok))

		t.Run("InitiatorCompletionTypeSend", func(t *testing.T) {
			expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpSend, "s")
		})
		r := wait(t, b.RCQ, 1, 5*time.Second)[0]
		t.Run("ReceiverCompletionCarriesToken", func(t *testing.T) {
			expect(t, r, ndk.StatusSuccess, ndk.OpReceiveAndInvalidate, "r")
			if r.TypeSpecificCompletionOutput != uint64(tok) || r.BytesTransferred != 2000 {
				t.Fatalf("receive %+v, want token %#x", r, tok)
			}
			same(t, "payload", dst.b, src.b)
		})
		t.Run("ReceiverTokenInvalidated", func(t *testing.T) {
			// A later use of the token fails, and touches nothing.
			must(t, qa.Write("w", src.sgl(0, 8), target.mr.Addr(), tok, 0))
			expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusAccessViolation, ndk.OpWrite, "w")
			b.settle()
			if target.b[0] != 0xEE || !target.guardsIntact() {
				t.Fatal("the invalidated region was written")
			}
		})
	})
}

func TestInvalidate_AfterRemoteInvalidationFails(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		// The second invalidation of the same token fails, which aborts the
		// connection (seed 002: "a later NdkInvalidate of that token fails").
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(8, 0)
		dst := b.region(8, ndk.MRFlagAllowLocalWrite)
		target := b.regionWith(64, ndk.MRFlagAllowRemoteWrite, true)
		for i := 0; i < 2; i++ {
			must(t, qb.Receive(i, dst.sgl(0, 8)))
		}
		must(t, qa.SendAndInvalidate(0, src.sgl(0, 8), 0, target.mr.RemoteToken()))
		must(t, qa.SendAndInvalidate(1, src.sgl(0, 8), 0, target.mr.RemoteToken()))
		rs := wait(t, b.RCQ, 2, 5*time.Second)
		expect(t, rs[0], ndk.StatusSuccess, ndk.OpReceiveAndInvalidate, 0)
		if rs[1].Status == ndk.StatusSuccess {
			t.Fatalf("second invalidation succeeded: %+v", rs[1])
		}
		ss := wait(t, a.ICQ, 2, 5*time.Second)
		expect(t, ss[0], ndk.StatusSuccess, ndk.OpSend, 0)
		expect(t, ss[1], ndk.StatusRemoteResources, ndk.OpSend, 1)
	})
}

func TestSendAndInvalidate_InvalidTokenAbortsConnection(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(8, 0)
		dst := b.region(8, ndk.MRFlagAllowLocalWrite)
		plain := b.region(64, ndk.MRFlagAllowRemoteWrite) // registered with RegisterMR: not invalidatable
		for i := 0; i < 2; i++ {
			must(t, qb.Receive(i, dst.sgl(0, 8)))
		}
		must(t, qa.SendAndInvalidate(0, src.sgl(0, 8), 0, plain.mr.RemoteToken()^0x77))
		must(t, qa.Send(1, src.sgl(0, 8), 0))
		rs := wait(t, b.RCQ, 2, 5*time.Second)
		expect(t, rs[0], ndk.StatusAccessViolation, ndk.OpReceiveAndInvalidate, 0)
		expect(t, rs[1], ndk.StatusCancelled, ndk.OpReceive, 1)
		ss := wait(t, a.ICQ, 2, 5*time.Second)
		expect(t, ss[0], ndk.StatusRemoteResources, ndk.OpSend, 0)
		expect(t, ss[1], ndk.StatusCancelled, ndk.OpSend, 1)
		if qa.Connected() || qb.Connected() {
			t.Fatal("connection not aborted")
		}
		// Posts after the abort complete CANCELLED.
		must(t, qa.Send(2, src.sgl(0, 8), ndk.OpFlagSilentSuccess))
		expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusCancelled, ndk.OpSend, 2)
	})
}

// Seed 002: a ReceiveAndInvalidate completion is retrievable with plain
// GetResults (no Ex fields).
func TestSeedCompletion_ReceiveAndInvalidateViaGetResults(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, qb := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(8, 0)
		dst := b.region(8, ndk.MRFlagAllowLocalWrite)
		target := b.regionWith(64, ndk.MRFlagAllowRemoteWrite, true)
		must(t, qb.Receive("r", dst.sgl(0, 8)))
		must(t, qa.SendAndInvalidate(nil, src.sgl(0, 8), 0, target.mr.RemoteToken()))
		var r [1]ndk.Result
		for deadline := time.Now().Add(5 * time.Second); b.RCQ.GetResults(r[:]) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("no receive")
			}
		}
		if r[0].Status != ndk.StatusSuccess || r[0].RequestContext != "r" || r[0].BytesTransferred != 8 {
			t.Fatalf("result %+v", r[0])
		}
	})
}

// Seed 001: with RDMA_READ_SINK_NOT_REQUIRED, a read sink needs no special
// flag, and passing RDMA_READ_SINK never fails a request.
func TestSeedRegisterMr_ReadSinkNotRequired(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		if a.Adapter.Info().AdapterFlags&ndk.AdapterFlagRDMAReadSinkNotRequired == 0 {
			t.Fatal("adapter does not report RDMA_READ_SINK_NOT_REQUIRED")
		}
		qa, _ := a.pairWith(b, ndk.ConnectOptions{})
		src := b.region(512, ndk.MRFlagAllowRemoteRead|ndk.MRFlagRDMAReadSink)
		fill(src.b, 8)
		b.settle()
		for i, flags := range []ndk.MRFlag{ndk.MRFlagAllowLocalWrite, ndk.MRFlagAllowLocalWrite | ndk.MRFlagRDMAReadSink, ndk.MRFlagRDMAReadSink} {
			sink := a.region(512, flags)
			must(t, qa.Read(i, sink.sgl(0, 512), src.mr.Addr(), src.mr.RemoteToken(), 0))
			expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpRead, i)
			same(t, flags.String(), sink.b, src.b)
		}
	})
}

func TestFlush_CancelsEveryPendingRequest(t *testing.T) {
	forEachMode(t, func(t *testing.T, s setup) {
		a, b := newHosts(t, s)
		qa, _ := a.pairWith(b, ndk.ConnectOptions{})
		src := a.region(8, ndk.MRFlagAllowLocalWrite)
		// No receives at the peer: the sends wait on RNR NAKs.
		for i := 0; i < 5; i++ {
			must(t, qa.Send(i, src.sgl(0, 8), 0))
			must(t, qa.Receive(i, src.sgl(0, 8)))
		}
		qa.Flush()
		ss := wait(t, a.ICQ, 5, 5*time.Second)
		rs := wait(t, a.RCQ, 5, 5*time.Second)
		for i := 0; i < 5; i++ {
			expect(t, ss[i], ndk.StatusCancelled, ndk.OpSend, i)
			expect(t, rs[i], ndk.StatusCancelled, ndk.OpReceive, i)
		}
	})
}
