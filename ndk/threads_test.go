package ndk

import (
	"runtime"
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

// TestPollingPolicy: PollAuto, the zero value, is progress where
// GOMAXPROCS exceeds the engines plus one and adaptive elsewhere; an
// explicit mode stays as given; each mode is named as -polling names it.
func TestPollingPolicy(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	if (Options{}).Polling != PollAuto {
		t.Fatalf("the zero Options poll %v, want auto", (Options{}).Polling)
	}
	for _, c := range []struct {
		mode          PollingMode
		queues, procs int
		want          PollingMode
	}{
		{PollAuto, 1, 2, PollAdaptive}, // the engine and a consumer on 2 Ps
		{PollAuto, 1, 3, PollProgress},
		{PollAuto, 0, 3, PollProgress}, // Queues 0 is one queue
		{PollAuto, 1, 16, PollProgress},
		{PollAuto, 4, 5, PollAdaptive},
		{PollAuto, 4, 6, PollProgress},
		{PollAdaptive, 1, 16, PollAdaptive},
		{PollBusy, 1, 16, PollBusy},
		{PollProgress, 1, 1, PollProgress},
	} {
		runtime.GOMAXPROCS(c.procs)
		if got := c.mode.Resolve(c.queues); got != c.want {
			t.Errorf("%v with %d queues at GOMAXPROCS %d: %v, want %v", c.mode, c.queues, c.procs, got, c.want)
		}
	}
	for m, name := range map[PollingMode]string{PollAuto: "auto", PollAdaptive: "adaptive", PollBusy: "busy", PollProgress: "progress", 9: "PollingMode(9)"} {
		if m.String() != name {
			t.Errorf("%d named %q, want %q", int(m), m.String(), name)
		}
	}
}
