package rc

import (
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestPostAndCompleteAllocateNothing runs whole round trips (post a
// receive, post a SEND and a WRITE, both engines move the frames, pop the
// completions) and counts every allocation in the process, over RC QPs
// and over UC ones.
func TestPostAndCompleteAllocateNothing(t *testing.T) {
	for _, uc := range []bool{false, true} {
		name := "RC"
		if uc {
			name = "UC"
		}
		t.Run(name, func(t *testing.T) { testPostAndCompleteAllocateNothing(t, uc) })
	}
}

func testPostAndCompleteAllocateNothing(t *testing.T, uc bool) {
	a, b := newPair(t, pairOptions{uc: uc})
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

// TestDuplicatesAllocateNothing: the paths this round of hardening added
// to every frame (the destination checks, the AETH syndrome check) and to
// duplicates (re-validating a duplicate READ and WRITE, replaying under
// the engine's budget) allocate nothing. The frames run through B's
// engine on its own goroutine, so only the engines' work is counted.
func TestDuplicatesAllocateNothing(t *testing.T) {
	// A shallow pipe: its frame buffers, allocated as they are first
	// needed, are all out after the warm-up.
	a, b := newPair(t, pairOptions{pipe: porttest.PipeConfig{Depth: 64}})
	qa, qb := a.qps[0], b.qps[0]
	src := b.buffer(8192, memreg.AccessRemoteRead|memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
	sink := a.buffer(8192, memreg.AccessLocalWrite, false)
	var e cq.Entry
	mustPost(t, qa.PostSend(&SendWR{Op: OpWrite, SGL: []SGE{sink.sge(0, 64)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpRead, SGL: []SGE{sink.sge(0, 8192)}, RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	for n := 0; n < 2; {
		if a.scq.Pop(&e) {
			if e.Status != ndkpi.StatusSuccess {
				t.Fatalf("completion %+v", e)
			}
			n++
		}
		runtime.Gosched()
	}
	var readPSN rocev2.PSN
	if err := b.eng.do(func() { readPSN = qb.t.res[0].first }); err != nil {
		t.Fatal(err)
	}
	frame := func(op rocev2.Opcode, psn rocev2.PSN, dst netip.Addr, f func(h *rocev2.Headers)) []byte {
		h := rocev2.Headers{
			Eth: rocev2.EthernetFields{Dst: b.mac, Src: a.mac},
			IP:  rocev2.NewIPFields(a.ip, dst),
			UDP: rocev2.UDPFields{SrcPort: 0xC000},
			BTH: rocev2.BTHFields{Opcode: op, PSN: psn, PKey: rocev2.DefaultPKey, DestQP: qb.QPN(), AckReq: true},
		}
		f(&h)
		n := 0
		if op == rocev2.RCWriteOnly {
			n = 64
		}
		buf := make([]byte, h.FrameLen(n))
		if _, err := h.Encode(buf, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	reth := func(n uint32) func(h *rocev2.Headers) {
		return func(h *rocev2.Headers) {
			h.RETH = rocev2.RETHFields{VA: src.addr(0), RKey: src.tokens.Remote, DMALen: n}
		}
	}
	frames := [][]byte{
		frame(rocev2.RCReadRequest, readPSN, b.ip, reth(8192)),                                 // duplicate READ: re-validated, replayed
		frame(rocev2.RCWriteOnly, readPSN.Add(rocev2.PSNMask), b.ip, reth(64)),                 // duplicate WRITE: re-validated, re-ACKed
		frame(rocev2.RCWriteOnly, readPSN, netip.MustParseAddr("198.18.0.9"), reth(64)),        // another host's: dropped
		frame(rocev2.RCAck, readPSN, b.ip, func(h *rocev2.Headers) { h.AETH.Syndrome = 0x40 }), // nothing outstanding: stale
	}
	var allocs float64
	var before, after Stats
	if err := b.eng.do(func() {
		eng := b.eng
		round := func() {
			for _, f := range frames {
				if err := rocev2.Parse(f, &eng.pkt); err != nil {
					t.Fatal(err)
				}
				eng.dispatch(f, false)
			}
			// The duplicate READ reads as a lost answer and paces the QP
			// (congestion.go), which the frozen clock here would never
			// release: this test is about the replay budget.
			qb.t.cc = dcqcn{}
			for len(eng.active) > 0 {
				eng.replayLeft = replayBudget
				eng.transmit()
				_ = eng.port.Flush()
			}
		}
		for range 50 { // warm up: the pipe's frame buffers grow to what is in flight
			round()
		}
		before = eng.snapshot()
		allocs = testing.AllocsPerRun(100, round)
		after = eng.snapshot()
	}); err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Fatalf("%.2f allocations per round of duplicates, want 0", allocs)
	}
	if after.Duplicates-before.Duplicates < 200 || after.WrongDestination == before.WrongDestination || after.ReplaysDeferred == before.ReplaysDeferred {
		t.Fatalf("the frames did not take the paths meant: before %+v after %+v", before, after)
	}
}

// TestDroppedFramesAllocateNothing: frames the engine drops and counts (a
// bad ICRC, a foreign P_Key, an unknown QP) cost no allocation.
func TestDroppedFramesAllocateNothing(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	badICRC := h.send(rocev2.RCSendOnly, h.nextPSN(), make([]byte, 8), 0)
	badICRC[len(badICRC)-1] ^= 0xFF
	hd := h.hdr(rocev2.RCSendOnly, h.nextPSN())
	hd.BTH.PKey = 0x1234
	badPKey := h.frame(hd, make([]byte, 8))
	hd = h.hdr(rocev2.RCSendOnly, h.nextPSN())
	hd.BTH.DestQP = 0x777
	unknownQP := h.frame(hd, make([]byte, 8))
	c := &h.b.eng.c
	round := func() {
		icrc, pkey, qp := atomic.LoadUint64(&c.BadICRC), atomic.LoadUint64(&c.BadPKey), atomic.LoadUint64(&c.UnknownQP)
		h.inj.inject(badICRC, badPKey, unknownQP)
		for atomic.LoadUint64(&c.BadICRC) == icrc || atomic.LoadUint64(&c.BadPKey) == pkey || atomic.LoadUint64(&c.UnknownQP) == qp {
			runtime.Gosched()
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per round of three dropped frames, want 0", n)
	}
}
