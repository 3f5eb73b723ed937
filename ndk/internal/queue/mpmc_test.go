package queue

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestMPMCEveryElementOnceAcrossConsumers pushes from two producers and
// pops from four consumers at once: every element comes out exactly once.
func TestMPMCEveryElementOnceAcrossConsumers(t *testing.T) {
	q, err := NewMPMC[uint64](64)
	if err != nil {
		t.Fatal(err)
	}
	const perProducer = 20000
	seen := make([]atomic.Uint32, 2*perProducer)
	var popped atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func(base uint64) {
			defer wg.Done()
			for i := uint64(0); i < perProducer; {
				v := base + i
				if q.TryPush(&v) {
					i++
				}
			}
		}(uint64(p * perProducer))
	}
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var v uint64
			for popped.Load() < 2*perProducer {
				if q.TryPop(&v) {
					seen[v].Add(1)
					popped.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("element %d popped %d times", i, n)
		}
	}
}

func TestMPMCFullEmptyAndAllocs(t *testing.T) {
	q, _ := NewMPMC[int](4)
	for i := 0; i < 4; i++ {
		if !q.TryPush(&i) {
			t.Fatalf("push %d refused", i)
		}
	}
	x := 9
	if q.TryPush(&x) || q.Len() != 4 {
		t.Fatalf("full ring took a fifth element (len %d)", q.Len())
	}
	var v int
	for i := 0; i < 4; i++ {
		if !q.TryPop(&v) || v != i {
			t.Fatalf("pop %d: %d", i, v)
		}
	}
	if q.TryPop(&v) {
		t.Fatal("empty ring popped")
	}
	if n := testing.AllocsPerRun(100, func() { q.TryPush(&x); q.TryPop(&v) }); n != 0 {
		t.Fatalf("push+pop allocates %v", n)
	}
}
