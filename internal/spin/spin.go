package spin

import (
	"runtime"
	"runtime/metrics"
	"time"

	"golang.org/x/sys/unix"
)

// SlowYield is a sched_yield that returned this late: another thread
// kept the core for a time slice. Engines count them (the stats' slow
// yields), a sign of more polling threads than cores.
const SlowYield = 250 * time.Microsecond

// Yielder yields a spinning goroutine's P and its thread. The zero value
// is ready. It belongs to one goroutine.
type Yielder struct {
	epoch    time.Time
	runnable []metrics.Sample
}

// runnableMetric counts the goroutines waiting for a P.
const runnableMetric = "/sched/goroutines/runnable:goroutines"

// YieldP yields the P when a goroutine waits for one. runtime.Gosched
// also wakes an idle P's thread to look for work (wakep), which finds
// none when nothing waits, and goes back to sleep: two futex calls and a
// thread on another core per yield, the cost that made a ping-pong through
// the daemon 2-3x slower at GOMAXPROCS 2 than at 1 (ndk/internal/rc's doc,
// "Polling"). A goroutine readied while Ps are idle runs on one of them
// (the runtime wakes a thread for it then), so only one that waits for a
// P needs this one. Reading the count takes about 50ns and allocates
// nothing.
func (y *Yielder) YieldP() {
	if y.runnable == nil {
		y.runnable = []metrics.Sample{{Name: runnableMetric}}
	}
	metrics.Read(y.runnable)
	if v := y.runnable[0].Value; v.Kind() != metrics.KindUint64 || v.Uint64() > 0 {
		runtime.Gosched()
	}
}

// Yield yields the P (YieldP), then the thread, and reports whether the
// thread's yield was slow (SlowYield).
//
// It yields the thread every time, slow or not. A spinner that stops
// yielding its thread after a slow yield becomes the thread that keeps
// the core for a whole slice: the other polling threads' yields come back
// slow in turn and they stop too, and through two daemons on two vCPUs
// threads with work then waited 3-4ms for the core (perf sched timehist:
// a client's consumer ran 3.65ms while four threads waited). Measured
// through a daemon on each end, perf send_lat -n 5000, eight runs each:
// p99 103-207µs with that back-off, 53-141µs without; beside a process
// spinning on one core, in process, it made no difference (p99 28-79µs
// against 35-56µs).
func (y *Yielder) Yield() (slow bool) {
	y.YieldP()
	if y.epoch.IsZero() {
		y.epoch = time.Now()
	}
	start := time.Since(y.epoch)
	schedYield()
	return time.Since(y.epoch)-start > SlowYield
}

// schedYield yields the thread; a variable so that a test can see it.
var schedYield = func() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
