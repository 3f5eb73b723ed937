package spin

import (
	"runtime"
	"runtime/metrics"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// SlowYield is a sched_yield that returned this late: another thread
	// kept the core for a time slice, so yielding to it costs the tail.
	SlowYield = 250 * time.Microsecond
	// Quiet is how long a Yielder yields only its P after a slow yield,
	// before it tries the thread again.
	Quiet = 50 * time.Millisecond
)

// Yielder yields a spinning goroutine's P and, while that is cheap, its
// thread. The zero value is ready. It belongs to one goroutine.
type Yielder struct {
	quietUntil int64 // ns since epoch before which only the P is yielded
	epoch      time.Time
	runnable   []metrics.Sample
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

// Yield yields the P (YieldP), then the thread unless a slow yield was
// seen in the last Quiet. It reports whether this yield was slow.
func (y *Yielder) Yield() (slow bool) {
	y.YieldP()
	if y.epoch.IsZero() {
		y.epoch = time.Now()
	}
	start := int64(time.Since(y.epoch))
	if start < y.quietUntil {
		return false
	}
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	end := int64(time.Since(y.epoch))
	if end-start <= int64(SlowYield) {
		return false
	}
	y.quietUntil = end + int64(Quiet)
	return true
}
