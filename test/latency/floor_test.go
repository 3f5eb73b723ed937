package latency

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
)

// The floor is what the machine itself allows a ping-pong: two processes
// that spin on a shared cache line and compute for a fixed time per
// message, with no system call, no network and no sleep. Its median is
// set to the median of the latency test it stands beside, so its tail is
// what interruptions the processes cannot see (timer ticks, the
// hypervisor taking the vCPU) add to a round trip of that length. On a
// VM whose every tick costs tens of microseconds, a p99 of 3x the median
// can be beyond reach before any transport runs; the benchmarks report
// the floor's ratios in the same run so that a reader can tell the
// machine's share of a tail from ours.

// floorEnv makes the test binary the floor's answering side (TestMain):
// "PATH ITERATIONS N", the shared file, the work per message in
// iterations of floorWork, and the messages to answer.
const (
	floorEnv   = "NDKXDP_LATENCY_FLOOR"
	floorLimit = time.Minute
)

// The shared file's words, a cache line apart: the client's message
// number, the answer, and a flag the answering side sets once mapped.
const (
	floorPing  = 0
	floorPong  = 64
	floorReady = 128
	floorSize  = 4096
)

// floorSink keeps floorWork's result observable, so the loop is kept.
var floorSink atomic.Uint64

// floorWork computes for a time proportional to n and does nothing else:
// a dependent chain of multiplications, which neither the compiler nor
// the CPU can shorten.
func floorWork(n int) {
	x := floorSink.Load()
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	floorSink.Store(x)
}

// floorRate is floorWork's iterations per nanosecond, the best of many
// short timings: a slower one was interrupted, and on a loaded machine a
// long one always is, which would make the work shorter than asked.
func floorRate() float64 {
	const n = 10_000
	best := time.Hour
	for range 200 {
		t := time.Now()
		floorWork(n)
		best = min(best, time.Since(t))
	}
	return n / float64(max(best.Nanoseconds(), 1))
}

// floorMap maps the shared file.
func floorMap(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(floorSize); err != nil {
		return nil, err
	}
	return unix.Mmap(int(f.Fd()), 0, floorSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func word(m []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&m[off]))
}

// await spins until w holds v, and reports false if end passes first.
func await(w *atomic.Uint64, v uint64, end time.Time) bool {
	for spins := 0; w.Load() != v; spins++ {
		if spins&0xFFFF == 0 && time.Now().After(end) {
			return false
		}
	}
	return true
}

// floorServe is the answering side: for each message, wait for it, work,
// answer. It gives up after floorLimit, so that a client that died does
// not leave it spinning.
func floorServe(arg string) {
	f := strings.Fields(arg)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(2)
	}
	if len(f) != 3 {
		fail(fmt.Errorf("want PATH ITERATIONS N, got %q", arg))
	}
	iters, err1 := strconv.Atoi(f[1])
	n, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		fail(fmt.Errorf("bad arguments %q", arg))
	}
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	m, err := floorMap(f[0])
	if err != nil {
		fail(err)
	}
	ping, pong := word(m, floorPing), word(m, floorPong)
	word(m, floorReady).Store(1)
	end := time.Now().Add(floorLimit)
	for i := uint64(1); i <= n; i++ {
		if !await(ping, i, end) {
			fail(fmt.Errorf("no message %d within %v", i, floorLimit))
		}
		floorWork(iters)
		pong.Store(i)
	}
}

// measureFloor runs n round trips of the floor whose every half round
// trip works for half µs, and returns perftest's row of them, with
// perftest's rules (perftest.LatOf): half round trips, or whole ones if
// whole (as read_lat reports). The answering side is a process of its
// own; this side runs on a locked thread of the test process.
func measureFloor(tb testing.TB, half float64, n int, whole bool) Lat {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "floor")
	m, err := floorMap(path)
	if err != nil {
		tb.Fatalf("floor: %v", err)
	}
	defer unix.Munmap(m)
	iters := int(floorRate() * half * 1000)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", floorEnv, path, iters, n))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("floor: start the answering side: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()

	// posted[i] is when message i+1 was started, as perftest stamps a
	// post; the last is when the last answer came.
	posted := make([]uint64, n+1)
	res := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ping, pong, ready := word(m, floorPing), word(m, floorPong), word(m, floorReady)
		end := time.Now().Add(floorLimit)
		if !await(ready, 1, end) {
			res <- fmt.Errorf("the answering side did not start")
			return
		}
		base := time.Now()
		for i := uint64(1); i <= uint64(n); i++ {
			posted[i-1] = uint64(time.Since(base))
			floorWork(iters)
			ping.Store(i)
			if !await(pong, i, end) {
				res <- fmt.Errorf("no answer %d within %v", i, floorLimit)
				return
			}
		}
		posted[n] = uint64(time.Since(base))
		res <- nil
	}()
	select {
	case err = <-res:
	case werr := <-done:
		done <- werr // for the deferred wait
		if werr == nil {
			// It exits once it has answered all n, and this side may
			// not have seen the last answer yet (its thread preempted):
			// its result comes, at the latest when floorLimit ends.
			err = <-res
		} else {
			err = fmt.Errorf("the answering side exited: %v", werr)
		}
	}
	if err != nil {
		tb.Fatalf("floor: %v", err)
	}
	st := perftest.LatOf(posted, !whole)
	return Lat{Typical: st.Typical, P99: st.Percentile99, P999: st.Percentile999, Max: st.Max}
}

// TestFloor: the floor's median follows the work asked for, and its
// answering side ends once it has answered.
func TestFloor(t *testing.T) {
	for _, half := range []float64{5, 20} {
		l := measureFloor(t, half, 2000, false)
		t.Logf("work %vµs per half round trip: p50 %.2f p99 %.2f p99.9 %.2f max %.1f µs", half, l.Typical, l.P99, l.P999, l.Max)
		if l.Typical < 0.8*half || l.Typical > 2*half+5 {
			t.Errorf("work %vµs per half round trip: median %.2fµs", half, l.Typical)
		}
		if l.P99 < l.Typical || l.P999 < l.P99 || l.Max < l.P999 {
			t.Errorf("percentiles out of order: %+v", l)
		}
	}
}
