package main

import (
	"runtime"
	"testing"
)

// TestLatencyProcs: a latency test runs on one P per engine (one for a
// daemon's client), tests running at once in one process get the sum, and
// the last to end gives the process its Ps back; GOMAXPROCS in the
// environment is left alone.
func TestLatencyProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	orig := runtime.GOMAXPROCS(0)
	n, restore := latencyProcs(0)
	if n != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("a daemon client's latency test: %d Ps (GOMAXPROCS %d), want 1", n, runtime.GOMAXPROCS(0))
	}
	m, restore2 := latencyProcs(2)
	if m != 3 || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("beside it, a test with two engines: %d Ps (GOMAXPROCS %d), want 3", m, runtime.GOMAXPROCS(0))
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Fatalf("after the first ends: GOMAXPROCS %d, want 2", got)
	}
	restore2()
	if got := runtime.GOMAXPROCS(0); got != orig {
		t.Fatalf("after both end: GOMAXPROCS %d, want %d", got, orig)
	}

	t.Setenv("GOMAXPROCS", "2")
	runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(orig)
	if n, restore := latencyProcs(0); n != 2 || runtime.GOMAXPROCS(0) != 2 {
		t.Fatalf("with GOMAXPROCS=2 set: %d Ps (GOMAXPROCS %d), want 2", n, runtime.GOMAXPROCS(0))
	} else {
		restore()
	}
}
