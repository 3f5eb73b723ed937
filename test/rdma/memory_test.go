package rdma

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestSeedCompletion_LaterNdkInvalidateFails is seed 002's rule on the veth
// pair with NdkInvalidate itself: after a peer's SendAndInvalidate of a
// fast-registered MR's (or a bound window's) token, the receiver's own
// Invalidate of it completes in error.
func TestSeedCompletion_LaterNdkInvalidateFails(t *testing.T) {
	for _, kind := range []string{"FastRegisteredMR", "BoundMW"} {
		t.Run(kind, func(t *testing.T) {
			a, b := newHosts(t, setup{})
			qa, qb := a.pairWith(b, ndk.ConnectOptions{})
			mem := make([]byte, 256)
			var obj ndk.Invalidatable
			var token uint32
			if kind == "FastRegisteredMR" {
				mr, err := b.PD.CreateMR(true)
				must(t, err)
				must(t, mr.InitializeFastRegister(1, true))
				must(t, qb.FastRegister("reg", mr, mem, ndk.OpFlagAllowRemoteWrite))
				expect(t, wait(t, b.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpFastRegister, "reg")
				obj, token = mr, mr.RemoteToken()
			} else {
				mr, err := b.PD.RegisterMR(mem, ndk.MRFlagAllowRemoteWrite)
				must(t, err)
				mw, err := b.PD.CreateMW()
				must(t, err)
				must(t, qb.Bind("reg", mr, mw, mr.Addr(), 256, ndk.OpFlagAllowRemoteWrite))
				expect(t, wait(t, b.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpBind, "reg")
				obj, token = mw, mw.RemoteToken()
			}
			dst := b.region(8, ndk.MRFlagAllowLocalWrite)
			must(t, qb.Receive("r", dst.sgl(0, 8)))
			src := a.region(8, 0)
			must(t, qa.SendAndInvalidate("si", src.sgl(0, 8), 0, token))
			r := wait(t, b.RCQ, 1, 5*time.Second)[0]
			expect(t, r, ndk.StatusSuccess, ndk.OpReceiveAndInvalidate, "r")
			if uint32(r.TypeSpecificCompletionOutput) != token {
				t.Fatalf("invalidated token %#x, want %#x", r.TypeSpecificCompletionOutput, token)
			}
			expect(t, wait(t, a.ICQ, 1, 5*time.Second)[0], ndk.StatusSuccess, ndk.OpSend, "si")
			must(t, qb.Invalidate("later", obj, 0))
			expect(t, wait(t, b.ICQ, 1, 5*time.Second)[0], ndk.StatusInvalidDeviceRequest, ndk.OpInvalidate, "later")
		})
	}
}

// TestSRQ_SharedByQPsOverVeth: 16 QPs take their receives from one SRQ on
// the veth pair; each SEND completes on its QP's context.
func TestSRQ_SharedByQPsOverVeth(t *testing.T) {
	a, b := newHosts(t, setup{})
	srq, err := b.PD.CreateSRQ(64, 1, 0, nil)
	must(t, err)
	dst := b.region(64*16, ndk.MRFlagAllowLocalWrite)
	for i := range 16 {
		must(t, srq.Receive(i, dst.sgl(i*64, 64)))
	}
	src := a.region(64, 0)
	var qas []*ndk.QP
	for i := range 16 {
		qa := a.qp(i)
		qb := b.qpWith(i, ndk.QPConfig{InitiatorQueueDepth: 4, MaxInitiatorRequestSGE: 1, SRQ: srq})
		connect(t, a, b, qa, qb, ndk.ConnectOptions{})
		qas = append(qas, qa)
	}
	for i, qa := range qas {
		must(t, qa.Send(i, src.sgl(0, 64), ndk.OpFlagSilentSuccess))
	}
	seen := map[any]bool{}
	for _, r := range wait(t, b.RCQ, 16, 10*time.Second) {
		if r.Status != ndk.StatusSuccess || r.BytesTransferred != 64 || seen[r.QPContext] {
			t.Fatalf("receive %+v", r)
		}
		seen[r.QPContext] = true
	}
	if srq.Len() != 0 {
		t.Fatalf("%d receives left on the SRQ", srq.Len())
	}
}
