package ndk

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestThreadLockingPolicy(t *testing.T) {
	for _, c := range []struct {
		policy             ThreadLocking
		queues, gomaxprocs int
		want               bool
	}{
		{LockAuto, 1, 2, false}, // one engine and the consumers share 2 cores
		{LockAuto, 1, 3, true},  // a core for the engine, two for the rest
		{LockAuto, 0, 3, true},  // Queues 0 means one queue
		{LockAuto, 2, 3, false},
		{LockAuto, 2, 4, true},
		{LockAuto, 4, 64, true},
		{LockAlways, 4, 2, true},
		{LockNever, 1, 64, false},
	} {
		if got := c.policy.locks(c.queues, c.gomaxprocs); got != c.want {
			t.Errorf("policy %d, %d queues, GOMAXPROCS %d: locks = %v, want %v", c.policy, c.queues, c.gomaxprocs, got, c.want)
		}
	}
}

// TestOpen_EngineCPUsRefused: Open refuses, before it touches the
// interface, an engine CPU the process may not run on (outside its
// affinity mask) or one that is no CPU at all.
func TestOpen_EngineCPUsRefused(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	notOurs := 0
	for set.IsSet(notOurs) {
		notOurs++
	}
	for _, cpus := range [][]int{{-1}, {notOurs}, {0, 1 << 20}} {
		a, err := Open("ndkxdp-no-such-if", Options{EngineCPUs: cpus})
		if a != nil {
			a.Close()
		}
		if st := StatusOf(err); st != StatusInvalidParameter || !strings.Contains(err.Error(), "engine CPU") {
			t.Errorf("EngineCPUs %v: %v (%v), want STATUS_INVALID_PARAMETER naming the engine CPU", cpus, err, st)
		}
	}
}
