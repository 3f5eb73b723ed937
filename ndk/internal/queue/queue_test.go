package queue

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

type item struct {
	seq uint64
	ctx any
}

func TestNewRejectsBadCapacity(t *testing.T) {
	for _, c := range []int{0, -1, MaxCapacity + 1} {
		if _, err := NewSPSC[item](c); err == nil {
			t.Errorf("NewSPSC(%d): no error", c)
		}
		if _, err := NewMPSC[item](c); err == nil {
			t.Errorf("NewMPSC(%d): no error", c)
		}
	}
}

func TestCapacityRoundsUpToPowerOfTwo(t *testing.T) {
	for _, tc := range []struct{ in, spsc, mpsc int }{{1, 1, 2}, {2, 2, 2}, {3, 4, 4}, {1000, 1024, 1024}, {1024, 1024, 1024}} {
		s, err := NewSPSC[item](tc.in)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMPSC[item](tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if s.Cap() != tc.spsc || m.Cap() != tc.mpsc {
			t.Errorf("capacity %d: SPSC %d, MPSC %d, want %d and %d", tc.in, s.Cap(), m.Cap(), tc.spsc, tc.mpsc)
		}
	}
}

// ring is the common surface of both rings, for tests that apply to both.
type ring interface {
	TryPush(*item) bool
	TryPop(*item) bool
	Len() int
	Cap() int
}

func rings(t *testing.T, capacity int) map[string]ring {
	t.Helper()
	s, err := NewSPSC[item](capacity)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMPSC[item](capacity)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]ring{"SPSC": s, "MPSC": m}
}

// TestSmallestRingsRefuseWhenFull guards the one-slot corner: every ring
// must refuse a push once Cap elements are queued.
func TestSmallestRingsRefuseWhenFull(t *testing.T) {
	for name, q := range rings(t, 1) {
		for i := range q.Cap() {
			if !q.TryPush(&item{seq: uint64(i)}) {
				t.Fatalf("%s: push %d refused below Cap %d", name, i, q.Cap())
			}
		}
		if q.TryPush(&item{}) {
			t.Fatalf("%s: push beyond Cap %d succeeded", name, q.Cap())
		}
	}
}

func TestFullAndEmpty(t *testing.T) {
	for name, q := range rings(t, 4) {
		t.Run(name, func(t *testing.T) {
			var v item
			if q.TryPop(&v) {
				t.Fatal("pop from empty ring succeeded")
			}
			for i := range 4 {
				if !q.TryPush(&item{seq: uint64(i)}) {
					t.Fatalf("push %d refused below capacity", i)
				}
			}
			if q.TryPush(&item{seq: 99}) {
				t.Fatal("push into full ring succeeded")
			}
			if q.Len() != 4 {
				t.Fatalf("Len = %d, want 4", q.Len())
			}
			for i := range 4 {
				if !q.TryPop(&v) || v.seq != uint64(i) {
					t.Fatalf("pop %d: got %+v", i, v)
				}
			}
			if q.TryPop(&v) {
				t.Fatal("pop after draining succeeded")
			}
			if q.Len() != 0 {
				t.Fatalf("Len = %d after draining", q.Len())
			}
		})
	}
}

// TestWrapAround runs the indices many times around a small ring with the
// ring at every fill level, checking FIFO order throughout.
func TestWrapAround(t *testing.T) {
	for name, q := range rings(t, 8) {
		t.Run(name, func(t *testing.T) {
			var next, want uint64
			var v item
			for round := range 1000 {
				fill := round%8 + 1
				for range fill {
					if !q.TryPush(&item{seq: next}) {
						t.Fatalf("round %d: push %d refused with Len %d", round, next, q.Len())
					}
					next++
				}
				for range fill {
					if !q.TryPop(&v) {
						t.Fatalf("round %d: pop refused", round)
					}
					if v.seq != want {
						t.Fatalf("round %d: popped %d, want %d", round, v.seq, want)
					}
					want++
				}
			}
		})
	}
}

func TestPopDropsReferences(t *testing.T) {
	s, _ := NewSPSC[item](2)
	m, _ := NewMPSC[item](2)
	ctx := new(int)
	s.TryPush(&item{ctx: ctx})
	m.TryPush(&item{ctx: ctx})
	var v item
	s.TryPop(&v)
	m.TryPop(&v)
	for i := range s.buf {
		if s.buf[i].ctx != nil {
			t.Errorf("SPSC slot %d still references the popped context", i)
		}
	}
	for i := range m.slots {
		if m.slots[i].val.ctx != nil {
			t.Errorf("MPSC slot %d still references the popped context", i)
		}
	}
}

func TestSPSCFrontAdvance(t *testing.T) {
	q, _ := NewSPSC[item](2)
	if q.Front() != nil {
		t.Fatal("Front of empty ring is not nil")
	}
	q.Advance() // no-op on empty
	q.TryPush(&item{seq: 7})
	p := q.Front()
	if p == nil || p.seq != 7 {
		t.Fatalf("Front = %+v", p)
	}
	p.seq = 8 // in place: the consumer may work on the element without copying
	if q.Front().seq != 8 {
		t.Fatal("Front does not return the slot in place")
	}
	q.Advance()
	if q.Front() != nil || q.Len() != 0 {
		t.Fatal("Advance did not free the slot")
	}
}

// TestSPSCConcurrent runs a producer and a consumer goroutine through a
// small ring (many wrap-arounds, full and empty often) and checks that every
// element arrives once, in order. Bounded in count and time.
func TestSPSCConcurrent(t *testing.T) {
	const n = 200_000
	q, _ := NewSPSC[item](16)
	deadline := time.Now().Add(20 * time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(0); i < n; {
			if q.TryPush(&item{seq: i}) {
				i++
			} else {
				if time.Now().After(deadline) {
					return
				}
				runtime.Gosched()
			}
		}
	}()
	var v item
	for want := uint64(0); want < n; {
		if !q.TryPop(&v) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out at %d of %d", want, n)
			}
			runtime.Gosched()
			continue
		}
		if v.seq != want {
			t.Fatalf("got %d, want %d", v.seq, want)
		}
		want++
	}
	<-done
}

// TestMPSCConcurrent has several producers push tagged sequences through a
// small ring; the consumer checks per-producer order and that nothing is
// lost or duplicated.
func TestMPSCConcurrent(t *testing.T) {
	const producers = 4
	const perProducer = 50_000
	q, _ := NewMPSC[item](32)
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); i < perProducer; {
				if q.TryPush(&item{seq: uint64(p)<<32 | i}) {
					i++
				} else {
					if time.Now().After(deadline) {
						return
					}
					runtime.Gosched()
				}
			}
		}()
	}
	var next [producers]uint64
	var v item
	for got := 0; got < producers*perProducer; {
		if !q.TryPop(&v) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %d of %d", got, producers*perProducer)
			}
			runtime.Gosched()
			continue
		}
		p, i := v.seq>>32, v.seq&0xffffffff
		if i != next[p] {
			t.Fatalf("producer %d: got %d, want %d", p, i, next[p])
		}
		next[p]++
		got++
	}
	wg.Wait()
	if q.TryPop(&v) {
		t.Fatalf("extra element %+v", v)
	}
}

func TestPushPopAllocateNothing(t *testing.T) {
	ctx := any(new(int)) // boxed once, as a request context is
	for name, q := range rings(t, 64) {
		t.Run(name, func(t *testing.T) {
			in := item{seq: 1, ctx: ctx}
			var out item
			allocs := testing.AllocsPerRun(1000, func() {
				q.TryPush(&in)
				q.TryPop(&out)
			})
			if allocs != 0 {
				t.Fatalf("push+pop allocates %.1f times", allocs)
			}
		})
	}
}

func BenchmarkSPSCPushPop(b *testing.B) {
	q, _ := NewSPSC[item](1024)
	var v item
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		v.seq = uint64(i)
		q.TryPush(&v)
		q.TryPop(&v)
	}
}

func BenchmarkMPSCPushPop(b *testing.B) {
	q, _ := NewMPSC[item](1024)
	var v item
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		v.seq = uint64(i)
		q.TryPush(&v)
		q.TryPop(&v)
	}
}

// A sealed ring takes nothing more, keeps what producers claimed before
// the seal, and reports drained once that is popped.
func TestMPSCSeal(t *testing.T) {
	q, err := NewMPSC[int](4)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if ok, sealed := q.TryPushOpen(&i); !ok || sealed {
			t.Fatalf("push %d: ok %v sealed %v", i, ok, sealed)
		}
	}
	q.Seal()
	q.Seal() // idempotent
	v := 9
	if ok, sealed := q.TryPushOpen(&v); ok || !sealed {
		t.Fatalf("push after seal: ok %v sealed %v", ok, sealed)
	}
	if q.Len() != 3 {
		t.Fatalf("Len %d after seal, want 3", q.Len())
	}
	for i := range 3 {
		if q.Drained() {
			t.Fatalf("drained with %d left", 3-i)
		}
		var got int
		if !q.TryPop(&got) || got != i {
			t.Fatalf("pop %d: got %d", i, got)
		}
	}
	if !q.Drained() {
		t.Fatal("not drained after popping everything")
	}
	if ok, sealed := q.TryPushOpen(&v); ok || !sealed {
		t.Fatal("a drained sealed ring took a push")
	}
	full, _ := NewMPSC[int](2)
	full.TryPush(&v)
	full.TryPush(&v)
	if ok, sealed := full.TryPushOpen(&v); ok || sealed {
		t.Fatalf("full unsealed ring: ok %v sealed %v, want neither", ok, sealed)
	}
}
