package afxdp

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests in this file play the kernel's side of each ring over plain
// memory, the way net/xdp/xsk_queue.h does: acquire-load the peer's index,
// touch entries, release-store our own index.

// ringWords are the three shared words of one ring.
type ringWords struct{ prod, cons, flags atomic.Uint32 }

// words returns ring words with the given producer and consumer indices.
func words(prod, cons uint32) *ringWords {
	w := new(ringWords)
	w.prod.Store(prod)
	w.cons.Store(cons)
	return w
}

// startIndices covers a fresh ring, indices about to wrap at 2^32 and the
// sign boundary, so every test below crosses the wrap at least once.
var startIndices = []uint32{0, 1<<32 - 3, 1<<32 - 1, 1 << 31}

// kernelConsumer drains a ring we produce (fill, TX).
type kernelConsumer[T any] struct {
	w       *ringWords
	entries []T
	cons    uint32
}

// take consumes up to n entries the user submitted and returns them.
func (k *kernelConsumer[T]) take(n uint32) []T {
	prod := k.w.prod.Load()
	avail := prod - k.cons
	if avail > uint32(len(k.entries)) {
		panic("producer ran past the consumer")
	}
	n = min(n, avail)
	out := make([]T, n)
	for i := range out {
		out[i] = k.entries[(k.cons+uint32(i))&uint32(len(k.entries)-1)]
	}
	k.cons += n
	k.w.cons.Store(k.cons)
	return out
}

// kernelProducer fills a ring we consume (RX, completion).
type kernelProducer[T any] struct {
	w       *ringWords
	entries []T
	prod    uint32
}

// put produces as many of vs as fit and returns how many it produced.
func (k *kernelProducer[T]) put(vs []T) int {
	cons := k.w.cons.Load()
	used := k.prod - cons
	if used > uint32(len(k.entries)) {
		panic("consumer ran past the producer")
	}
	n := min(uint32(len(vs)), uint32(len(k.entries))-used)
	for i := uint32(0); i < n; i++ {
		k.entries[(k.prod+i)&uint32(len(k.entries)-1)] = vs[i]
	}
	k.prod += n
	k.w.prod.Store(k.prod)
	return int(n)
}

func TestFillQueueAgainstKernel(t *testing.T) {
	for _, start := range startIndices {
		t.Run("", func(t *testing.T) {
			w := words(start, start)
			entries := make([]uint64, 8)
			q := newFillQueue(&w.prod, &w.cons, &w.flags, entries)
			k := &kernelConsumer[uint64]{w: w, entries: entries, cons: start}

			if got := q.Free(); got != 8 {
				t.Fatalf("Free on empty ring = %d, want 8", got)
			}
			i, got := q.Reserve(10)
			if i != start || got != 8 {
				t.Fatalf("Reserve(10) = (%d, %d), want (%d, 8)", i, got, start)
			}
			for j := uint32(0); j < got; j++ {
				q.Set(i+j, uint64(j)*4096)
			}
			if _, got := q.Reserve(1); got != 0 {
				t.Fatalf("Reserve on full ring got %d entries", got)
			}
			if n := k.take(8); len(n) != 0 {
				t.Fatalf("kernel saw %d entries before Submit", len(n))
			}
			q.Submit()
			if w.prod.Load() != start+8 {
				t.Fatalf("producer word = %d, want %d", w.prod.Load(), start+8)
			}
			if p := q.Pending(); p != 8 {
				t.Fatalf("Pending = %d, want 8", p)
			}
			got5 := k.take(5)
			for j, a := range got5 {
				if a != uint64(j)*4096 {
					t.Fatalf("kernel entry %d = %d, want %d", j, a, j*4096)
				}
			}
			if p := q.Pending(); p != 3 {
				t.Fatalf("Pending after kernel took 5 = %d, want 3", p)
			}
			// The cache still says full; Reserve must reload the consumer.
			i, got = q.Reserve(8)
			if i != start+8 || got != 5 {
				t.Fatalf("Reserve after kernel consumed 5 = (%d, %d), want (%d, 5)", i, got, start+8)
			}
			q.Cancel(2)
			q.Submit()
			if w.prod.Load() != start+11 {
				t.Fatalf("after Cancel(2)+Submit producer = %d, want %d", w.prod.Load(), start+11)
			}
			q.Cancel(5) // nothing reserved: no effect
			if i, _ := q.Reserve(1); i != start+11 {
				t.Fatalf("Cancel past submitted entries moved the producer to %d", i)
			}
		})
	}
}

func TestCompletionQueueAgainstKernel(t *testing.T) {
	for _, start := range startIndices {
		t.Run("", func(t *testing.T) {
			w := words(start, start)
			entries := make([]uint64, 4)
			q := newCompletionQueue(&w.prod, &w.cons, &w.flags, entries)
			k := &kernelProducer[uint64]{w: w, entries: entries, prod: start}

			if _, got := q.Peek(4); got != 0 {
				t.Fatalf("Peek on empty ring got %d", got)
			}
			if n := k.put([]uint64{10, 11, 12, 13, 14}); n != 4 {
				t.Fatalf("kernel produced %d into a 4-entry ring", n)
			}
			i, got := q.Peek(3)
			if i != start || got != 3 {
				t.Fatalf("Peek(3) = (%d, %d), want (%d, 3)", i, got, start)
			}
			for j := uint32(0); j < got; j++ {
				if v := q.Get(i + j); v != uint64(10+j) {
					t.Fatalf("Get(%d) = %d, want %d", j, v, 10+j)
				}
			}
			// Peek hands each entry out once.
			if i2, got2 := q.Peek(3); i2 != start+3 || got2 != 1 || q.Get(i2) != 13 {
				t.Fatalf("second Peek = (%d, %d), want (%d, 1) holding 13", i2, got2, start+3)
			}
			q.Cancel(1)
			if i3, got3 := q.Peek(1); i3 != start+3 || got3 != 1 {
				t.Fatalf("Peek after Cancel(1) = (%d, %d), want (%d, 1)", i3, got3, start+3)
			}
			if n := k.put([]uint64{99}); n != 0 {
				t.Fatal("kernel produced into a ring whose entries were not released")
			}
			q.Release(2)
			if w.cons.Load() != start+2 {
				t.Fatalf("consumer word = %d, want %d", w.cons.Load(), start+2)
			}
			q.Release(10) // only 2 more were peeked
			if w.cons.Load() != start+4 {
				t.Fatalf("Release beyond peeked entries: consumer = %d, want %d", w.cons.Load(), start+4)
			}
			if n := k.put([]uint64{20, 21, 22, 23}); n != 4 {
				t.Fatalf("kernel produced %d after release, want 4", n)
			}
			i, got = q.Peek(8)
			if got != 4 || q.Get(i) != 20 || q.Get(i+3) != 23 {
				t.Fatalf("Peek across the wrap = (%d, %d) first %d last %d", i, got, q.Get(i), q.Get(i+3))
			}
		})
	}
}

// TestRingsRandomized runs long random schedules of both sides on every ring
// type from each start index and checks that entries arrive in order, once,
// and that neither side ever runs past the other.
func TestRingsRandomized(t *testing.T) {
	for _, start := range startIndices {
		rng := rand.New(rand.NewPCG(uint64(start), 7))
		t.Run("tx", func(t *testing.T) {
			w := words(start, start)
			entries := make([]Desc, 16)
			q := newTxQueue(&w.prod, &w.cons, &w.flags, entries)
			k := &kernelConsumer[Desc]{w: w, entries: entries, cons: start}
			var next, want uint64
			for step := 0; step < 5000; step++ {
				if rng.IntN(2) == 0 {
					i, got := q.Reserve(uint32(rng.IntN(20)))
					for j := uint32(0); j < got; j++ {
						q.Set(i+j, Desc{Addr: next, Len: uint32(next)})
						next++
					}
					q.Submit()
				} else {
					for _, d := range k.take(uint32(rng.IntN(20))) {
						if d.Addr != want || d.Len != uint32(want) {
							t.Fatalf("step %d: kernel got %+v, want addr %d", step, d, want)
						}
						want++
					}
				}
			}
			if next-want > 16 {
				t.Fatalf("%d entries in flight in a 16-entry ring", next-want)
			}
			if w.prod.Load()-start != uint32(next) {
				t.Fatalf("producer advanced %d, submitted %d", w.prod.Load()-start, next)
			}
		})
		t.Run("rx", func(t *testing.T) {
			w := words(start, start)
			entries := make([]Desc, 16)
			q := newRxQueue(&w.prod, &w.cons, &w.flags, entries)
			k := &kernelProducer[Desc]{w: w, entries: entries, prod: start}
			var next, want uint64
			for step := 0; step < 5000; step++ {
				if rng.IntN(2) == 0 {
					batch := make([]Desc, rng.IntN(20))
					for j := range batch {
						batch[j] = Desc{Addr: next + uint64(j)}
					}
					next += uint64(k.put(batch))
				} else {
					i, got := q.Peek(uint32(rng.IntN(20)))
					for j := uint32(0); j < got; j++ {
						if d := q.Get(i + j); d.Addr != want {
							t.Fatalf("step %d: got addr %d, want %d", step, d.Addr, want)
						}
						want++
					}
					q.Release(got)
				}
			}
		})
	}
}

// TestRingsConcurrent runs the kernel's side on another goroutine. Under
// -race it checks that the atomics order the entry writes before the index
// publication, as the kernel relies on.
func TestRingsConcurrent(t *testing.T) {
	const total = 200000
	deadline := time.Now().Add(20 * time.Second)
	w := words(1<<32-100, 1<<32-100)
	entries := make([]Desc, 64)
	rx := newRxQueue(&w.prod, &w.cons, &w.flags, entries)
	k := &kernelProducer[Desc]{w: w, entries: entries, prod: w.prod.Load()}

	done := make(chan error, 1)
	go func() {
		var next uint64
		batch := make([]Desc, 32)
		for next < total {
			if time.Now().After(deadline) {
				done <- errors.New("kernel side timed out")
				return
			}
			n := min(uint64(len(batch)), total-next)
			for j := range batch[:n] {
				batch[j] = Desc{Addr: next + uint64(j), Len: uint32(next+uint64(j)) ^ 0x5a5a}
			}
			next += uint64(k.put(batch[:n]))
		}
		done <- nil
	}()
	var want uint64
	for want < total {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %d of %d entries", want, total)
		}
		i, got := rx.Peek(16)
		for j := uint32(0); j < got; j++ {
			d := rx.Get(i + j)
			if d.Addr != want || d.Len != uint32(want)^0x5a5a {
				t.Fatalf("entry %d: got %+v", want, d)
			}
			want++
		}
		rx.Release(got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNeedWakeup(t *testing.T) {
	w := words(0, 0)
	fq := newFillQueue(&w.prod, &w.cons, &w.flags, make([]uint64, 4))
	if fq.NeedWakeup() {
		t.Fatal("NeedWakeup with flags clear")
	}
	w.flags.Store(unix.XDP_RING_NEED_WAKEUP)
	if !fq.NeedWakeup() {
		t.Fatal("NeedWakeup false with XDP_RING_NEED_WAKEUP set")
	}
}

func TestNextPacket(t *testing.T) {
	c := Desc{Options: PktContd}
	e := Desc{}
	tests := []struct {
		name  string
		descs []Desc
		want  int
	}{
		{"empty", nil, 0},
		{"single", []Desc{e, e}, 1},
		{"chain of three", []Desc{c, c, e, e}, 3},
		{"incomplete chain", []Desc{c, c}, 0},
		{"other option bits ignored", []Desc{{Options: 0x8}}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextPacket(tc.descs); got != tc.want {
				t.Fatalf("NextPacket = %d, want %d", got, tc.want)
			}
			// The same descriptors in an RX ring, across the wrap.
			w := words(1<<32-2, 1<<32-2)
			entries := make([]Desc, 8)
			q := newRxQueue(&w.prod, &w.cons, &w.flags, entries)
			k := &kernelProducer[Desc]{w: w, entries: entries, prod: w.prod.Load()}
			k.put(tc.descs)
			i, got := q.Peek(8)
			if n := q.NextPacket(i, got); int(n) != tc.want {
				t.Fatalf("RxQueue.NextPacket = %d, want %d", n, tc.want)
			}
		})
	}
}

func TestTxSetPacket(t *testing.T) {
	w := words(1<<32-1, 1<<32-1)
	entries := make([]Desc, 4)
	q := newTxQueue(&w.prod, &w.cons, &w.flags, entries)
	k := &kernelConsumer[Desc]{w: w, entries: entries, cons: w.cons.Load()}
	frags := []Desc{{Addr: 0, Len: 4096}, {Addr: 4096, Len: 4096, Options: 0}, {Addr: 8192, Len: 100, Options: PktContd}}
	i, got := q.Reserve(uint32(len(frags)))
	if got != 3 {
		t.Fatalf("Reserve(3) got %d", got)
	}
	if n := q.SetPacket(i, frags); n != 3 {
		t.Fatalf("SetPacket = %d, want 3", n)
	}
	q.Submit()
	out := k.take(4)
	if len(out) != 3 {
		t.Fatalf("kernel took %d descriptors, want 3", len(out))
	}
	for j, d := range out {
		wantContd := j < 2
		if (d.Options&PktContd != 0) != wantContd || d.Addr != frags[j].Addr || d.Len != frags[j].Len {
			t.Fatalf("descriptor %d = %+v, want addr %d len %d contd %v", j, d, frags[j].Addr, frags[j].Len, wantContd)
		}
	}
	if NextPacket(out) != 3 {
		t.Fatal("a chain written by SetPacket does not parse as one packet")
	}
}

func TestFillFromAndReclaimTo(t *testing.T) {
	a := newFrameAllocator(4096, 0, 6)
	fw := words(1<<32-2, 1<<32-2)
	fill := newFillQueue(&fw.prod, &fw.cons, &fw.flags, make([]uint64, 4))
	fk := &kernelConsumer[uint64]{w: fw, entries: fill.entries, cons: fw.cons.Load()}

	if n := fill.FillFrom(a, 100); n != 4 {
		t.Fatalf("FillFrom into a 4-entry ring = %d, want 4", n)
	}
	if a.Available() != 2 {
		t.Fatalf("allocator has %d frames left, want 2", a.Available())
	}
	lent := fk.take(4)

	// The kernel returns the frames through the completion ring, pointing
	// past the headroom as RX and TX descriptors do.
	cw := words(1<<32-1, 1<<32-1)
	comp := newCompletionQueue(&cw.prod, &cw.cons, &cw.flags, make([]uint64, 8))
	ck := &kernelProducer[uint64]{w: cw, entries: comp.entries, prod: cw.prod.Load()}
	back := make([]uint64, len(lent))
	for i, addr := range lent {
		back[i] = addr + 256
	}
	ck.put(back)
	if n, err := comp.ReclaimTo(a, 100); n != 4 || err != nil {
		t.Fatalf("ReclaimTo = (%d, %v), want (4, nil)", n, err)
	}
	if a.Available() != 6 {
		t.Fatalf("allocator has %d frames after reclaim, want 6", a.Available())
	}
	if cw.cons.Load() != cw.prod.Load() {
		t.Fatal("ReclaimTo did not release the completion entries")
	}
	// A completion for a frame nobody holds is reported, and the rest of
	// the batch is still reclaimed and released.
	ck.put([]uint64{lent[0], 0xdead0000})
	if n, err := comp.ReclaimTo(a, 100); n != 2 || err == nil {
		t.Fatalf("ReclaimTo of unknown frames = (%d, %v), want (2, error)", n, err)
	}
}
