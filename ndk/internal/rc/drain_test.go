package rc

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

func drained(q *QP) bool {
	select {
	case <-q.Drained():
		return true
	default:
		return false
	}
}

// popNow takes n completions that must be in c already.
func popNow(t *testing.T, c *cq.CQ, n int) {
	t.Helper()
	var e cq.Entry
	for i := range n {
		if !c.Pop(&e) {
			t.Fatalf("completion %d of %d not there when Drained fired", i+1, n)
		}
		if e.Status != ndkpi.StatusCancelled {
			t.Fatalf("completion %+v, want CANCELLED", e)
		}
	}
}

// TestDrained_ClosesWhenFlushCompletes: a connected QP with requests
// outstanding is not drained; after Flush the channel closes, and by then
// every request has completed.
func TestDrained_ClosesWhenFlushCompletes(t *testing.T) {
	w := &wire{drop: func(dir porttest.Direction, _ *rocev2.Packet, _ int) bool { return dir == porttest.AtoB }}
	a, _ := newWiredPair(t, w, pairOptions{params: func(p *ConnParams) { p.AckTimeout = time.Hour }})
	q := a.qps[0]
	src := a.buffer(8, memreg.AccessLocalWrite, false)
	for i := range 5 {
		mustPost(t, q.PostSend(&SendWR{Op: OpSend, Context: i, SGL: []SGE{src.sge(0, 8)}}))
		mustPost(t, q.PostReceive(i, []SGE{src.sge(0, 8)}))
	}
	a.eng.Stats() // the engine has taken the posts
	if drained(q) {
		t.Fatal("drained while connected with requests outstanding")
	}
	q.Flush()
	select {
	case <-q.Drained():
	case <-time.After(5 * time.Second):
		t.Fatal("not drained 5 s after Flush")
	}
	popNow(t, a.scq, 5)
	popNow(t, a.rcq, 5)
	if s := q.State(); s != StateError {
		t.Fatalf("state %v after drain", s)
	}
}

// TestDrained_OnCloseAndEngineStop: closing a QP drains it, and so does
// stopping the engine for the QPs it still holds.
func TestDrained_OnCloseAndEngineStop(t *testing.T) {
	a, _ := newPair(t, pairOptions{qps: 2})
	if err := a.qps[0].Close(); err != nil {
		t.Fatal(err)
	}
	if !drained(a.qps[0]) {
		t.Fatal("closed QP not drained")
	}
	if drained(a.qps[1]) {
		t.Fatal("open QP drained")
	}
	a.eng.Close()
	if !drained(a.qps[1]) {
		t.Fatal("QP of a stopped engine not drained")
	}
}
