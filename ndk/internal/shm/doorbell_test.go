package shm

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newTestBells attaches a sleeper's and a ringer's Doorbell over the same
// flags, each with its own descriptor for the eventfd, as two processes
// would hold them.
func newTestBells(t testing.TB, s *Segment, off int) (sleeper, ringer *Doorbell) {
	t.Helper()
	efd, err := NewEventfd()
	if err != nil {
		t.Fatal(err)
	}
	dup, err := unix.FcntlInt(uintptr(efd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sleeper, err = NewDoorbell(s, off, efd)
	if err != nil {
		t.Fatal(err)
	}
	ringer, err = NewDoorbell(s, off, dup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Close(); ringer.Close() })
	return sleeper, ringer
}

func TestDoorbellAwakeRingCostsNoWrite(t *testing.T) {
	sleeper, ringer := newTestBells(t, newTestSegment(t, 4096), CacheLine)
	for range 3 {
		if ringer.Ring() {
			t.Fatal("Ring wrote the eventfd while the sleeper was awake")
		}
	}
	start := time.Now()
	if err := sleeper.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Wait after a ring slept %v", d)
	}
	if w, s := ringer.Stats(); w != 0 {
		t.Fatalf("ringer wrote the eventfd %d times", w)
	} else if _, s = sleeper.Stats(); s != 0 {
		t.Fatalf("sleeper polled %d times after a ring", s)
	}
}

func TestDoorbellTimeout(t *testing.T) {
	sleeper, _ := newTestBells(t, newTestSegment(t, 4096), 0)
	if err := sleeper.Wait(0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sleeper.Wait(20 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("Wait(20ms) returned after %v", d)
	}
	if _, s := sleeper.Stats(); s != 1 {
		t.Fatalf("%d polls, want 1", s)
	}
}

func TestDoorbellWakesSleeper(t *testing.T) {
	sleeper, ringer := newTestBells(t, newTestSegment(t, 4096), 0)
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait(-1) }()
	// Ring once the sleeper has announced its sleep, so the eventfd path
	// is the one taken.
	for deadline := time.Now().Add(10 * time.Second); sleeper.sleeping.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the sleeper did not announce its sleep")
		}
		time.Sleep(time.Millisecond)
	}
	if !ringer.Ring() {
		t.Fatal("Ring did not write the eventfd for a sleeper")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sleeper did not wake")
	}
	// The wake-up drained the eventfd: the next Wait sleeps its timeout.
	start := time.Now()
	sleeper.Wait(10 * time.Millisecond)
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Fatalf("Wait after a consumed wake-up returned after %v", d)
	}
}

func TestDoorbellWatch(t *testing.T) {
	sleeper, _ := newTestBells(t, newTestSegment(t, 4096), 0)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	i := sleeper.Watch(p[0])
	unix.Write(p[1], []byte{1})
	if err := sleeper.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !sleeper.Ready(i) {
		t.Fatal("Ready is false for a readable watched pipe")
	}
}

func TestDoorbellRefusesBadOffset(t *testing.T) {
	s := newTestSegment(t, 4096)
	for _, off := range []int{-64, 8, 4096, 4096 - 32} {
		if _, err := NewDoorbell(s, off, -1); err == nil {
			t.Errorf("NewDoorbell at offset %d of a 4096-byte segment succeeded", off)
		}
	}
}

// TestDoorbellPingPong bounces a token between two goroutines through
// rings and doorbells, each side blocking in Wait with no timeout; a lost
// wake-up hangs it, and the deadline turns that into a failure.
func TestDoorbellPingPong(t *testing.T) {
	ep := newLoopEndpoints(t)
	const n = 20000
	deadline := time.Now().Add(time.Minute)
	done := make(chan error, 1)
	go func() { done <- echo(ep.b, &deadline) }()
	if err := pingPong(ep.a, n, deadline); err != nil {
		t.Fatal(err)
	}
	if err := ep.a.send(stopRecord); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("echo: %v", err)
	}
}

func TestDoorbellAllocs(t *testing.T) {
	sleeper, ringer := newTestBells(t, newTestSegment(t, 4096), 0)
	if n := testing.AllocsPerRun(1000, func() {
		ringer.Ring()
		sleeper.Wait(time.Second) // returns at once: the ring is pending
	}); n != 0 {
		t.Errorf("Ring+Wait while awake: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		sleeper.sleeping.Store(1)
		ringer.Ring()                  // writes the eventfd
		sleeper.pending.Store(0)       // as if a Wait had consumed it,
		sleeper.Wait(time.Microsecond) // so this one polls and drains
	}); n != 0 {
		t.Errorf("Ring+Wait through the eventfd: %v allocations, want 0", n)
	}
}

// TestDoorbellWaitFile: the netpoller wait returns at once for a ring that
// came first, sleeps until a ring that comes later (which then writes the
// eventfd), leaves the counter reset, and allocates nothing.
func TestDoorbellWaitFile(t *testing.T) {
	sleeper, ringer := newTestBells(t, newTestSegment(t, 4096), 0)
	f, err := sleeper.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ringer.Ring()
	if err := sleeper.WaitFile(f); err != nil {
		t.Fatal(err)
	}
	if _, s := sleeper.Stats(); s != 0 {
		t.Fatalf("WaitFile after a ring slept %d times", s)
	}
	for round := range 3 {
		done := make(chan error, 1)
		go func() { done <- sleeper.WaitFile(f) }()
		for deadline := time.Now().Add(10 * time.Second); sleeper.sleeping.Load() == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the sleeper did not announce its sleep")
			}
			time.Sleep(time.Millisecond)
		}
		select {
		case <-done:
			t.Fatalf("round %d: WaitFile returned without a ring", round)
		case <-time.After(20 * time.Millisecond):
		}
		if !ringer.Ring() {
			t.Fatalf("round %d: Ring did not write the eventfd for a sleeper", round)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the sleeper did not wake", round)
		}
	}
	ringer.Ring()
	if n := testing.AllocsPerRun(100, func() {
		ringer.Ring()
		_ = sleeper.WaitFile(f)
	}); n != 0 {
		t.Fatalf("Ring+WaitFile allocates %v times", n)
	}
}
