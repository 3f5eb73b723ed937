package spin

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestYieldPRunsAWaitingGoroutine: on one P, a goroutine made runnable
// runs only if the spinner yields; YieldP must see it waiting and yield.
func TestYieldPRunsAWaitingGoroutine(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	go ran.Store(true)
	var y Yielder
	for i := 0; i < 1000 && !ran.Load(); i++ {
		y.YieldP()
	}
	if !ran.Load() {
		t.Fatal("a runnable goroutine did not run across 1000 YieldP calls on one P")
	}
}

// TestYieldAllocatesNothing: the engines and consumers yield in their hot
// loops.
func TestYieldAllocatesNothing(t *testing.T) {
	var y Yielder
	y.Yield()
	if n := testing.AllocsPerRun(1000, func() { y.YieldP(); y.Yield() }); n != 0 {
		t.Fatalf("%v allocations per yield", n)
	}
}

// TestYieldAlwaysYieldsTheThread: a slow yield is reported, and the next
// Yield still gives the thread up. A spinner that kept its thread after a
// slow yield would hold the core for a whole slice against the other
// polling threads.
func TestYieldAlwaysYieldsTheThread(t *testing.T) {
	var calls int
	slow := true
	defer func(f func()) { schedYield = f }(schedYield)
	schedYield = func() {
		calls++
		if slow {
			time.Sleep(2 * SlowYield)
		}
	}
	var y Yielder
	if !y.Yield() {
		t.Fatal("a yield that came back after 2 x SlowYield was not reported slow")
	}
	slow = false
	for i := range 10 {
		if y.Yield() {
			t.Errorf("yield %d reported slow", i+2)
		}
	}
	if calls != 11 {
		t.Fatalf("11 yields yielded the thread %d times", calls)
	}
}
