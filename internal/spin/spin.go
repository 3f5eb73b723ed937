package spin

import (
	"runtime"
	"runtime/metrics"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// SlowYield is a sched_yield that returned this late: another thread
	// kept the core for a time slice.
	SlowYield = time.Millisecond
	// SlowRun is how close together two slow yields show a thread that
	// keeps the core: a process computing beside the spinner hands it
	// back a slice (2-4ms) at a time, so its slow yields come one after
	// another, while among spinners that all yield one comes in thousands
	// (bpftrace over sched_yield: 18% of a flood test's yields took 1-8ms
	// beside two computing processes, 38 of 420,000 took over 256µs
	// through two daemons on two vCPUs).
	SlowRun = 10 * time.Millisecond
	// Quiet is how long a Yielder reports Quiet after the second slow
	// yield of a SlowRun.
	Quiet = 50 * time.Millisecond
)

// Yielder yields a spinning goroutine's P and its thread. The zero value
// is ready. It belongs to one goroutine.
type Yielder struct {
	epoch      time.Time
	lastSlow   time.Duration // since epoch; 0: none yet
	quietUntil time.Duration // since epoch
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

// Yield yields the P (YieldP), then the thread, and reports whether the
// thread's yield was slow (SlowYield).
//
// Slow yields in a run (two within SlowRun) mean a thread on this core
// that does not yield back, a process computing, and each further yield
// hands it a whole slice. The caller should then stop spinning and block
// (Quiet): the kernel wakes a blocked thread when its work comes. A
// spinner that instead kept spinning without yielding its thread became
// the thread that keeps the core: the other polling threads' yields came
// back slow in turn, and through two daemons on two vCPUs threads with
// work waited 3-4ms for the core (perf sched timehist: a client's
// consumer ran 3.65ms while four threads waited). A lone slow yield,
// which spinners that all yield see now and then, changes nothing:
// blocking after each made perf send_lat through daemons slower (p50
// 18-23 against 14-17µs).
func (y *Yielder) Yield() (slow bool) {
	y.YieldP()
	if y.epoch.IsZero() {
		y.epoch = time.Now()
	}
	start := time.Since(y.epoch)
	schedYield()
	end := time.Since(y.epoch)
	if end-start <= SlowYield {
		return false
	}
	if y.lastSlow != 0 && end-y.lastSlow < SlowRun {
		y.quietUntil = end + Quiet
	}
	y.lastSlow = end
	return true
}

// Quiet reports whether a run of slow yields ended within the last Quiet:
// the caller's spin should end in a blocking wait now.
func (y *Yielder) Quiet() bool {
	return !y.epoch.IsZero() && time.Since(y.epoch) < y.quietUntil
}

// schedYield yields the thread; a variable so that a test can see it.
// sched_yield never blocks, so it is a raw system call, as the runtime's
// own osyield: a spinner the runtime sees in system calls keeps its
// sysmon thread waking every 20µs instead of every 10ms
// (ndk/internal/rc's doc, "Polling", has the mechanism and the figures).
var schedYield = func() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
