package rc

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestQPSnapshotCountsAsTheEngine: with every request to B lost, the
// requester's QP shows the same timeouts, retransmissions and frames as
// its engine (one QP), its peer and PSNs, then the error state, and the
// engine counts the exhaustion.
func TestQPSnapshotCountsAsTheEngine(t *testing.T) {
	w := &wire{drop: func(dir porttest.Direction, p *rocev2.Packet, _ int) bool { return dir == porttest.AtoB }}
	a, b := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.RetryCount = 3; p.AckTimeout = time.Millisecond }})
	src := a.buffer(10, 0, false)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, Context: 1, SGL: []SGE{src.sge(0, 10)}}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusIOTimeout, ndkpi.OpWrite, 1)
	st := a.eng.Stats()
	qs := a.eng.QPs()
	if len(qs) != 1 {
		t.Fatalf("%d QPs in the snapshot, want 1", len(qs))
	}
	q := qs[0]
	if q.QPN != a.qps[0].QPN() || q.State != StateError || q.PeerQPN != b.qps[0].QPN() || !q.PeerIP.IsValid() {
		t.Errorf("snapshot %+v; want QP %d in error, peer QP %d", q, a.qps[0].QPN(), b.qps[0].QPN())
	}
	if q.Timeouts != st.Timeouts || q.Retransmits != st.Retransmits || q.FramesOut != st.FramesOut || q.Timeouts != 4 {
		t.Errorf("QP: %d timeouts, %d retransmits, %d frames out; engine: %d, %d, %d", q.Timeouts, q.Retransmits, q.FramesOut, st.Timeouts, st.Retransmits, st.FramesOut)
	}
	if q.Outstanding != 0 || q.FramesIn != 0 {
		t.Errorf("%d requests outstanding after the failure, %d frames in", q.Outstanding, q.FramesIn)
	}
	if st.RetryExceeded != 1 || st.RNRRetryExceeded != 0 {
		t.Errorf("retry exceeded %d, RNR retry exceeded %d; want 1 and 0", st.RetryExceeded, st.RNRRetryExceeded)
	}
	// The one packet sent, never delivered: B still expects its PSN.
	if bs := b.eng.QPs(); len(bs) != 1 || bs[0].FramesIn != 0 || bs[0].ExpectedPSN != (q.SendPSN-1)&rocev2.PSNMask {
		t.Errorf("responder's snapshot %+v: nothing arrived, it expects PSN %d", bs, (q.SendPSN-1)&rocev2.PSNMask)
	}
}
