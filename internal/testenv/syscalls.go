package testenv

import (
	"runtime/metrics"
	"testing"
	"time"
)

// notInGo is the runtime's count of goroutines in a system call or cgo
// call.
const notInGo = "/sched/goroutines/not-in-go:goroutines"

// InSystemCalls returns how many goroutines of the process the runtime
// sees in a system call now; it fails the test on a runtime without the
// metric.
func InSystemCalls(t testing.TB) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: notInGo}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("%s is not supported by this runtime", notInGo)
	}
	return s[0].Value.Uint64()
}

// SystemCallSamples reads InSystemCalls as often as it can for d and
// returns how many samples it took and in how many more goroutines than
// base were in a system call.
func SystemCallSamples(t testing.TB, base uint64, d time.Duration) (samples, seen int) {
	t.Helper()
	s := []metrics.Sample{{Name: notInGo}}
	for start := time.Now(); time.Since(start) < d; samples++ {
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			t.Fatalf("%s is not supported by this runtime", notInGo)
		}
		if s[0].Value.Uint64() > base {
			seen++
		}
	}
	return samples, seen
}
