package port

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkNoLostWakeups plays engine and poster many times over on e, the
// poster posting just as the engine goes to sleep: a lost wake-up shows up
// as a Wait that sleeps out its long timeout.
func checkNoLostWakeups(t *testing.T, e Port, rounds int64) {
	var posted, taken atomic.Int64
	const long = 5 * time.Second
	var wg sync.WaitGroup
	wg.Go(func() {
		for posted.Load() < rounds {
			if taken.Load() == posted.Load() {
				if posted.Load()%16 == 0 {
					// Now and then let the engine fall asleep first,
					// so both orders of the race occur.
					time.Sleep(50 * time.Microsecond)
				}
				posted.Add(1)
				e.Doorbell()
			}
		}
	})
	var slow error
	deadline := time.Now().Add(60 * time.Second)
	for taken.Load() < rounds && time.Now().Before(deadline) {
		if taken.Load() < posted.Load() {
			taken.Add(1)
			continue
		}
		start := time.Now()
		if err := e.Wait(long); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d >= long {
			slow = fmt.Errorf("Wait slept %v with a post pending after round %d: lost wake-up", d, taken.Load())
			break
		}
	}
	posted.Store(rounds) // let the poster stop if we broke out
	wg.Wait()
	if slow != nil {
		t.Fatal(slow)
	}
	if taken.Load() != rounds {
		t.Fatalf("took %d of %d posts before the deadline", taken.Load(), rounds)
	}
}
