package spin

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
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

// The runtime never sees a spinner in a system call: sched_yield is a raw
// one (schedYield's doc). Through unix.Syscall a goroutine that spins on
// Yield is in a system call most of the time, where sysmon takes its P and
// from where it wakes sysmon out of its deep sleep.
func TestYieldIsNoSystemCallToTheRuntime(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	base := testenv.InSystemCalls(t)
	var stop, spinning atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		var y Yielder
		spinning.Store(true)
		for !stop.Load() {
			y.Yield()
		}
	}()
	for !spinning.Load() {
		runtime.Gosched()
	}
	// A spinner through unix.Syscall was seen in 56 to 66,000 of 200,000
	// samples, some runs' 10ms, and in 55-67% of those taken over 200ms.
	samples, seen := testenv.SystemCallSamples(t, base, 200*time.Millisecond)
	stop.Store(true)
	<-done
	// Another goroutine of the test binary may be in a system call now and
	// then, not hundreds of times.
	if seen > 100 {
		t.Fatalf("%d of %d samples saw a goroutine in a system call while one spun on Yield (none before it)", seen, samples)
	}
}
