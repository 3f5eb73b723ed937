package rc

import (
	"runtime/metrics"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
)

// countYields replaces yieldThread for the test and returns the count of
// the yields made since.
func countYields(t *testing.T) *int {
	t.Helper()
	n := new(int)
	was := yieldThread
	yieldThread = func() { *n++ }
	t.Cleanup(func() { yieldThread = was })
	return n
}

// TestEmptyPollsYieldTheThread: a consumer's empty polls (Progress) make
// it yield its thread every idleYieldEvery-th poll on an adaptive engine
// while no goroutine waits for a P, never while one waits (the
// consumer's Gosched hands it the P), never on a busy engine (a core per
// engine) or a PollProgress one (the poll runs the engine's turn
// instead); and the empty poll allocates nothing.
func TestEmptyPollsYieldTheThread(t *testing.T) {
	for _, c := range []struct {
		name    string
		poll    PollMode
		waiting bool
		yield   bool
	}{
		{"adaptive", PollAdaptive, false, true},
		{"adaptive/goroutine-waits", PollAdaptive, true, false},
		{"busy", PollBusy, false, false},
		{"progress", PollProgress, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, _ := newPair(t, pairOptions{poll: c.poll})
			yields := countYields(t)
			was := goroutineWaits
			goroutineWaits = func(*Engine) bool { return c.waiting }
			t.Cleanup(func() { goroutineWaits = was })
			const polls = 40 * idleYieldEvery
			for range polls {
				a.eng.Progress()
			}
			want := 0
			if c.yield {
				want = polls / idleYieldEvery
			}
			if *yields != want {
				t.Fatalf("%d empty polls yielded the thread %d times, want %d", polls, *yields, want)
			}
		})
	}
}

// TestEmptyPollAllocatesNothing: an adaptive engine's empty poll, which
// reads the runtime's count of runnable goroutines, allocates nothing.
func TestEmptyPollAllocatesNothing(t *testing.T) {
	a, _ := newPair(t, pairOptions{})
	countYields(t)
	a.eng.Progress()
	if n := testing.AllocsPerRun(400, func() { a.eng.Progress() }); n != 0 {
		t.Fatalf("an empty poll allocated %.2f times", n)
	}
	// The count was read: the sample holds a value of its kind.
	if k := a.eng.idleSample[0].Value.Kind(); k != metrics.KindUint64 {
		t.Fatalf("runnable goroutines not read (kind %v)", k)
	}
}

// TestFullSendQueueYieldsTheThread: a post that finds an adaptive
// engine's send queue full (the peer's ACKs dropped), no goroutine
// waiting for a P, yields the poster's thread once and fails with STATUS_INSUFFICIENT_RESOURCES; posts with
// room do not yield.
func TestFullSendQueueYieldsTheThread(t *testing.T) {
	const depth = 4
	a, _ := newPair(t, pairOptions{depth: depth, pipe: porttest.PipeConfig{
		Filter: func(porttest.Direction, []byte) porttest.Verdict { return porttest.Drop }}})
	src := a.buffer(64, 0, false)
	wr := SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 64)}}
	yields := countYields(t)
	was := goroutineWaits
	goroutineWaits = func(*Engine) bool { return false }
	t.Cleanup(func() { goroutineWaits = was })
	for i := range depth {
		if st := a.qps[0].PostSend(&wr); st != ndkpi.StatusSuccess {
			t.Fatalf("post %d: %v", i, st)
		}
	}
	if *yields != 0 {
		t.Fatalf("posts with room yielded %d times", *yields)
	}
	for i := 1; i <= 3; i++ {
		if st := a.qps[0].PostSend(&wr); st != ndkpi.StatusInsufficientResources {
			t.Fatalf("post to a full queue: %v, want STATUS_INSUFFICIENT_RESOURCES", st)
		}
		if *yields != i {
			t.Fatalf("%d posts to a full queue yielded %d times", i, *yields)
		}
	}
}
