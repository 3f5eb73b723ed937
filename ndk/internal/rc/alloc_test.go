package rc

import (
	"runtime"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// TestPostAndCompleteAllocateNothing runs whole round trips (post a
// receive, post a SEND and a WRITE, both engines move the frames, pop the
// completions) and counts every allocation in the process.
func TestPostAndCompleteAllocateNothing(t *testing.T) {
	a, b := newPair(t, pairOptions{})
	src := a.buffer(3000, 0, false)
	dst := b.buffer(3000, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	ctx := new(int)
	sendSGL := []SGE{src.sge(0, 3000)}
	recvSGL := []SGE{dst.sge(0, 3000)}
	send := SendWR{Op: OpSend, Context: ctx, SGL: sendSGL}
	write := SendWR{Op: OpWrite, Context: ctx, SGL: sendSGL, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}
	inline := SendWR{Op: OpSend, Flags: ndkpi.OpFlagInline, Context: ctx, SGL: []SGE{src.sge(0, 200)}}
	var e cq.Entry
	wait := func(c *cq.CQ) {
		for !c.Pop(&e) {
			runtime.Gosched()
		}
		if e.Status != ndkpi.StatusSuccess {
			t.Fatalf("completion %+v", e)
		}
	}
	round := func() {
		b.qps[0].PostReceive(ctx, recvSGL)
		b.qps[0].PostReceive(ctx, recvSGL)
		a.qps[0].PostSend(&send)
		a.qps[0].PostSend(&write)
		a.qps[0].PostSend(&inline)
		wait(a.scq)
		wait(a.scq)
		wait(a.scq)
		wait(b.rcq)
		wait(b.rcq)
	}
	for i := 0; i < 50; i++ { // warm up: maps, pipe buffers, lazily grown slices
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per round trip, want 0", n)
	}
}

// BenchmarkSendRoundTrip measures one 64-byte SEND from post to both
// completions over the in-memory pipe, engines busy-polling.
func BenchmarkSendRoundTrip(b *testing.B) {
	x, y := newPair(b, pairOptions{})
	src := x.buffer(64, 0, false)
	dst := y.buffer(64, memreg.AccessLocalWrite, false)
	wr := SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 64)}}
	rs := []SGE{dst.sge(0, 64)}
	var e cq.Entry
	b.ReportAllocs()
	for b.Loop() {
		y.qps[0].PostReceive(nil, rs)
		x.qps[0].PostSend(&wr)
		for !x.scq.Pop(&e) {
			runtime.Gosched()
		}
		for !y.rcq.Pop(&e) {
			runtime.Gosched()
		}
	}
}
