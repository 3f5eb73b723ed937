package shm

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

// startIndices covers a fresh ring, indices about to wrap at 2^32 and the
// sign boundary, so the tests below cross the wrap.
var startIndices = []uint32{0, 1<<32 - 3, 1<<32 - 1, 1 << 31}

// newTestRing lays one ring out at offset 64 of a fresh segment (so that
// Offset is exercised), with both indices preset to start, and attaches
// both sides.
func newTestRing(t testing.TB, slotSize, slots int, start uint32) (*Segment, *Producer, *Consumer) {
	t.Helper()
	l := RingLayout{Offset: CacheLine, SlotSize: slotSize, Slots: slots}
	s, err := NewSegment("ring", l.End())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	word(s.Bytes(), l.Offset).Store(start)
	word(s.Bytes(), l.Offset+CacheLine).Store(start)
	p, err := NewProducer(s, l)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(s, l)
	if err != nil {
		t.Fatal(err)
	}
	return s, p, c
}

func record(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestRingFIFO(t *testing.T) {
	for _, start := range startIndices {
		t.Run("", func(t *testing.T) {
			_, p, c := newTestRing(t, 16, 8, start)
			next, want := uint64(0), uint64(0)
			dst := make([]byte, 16)
			for round := range 20 {
				pushed := 0
				for p.TryPush(record(next)) {
					next++
					pushed++
				}
				if round == 0 && pushed != 8 {
					t.Fatalf("pushed %d records into an empty 8-slot ring", pushed)
				}
				if p.Free() != 0 {
					t.Fatalf("Free = %d on a full ring", p.Free())
				}
				if c.Len() != 8 {
					t.Fatalf("Len = %d on a full ring", c.Len())
				}
				for range 1 + round%8 {
					if !c.TryPop(dst) {
						t.Fatal("TryPop on a non-empty ring failed")
					}
					if got := binary.LittleEndian.Uint64(dst); got != want {
						t.Fatalf("popped %d, want %d", got, want)
					}
					want++
				}
			}
			for c.TryPop(dst) {
				want++
			}
			if want != next || p.Free() != 8 || c.Err() != nil || p.Err() != nil {
				t.Fatalf("drained to %d of %d; Free %d; errors %v, %v", want, next, p.Free(), c.Err(), p.Err())
			}
		})
	}
}

func TestRingBatches(t *testing.T) {
	_, p, c := newTestRing(t, 8, 4, 1<<32-2)
	for i := range 3 {
		s := p.Reserve()
		if len(s) != 8 {
			t.Fatalf("Reserve returned %d bytes, want 8", len(s))
		}
		binary.LittleEndian.PutUint64(s, uint64(100+i))
	}
	if c.Peek() != nil {
		t.Fatal("Peek saw records before Publish")
	}
	p.Publish()
	for i := range 3 {
		s := c.Peek()
		if s == nil || binary.LittleEndian.Uint64(s) != uint64(100+i) {
			t.Fatalf("Peek %d = %v", i, s)
		}
	}
	if c.Peek() != nil {
		t.Fatal("Peek handed out a record twice")
	}
	if p.Free() != 1 {
		t.Fatalf("Free = %d before Release, want 1", p.Free())
	}
	c.Release()
	if p.Free() != 4 {
		t.Fatalf("Free = %d after Release, want 4", p.Free())
	}
}

func TestRingLayoutRefused(t *testing.T) {
	s := newTestSegment(t, 4096)
	for _, l := range []RingLayout{
		{Offset: 0, SlotSize: 12, Slots: 8},
		{Offset: 0, SlotSize: 0, Slots: 8},
		{Offset: 0, SlotSize: MaxSlotSize + 8, Slots: 1},
		{Offset: 0, SlotSize: 8, Slots: 6},
		{Offset: 0, SlotSize: 8, Slots: 0},
		{Offset: 0, SlotSize: 8, Slots: MaxSlots * 2},
		{Offset: 32, SlotSize: 8, Slots: 8},
		{Offset: -64, SlotSize: 8, Slots: 8},
		{Offset: 0, SlotSize: 64, Slots: 64},
		{Offset: 4096, SlotSize: 8, Slots: 1},
	} {
		if _, err := NewConsumer(s, l); err == nil {
			t.Errorf("NewConsumer accepted %+v in a %d-byte segment", l, s.Size())
		}
		if _, err := NewProducer(s, l); err == nil {
			t.Errorf("NewProducer accepted %+v in a %d-byte segment", l, s.Size())
		}
	}
}

// TestRingHostileProducer plays a producer in another process that stores
// indices no correct producer could: the consumer must break rather than
// hand out more records than the ring holds.
func TestRingHostileProducer(t *testing.T) {
	tests := []struct {
		name string
		prod func(released uint32) uint32
	}{
		{"one more than the ring holds", func(r uint32) uint32 { return r + 9 }},
		{"far ahead", func(r uint32) uint32 { return r + 1<<31 }},
		{"behind the consumer", func(r uint32) uint32 { return r - 1 }},
	}
	for _, start := range startIndices {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				s, p, c := newTestRing(t, 8, 8, start)
				p.TryPush(record(1))
				if !c.TryPop(make([]byte, 8)) {
					t.Fatal("TryPop of a pushed record failed")
				}
				word(s.Bytes(), CacheLine).Store(tc.prod(start + 1))
				if rec := c.Peek(); rec != nil {
					t.Fatalf("Peek handed out a record after a bogus producer index")
				}
				if !errors.Is(c.Err(), ErrBroken) {
					t.Fatalf("Err = %v, want ErrBroken", c.Err())
				}
				if c.Len() != 0 || c.TryPop(make([]byte, 8)) {
					t.Fatal("a broken ring still hands out records")
				}
				// A correct index later does not mend it.
				word(s.Bytes(), CacheLine).Store(start + 2)
				if c.Peek() != nil {
					t.Fatal("a broken ring came back to life")
				}
			})
		}
	}
}

// TestRingHostileConsumer is the other direction: a consumer that claims
// to have released records never published.
func TestRingHostileConsumer(t *testing.T) {
	for _, start := range startIndices {
		s, p, _ := newTestRing(t, 8, 8, start)
		for range 8 {
			p.TryPush(record(1))
		}
		word(s.Bytes(), 2*CacheLine).Store(start + 9)
		if p.TryPush(record(2)) || !errors.Is(p.Err(), ErrBroken) {
			t.Fatalf("start %#x: push after a consumer index past the producer's: Err = %v, want ErrBroken", start, p.Err())
		}
	}
}

func TestRingRefusesInconsistentStart(t *testing.T) {
	l := RingLayout{Offset: 0, SlotSize: 8, Slots: 8}
	s := newTestSegment(t, l.End())
	word(s.Bytes(), 0).Store(100)
	word(s.Bytes(), CacheLine).Store(50)
	if _, err := NewConsumer(s, l); !errors.Is(err, ErrBroken) {
		t.Errorf("NewConsumer with 50 records in an 8-slot ring: %v, want ErrBroken", err)
	}
	if _, err := NewProducer(s, l); !errors.Is(err, ErrBroken) {
		t.Errorf("NewProducer with 50 records in an 8-slot ring: %v, want ErrBroken", err)
	}
}

// TestRingRandomProducerIndices stores random producer indices, valid and
// not, between consumer steps, and checks the consumer's invariant: it
// never has more than a ring's worth of records out or announced.
func TestRingRandomProducerIndices(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	broken := 0
	for range 200 {
		start := rng.Uint32()
		s, _, c := newTestRing(t, 8, 16, start)
		prodWord := word(s.Bytes(), CacheLine)
		prod := start
		for step := 0; c.Err() == nil && step < 100; step++ {
			if rng.IntN(20) == 0 {
				prodWord.Store(rng.Uint32())
			} else {
				prod = c.released + uint32(rng.IntN(17))
				if prod-c.prod <= c.released+16-c.prod {
					prodWord.Store(prod)
				}
			}
			for range rng.IntN(20) {
				c.Peek()
			}
			if c.next-c.released > 16 || c.prod-c.released > 16 {
				t.Fatalf("%d records out, %d announced in a 16-slot ring", c.next-c.released, c.prod-c.released)
			}
			if rng.IntN(2) == 0 {
				c.Release()
			}
		}
		if c.Err() != nil {
			broken++
		}
	}
	if broken == 0 || broken == 200 {
		t.Fatalf("%d of 200 runs broke; the test should see both outcomes", broken)
	}
}

func TestRingConcurrent(t *testing.T) {
	_, p, c := newTestRing(t, 8, 64, 1<<32-1000)
	const n = 200000
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec := make([]byte, 8)
		for i := uint64(0); i < n; {
			binary.LittleEndian.PutUint64(rec, i)
			if p.TryPush(rec) {
				i++
			}
		}
	}()
	dst := make([]byte, 8)
	for want := uint64(0); want < n; {
		if !c.TryPop(dst) {
			continue
		}
		if got := binary.LittleEndian.Uint64(dst); got != want {
			t.Fatalf("popped %d, want %d", got, want)
		}
		want++
	}
	<-done
}

func TestRingAllocs(t *testing.T) {
	_, p, c := newTestRing(t, 64, 8, 0)
	rec, dst := make([]byte, 64), make([]byte, 64)
	if n := testing.AllocsPerRun(1000, func() {
		p.TryPush(rec)
		c.TryPop(dst)
	}); n != 0 {
		t.Errorf("TryPush+TryPop: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		p.Reserve()
		p.Reserve()
		p.Publish()
		c.Peek()
		c.Peek()
		c.Release()
	}); n != 0 {
		t.Errorf("Reserve+Publish+Peek+Release: %v allocations, want 0", n)
	}
}

func BenchmarkRingPushPop(b *testing.B) {
	_, p, c := newTestRing(b, 64, 256, 0)
	rec, dst := make([]byte, 64), make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		p.TryPush(rec)
		c.TryPop(dst)
	}
}
