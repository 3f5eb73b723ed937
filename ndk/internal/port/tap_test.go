package port_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
)

// TestTapCopiesBothWaysAndDropsWhenFull: with a ring set, each frame sent
// and received is copied once (cut to the snap length, its length kept);
// a full ring drops and counts instead of waiting; without a ring nothing
// is offered.
func TestTapCopiesBothWaysAndDropsWhenFull(t *testing.T) {
	p := newPipe(t, porttest.PipeConfig{})
	var ring atomic.Pointer[port.TapRing]
	a, b := port.Tap(p.A(), 0, &ring), port.Tap(p.B(), 1, &ring)

	send := func(id uint32) {
		if err := a.Transmit([][]byte{frameWithID(id, 100)[:40], frameWithID(id, 100)[40:]}); err != nil {
			t.Fatal(err)
		}
		_ = a.Flush()
	}
	send(1) // no ring: not offered
	drain(t, b, 100)
	r := port.NewTapRing(2, 2, 64)
	ring.Store(r)
	send(2)
	if got := drain(t, b, 100); len(got) != 1 || got[0] != 2 {
		t.Fatalf("received %v, want [2]", got)
	}
	var fs [8]port.TapFrame
	n := r.Take(fs[:])
	if n != 2 || r.Seen() != 2 || r.Drops() != 0 {
		t.Fatalf("took %d frames, seen %d, dropped %d; want 2, 2, 0", n, r.Seen(), r.Drops())
	}
	want := frameWithID(2, 100)[:64]
	for i, f := range fs[:2] {
		if f.Length != 100 || !bytes.Equal(f.Data, want) || f.Out != (i == 0) || f.Queue != i {
			t.Errorf("frame %d: out %v queue %d length %d data %x", i, f.Out, f.Queue, f.Length, f.Data[:8])
		}
	}
	// Four frames sent and received into two slots per queue: eight
	// offered, four dropped, none waited for.
	for id := uint32(10); id < 14; id++ {
		send(id)
	}
	drain(t, b, 100)
	if r.Seen() != 10 || r.Drops() != 4 || r.Take(fs[:]) != 4 {
		t.Errorf("seen %d dropped %d; want 10 and 4, with 4 frames kept", r.Seen(), r.Drops())
	}
	ring.Store(nil)
	send(20)
	drain(t, b, 100)
	if r.Seen() != 10 {
		t.Errorf("frames offered after the ring was removed")
	}
}

// TestTapAccountsEveryFrameOfTwoEngines: two engines offering frames at
// once, each into its queue's ring, while the consumer takes: every frame
// offered is either kept or counted as dropped.
func TestTapAccountsEveryFrameOfTwoEngines(t *testing.T) {
	p := newPipe(t, porttest.PipeConfig{})
	var ring atomic.Pointer[port.TapRing]
	r := port.NewTapRing(2, 64, 64) // small: the consumer must keep up, or frames drop
	ring.Store(r)
	ends := []port.Port{port.Tap(p.A(), 0, &ring), port.Tap(p.B(), 1, &ring)}
	var wg sync.WaitGroup
	for _, e := range ends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range uint32(2000) {
				_ = e.Transmit([][]byte{frameWithID(id, 64)})
				_ = e.Flush()
				drain(t, e, 64)
			}
		}()
	}
	stop := make(chan struct{})
	taken := make(chan int)
	go func() {
		var fs [32]port.TapFrame
		n := 0
		for {
			k := r.Take(fs[:])
			for _, f := range fs[:k] {
				if !bytes.Equal(f.Data, frameWithID(binary.BigEndian.Uint32(f.Data), 64)) {
					t.Errorf("captured frame damaged: %x", f.Data[:8])
				}
			}
			n += k
			select {
			case <-stop:
				var rest [128]port.TapFrame
				taken <- n + r.Take(rest[:])
				return
			default:
			}
		}
	}()
	wg.Wait()
	close(stop)
	kept := <-taken
	if uint64(kept)+r.Drops() != r.Seen() || r.Seen() < 500 {
		t.Errorf("kept %d + dropped %d != offered %d", kept, r.Drops(), r.Seen())
	}
	t.Logf("offered %d, kept %d, dropped %d", r.Seen(), kept, r.Drops())
}

// TestTapAllocatesNothing: on or off, a tapped port's Transmit and
// Receive allocate nothing.
func TestTapAllocatesNothing(t *testing.T) {
	p := newPipe(t, porttest.PipeConfig{})
	var ring atomic.Pointer[port.TapRing]
	a, b := port.Tap(p.A(), 0, &ring), port.Tap(p.B(), 1, &ring)
	f := [][]byte{frameWithID(1, 200)}
	out := make([][]byte, 8)
	r := port.NewTapRing(2, 16, 128)
	for _, on := range []bool{false, true} {
		if on {
			ring.Store(r)
		}
		allocs := testing.AllocsPerRun(200, func() {
			_ = a.Transmit(f)
			_ = a.Flush()
			b.Receive(out)
			b.Release()
		})
		if allocs != 0 {
			t.Errorf("tap on=%v: %v allocations per frame", on, allocs)
		}
	}
}

// BenchmarkTap is a frame's way through an in-memory pipe bare, through
// a tap that is off (the daemon's ports without a capture) and through
// one capturing: the cost the tap adds to the data path.
func BenchmarkTap(b *testing.B) {
	f := [][]byte{frameWithID(1, 1024)}
	out := make([][]byte, 8)
	for _, mode := range []string{"bare", "off", "capturing"} {
		b.Run(mode, func(b *testing.B) {
			p, err := porttest.NewPipe(porttest.PipeConfig{})
			if err != nil {
				b.Fatal(err)
			}
			var ring atomic.Pointer[port.TapRing]
			var x, y port.Port = p.A(), p.B()
			if mode != "bare" {
				x, y = port.Tap(x, 0, &ring), port.Tap(y, 1, &ring)
			}
			r := port.NewTapRing(2, 1<<12, 256)
			if mode == "capturing" {
				ring.Store(r)
			}
			var fs [1 << 12]port.TapFrame
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_ = x.Transmit(f)
				_ = x.Flush()
				y.Receive(out)
				y.Release()
				if i&1023 == 1023 {
					b.StopTimer()
					r.Take(fs[:])
					b.StartTimer()
				}
			}
		})
	}
}
