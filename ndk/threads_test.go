package ndk

import "testing"

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
