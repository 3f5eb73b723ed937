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

// TestSlowYields: every Yield yields the thread, slow or not, and reports
// a slow one; a lone slow yield leaves the Yielder spinning, while a
// second within SlowRun makes it Quiet (its caller blocks instead of
// spinning) for Quiet.
func TestSlowYields(t *testing.T) {
	var calls int
	slow := false
	defer func(f func()) { schedYield = f }(schedYield)
	schedYield = func() {
		calls++
		if slow {
			time.Sleep(SlowYield + time.Millisecond)
		}
	}
	var y Yielder
	if y.Yield() || y.Quiet() {
		t.Fatal("a fast yield was reported slow, or made the Yielder quiet")
	}
	slow = true
	if !y.Yield() {
		t.Fatal("a yield that came back after more than SlowYield was not reported slow")
	}
	if y.Quiet() {
		t.Fatal("one slow yield made the Yielder quiet")
	}
	if !y.Yield() {
		t.Fatal("the second slow yield was not reported slow")
	}
	if !y.Quiet() {
		t.Fatal("two slow yields within SlowRun did not make the Yielder quiet")
	}
	slow = false
	for i := range 10 {
		if y.Yield() {
			t.Errorf("fast yield %d reported slow", i)
		}
	}
	if calls != 13 {
		t.Fatalf("13 yields yielded the thread %d times", calls)
	}
	time.Sleep(Quiet + time.Millisecond)
	if y.Quiet() {
		t.Fatalf("still quiet %v after the slow yields", Quiet)
	}
	// Slow yields further apart than SlowRun are lone ones.
	slow = true
	var z Yielder
	z.Yield()
	time.Sleep(SlowRun)
	z.Yield()
	if z.Quiet() {
		t.Fatal("two slow yields more than SlowRun apart made the Yielder quiet")
	}
}

// A spinner that never finds a goroutine waiting still passes through the
// scheduler every SchedEvery, so the runtime's sysmon never takes its P
// (SchedEvery's doc), and no more often than that.
func TestYieldPSchedulesEverySchedEvery(t *testing.T) {
	defer func(f func()) { gosched = f }(gosched)
	var calls int
	gosched = func() { calls++ }
	var y Yielder
	start := time.Now()
	for time.Since(start) < 5*SchedEvery {
		y.YieldP()
	}
	elapsed := time.Since(start)
	// The runnable metric may count a goroutine of the test runner now
	// and then, which adds a yield; it never removes one.
	if min := int(elapsed/SchedEvery) - 1; calls < min {
		t.Fatalf("%d scheduler passes in %v of spinning with nothing runnable; want at least %d", calls, elapsed, min)
	}
	if calls > 1000 {
		t.Fatalf("%d scheduler passes in %v with nothing runnable: YieldP yields every call", calls, elapsed)
	}
}
