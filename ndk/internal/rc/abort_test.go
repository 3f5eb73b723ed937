package rc

import (
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// failures records Config.QPFailed reports by host.
type failures struct {
	mu  sync.Mutex
	got map[byte][]uint32 // ib_wc_status values, in order
}

func (f *failures) report(host byte, _, wc uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.got == nil {
		f.got = map[byte][]uint32{}
	}
	f.got[host] = append(f.got[host], wc)
}

func (f *failures) of(host byte) []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint32(nil), f.got[host]...)
}

// The engine reports a QP that fails on its own, once, with the
// ib_wc_status behind it, on the side that sent the fatal NAK and on the
// side that received it (seed 004: the connection must then be aborted);
// a consumer's Flush is not such a failure.
func TestQPFailedReportsTransportFailures(t *testing.T) {
	t.Run("InvalidTokenBothSides", func(t *testing.T) {
		var f failures
		a, b := newPair(t, pairOptions{qpFailed: f.report})
		src := a.buffer(8, 0, false)
		dst := b.buffer(8, memreg.AccessLocalWrite, false)
		mustPost(t, b.qps[0].PostReceive(0, []SGE{dst.sge(0, 8)}))
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSendInvalidate, SGL: []SGE{src.sge(0, 8)}, InvalidateToken: 0xdead}))
		waitCQ(t, a.scq, 1, 5*time.Second)
		waitCQ(t, b.rcq, 1, 5*time.Second)
		for _, host := range []byte{1, 2} {
			if got := f.of(host); len(got) != 1 || got[0] != wcRemInvReqErr {
				t.Errorf("host %d reported %v, want one IB_WC_REM_INV_REQ_ERR (%d)", host, got, wcRemInvReqErr)
			}
		}
	})
	t.Run("RetryExceeded", func(t *testing.T) {
		var f failures
		w := &wire{drop: func(porttest.Direction, *rocev2.Packet, int) bool { return true }}
		a, _ := newWiredPair(t, w, pairOptions{qpFailed: f.report, params: func(p *ConnParams) {
			p.AckTimeout, p.RetryCount = time.Millisecond, 1
		}})
		src := a.buffer(8, 0, false)
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}}))
		waitCQ(t, a.scq, 1, 5*time.Second)
		if got := f.of(1); len(got) != 1 || got[0] != wcRetryExcErr {
			t.Errorf("reported %v, want one IB_WC_RETRY_EXC_ERR (%d)", got, wcRetryExcErr)
		}
	})
	t.Run("FlushIsNotAFailure", func(t *testing.T) {
		var f failures
		a, _ := newPair(t, pairOptions{qpFailed: f.report})
		a.qps[0].Flush()
		<-a.qps[0].Drained()
		if got := f.of(1); len(got) != 0 {
			t.Fatalf("flush reported as a failure: %v", got)
		}
	})
}
