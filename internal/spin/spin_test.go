package spin

import (
	"runtime"
	"sync/atomic"
	"testing"
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
