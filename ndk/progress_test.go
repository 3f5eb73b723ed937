package ndk

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestProgressPostAndPollAllocateNothing: under PollProgress the posts
// and the empty polls run the engines' turns on the caller's goroutine,
// and a round trip still allocates nothing.
func TestProgressPostAndPollAllocateNothing(t *testing.T) {
	x, y := pipePairWith(t, true, Options{Polling: PollProgress})
	src := make([]byte, 64)
	dst := make([]byte, 64)
	smr, _ := x.pd.RegisterMR(src, 0)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ss, _ := smr.SGE(0, 64)
	ds, _ := dmr.SGE(0, 64)
	ssgl, dsgl := []SGE{ss}, []SGE{ds}
	ctx := new(int)
	var rs [4]Result
	var rx [1]ResultEx
	// Each adapter's polls drive its own engine only; the yield lets the
	// peer's engine goroutine run (AllocsPerRun runs on one P).
	wait := func(c *CQ) {
		for c.GetResults(rs[:1]) == 0 {
			runtime.Gosched()
		}
	}
	round := func() {
		_ = y.qp.Receive(ctx, dsgl)
		_ = x.qp.Send(ctx, ssgl, 0)
		wait(x.icq)
		for y.rcq.GetResultsEx(rx[:]) == 0 {
			runtime.Gosched()
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	before := x.a.Stats()[0].ConsumerTurns
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per Receive+Send+GetResults round trip", n)
	}
	if x.a.Stats()[0].ConsumerTurns == before {
		t.Fatal("no consumer turn ran")
	}
}

// TestProgressManyConsumers: a sender, a receiver and goroutines polling
// other CQs of both adapters (each empty poll a turn of the engines)
// contend for the turns with the engine goroutines; every message arrives
// once and in order. Run it under -race.
func TestProgressManyConsumers(t *testing.T) {
	const msgs = 500
	x, y := pipePairWith(t, true, Options{Polling: PollProgress})
	src := make([]byte, 64*16)
	dst := make([]byte, 64*16)
	smr, _ := x.pd.RegisterMR(src, 0)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	for i := 0; i < 16; i++ {
		ds, _ := dmr.SGE(i*64, 64)
		if err := y.qp.Receive(i, []SGE{ds}); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg, pollers sync.WaitGroup
	errs := make(chan string, 4)
	wg.Add(2)
	go func() { // sender, 8 in flight
		defer wg.Done()
		var rs [8]Result
		sent, done := 0, 0
		for done < msgs && !stop.Load() {
			if sent < msgs && sent-done < 8 {
				slot := sent % 16
				binary.LittleEndian.PutUint64(src[slot*64:], uint64(sent))
				ss, _ := smr.SGE(slot*64, 64)
				if err := x.qp.Send(nil, []SGE{ss}, 0); err != nil {
					errs <- err.Error()
					return
				}
				sent++
				continue
			}
			n := x.icq.GetResults(rs[:])
			for _, r := range rs[:n] {
				if r.Status != StatusSuccess {
					errs <- "send failed"
					return
				}
			}
			done += n
			if n == 0 {
				runtime.Gosched()
			}
		}
	}()
	go func() { // receiver
		defer wg.Done()
		var rs [1]Result
		for n := 0; n < msgs && !stop.Load(); {
			if y.rcq.GetResults(rs[:]) == 0 {
				runtime.Gosched()
				continue
			}
			slot := rs[0].RequestContext.(int)
			if rs[0].Status != StatusSuccess || binary.LittleEndian.Uint64(dst[slot*64:]) != uint64(n) {
				errs <- "receive out of order or failed"
				return
			}
			n++
			ds, _ := dmr.SGE(slot*64, 64)
			if err := y.qp.Receive(slot, []SGE{ds}); err != nil {
				errs <- err.Error()
				return
			}
		}
	}()
	for _, a := range []*Adapter{x.a, y.a, x.a, y.a} {
		c, err := a.CreateCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			var rs [1]Result
			for !stop.Load() {
				if c.GetResults(rs[:]) != 0 {
					errs <- "a completion on a CQ no QP uses"
					return
				}
				runtime.Gosched()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Error("traffic did not finish within 60s")
	}
	stop.Store(true)
	<-finished
	pollers.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
