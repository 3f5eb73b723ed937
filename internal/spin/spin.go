package spin

import (
	"runtime"
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
}

// Yield yields the P, then the thread unless a slow yield was seen in the
// last Quiet. It reports whether this yield was slow.
func (y *Yielder) Yield() (slow bool) {
	runtime.Gosched()
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
