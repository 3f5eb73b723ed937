package porttest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
)

// frameWithID builds a test frame of size bytes that starts with id.
func frameWithID(id uint32, size int) []byte {
	f := make([]byte, max(size, 4))
	binary.BigEndian.PutUint32(f, id)
	for i := 4; i < len(f); i++ {
		f[i] = byte(id) + byte(i)
	}
	return f
}

func newPipe(t testing.TB, cfg PipeConfig) *Pipe {
	t.Helper()
	p, err := NewPipe(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// drain receives everything queued at e and returns the frame IDs, checking
// that each frame is intact.
func drain(t testing.TB, e *PipeEnd, size int) []uint32 {
	t.Helper()
	var ids []uint32
	out := make([][]byte, 7) // odd batch size: exercises partial batches
	for {
		n := e.Receive(out)
		if n == 0 {
			return ids
		}
		for _, f := range out[:n] {
			id := binary.BigEndian.Uint32(f)
			if !bytes.Equal(f, frameWithID(id, size)) {
				t.Fatalf("frame %d arrived damaged", id)
			}
			ids = append(ids, id)
		}
	}
}

func TestPipeDeliversInOrderBothWays(t *testing.T) {
	p := newPipe(t, PipeConfig{})
	for _, dir := range []Direction{AtoB, BtoA} {
		from, to := p.A(), p.B()
		if dir == BtoA {
			from, to = to, from
		}
		const n, size = 100, 1500
		for i := range uint32(n) {
			f := frameWithID(i, size)
			// Headers, payload and trailer as the engine gives them.
			if err := from.Transmit([][]byte{f[:60], f[60:1496], f[1496:]}); err != nil {
				t.Fatalf("%v transmit %d: %v", dir, i, err)
			}
		}
		if err := from.Flush(); err != nil {
			t.Fatal(err)
		}
		ids := drain(t, to, size)
		want := make([]uint32, n)
		for i := range want {
			want[i] = uint32(i)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("%v delivered %v", dir, ids)
		}
		if s := p.Stats(dir); s != (PipeStats{Sent: n, Delivered: n}) {
			t.Fatalf("%v stats %+v", dir, s)
		}
	}
}

func TestPipeReceiveContract(t *testing.T) {
	p := newPipe(t, PipeConfig{})
	a, b := p.A(), p.B()
	for i := range uint32(3) {
		if err := a.Transmit([][]byte{frameWithID(i, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	out := make([][]byte, 2)
	if n := b.Receive(out); n != 2 {
		t.Fatalf("Receive returned %d, want a full batch of 2", n)
	}
	for i, f := range out {
		if cap(f) != len(f) {
			t.Errorf("frame %d has spare capacity %d: an append would write into the pipe's buffer", i, cap(f)-len(f))
		}
	}
	if n := b.Receive(out); n != 1 || binary.BigEndian.Uint32(out[0]) != 2 {
		t.Fatalf("second Receive: %d frames, first id %d", n, binary.BigEndian.Uint32(out[0]))
	}
	b.Release()
	b.Release() // a second Release has nothing to give back
	if n := b.Receive(out); n != 0 {
		t.Fatalf("Receive on an empty pipe returned %d", n)
	}
}

func TestPipeRejectsBadFrames(t *testing.T) {
	p := newPipe(t, PipeConfig{MaxFrame: 2000})
	a := p.A()
	if a.MaxFrame() != 2000 {
		t.Fatalf("MaxFrame %d, want 2000", a.MaxFrame())
	}
	for _, tc := range []struct {
		name string
		segs [][]byte
		want error
	}{
		{"no segments", nil, port.ErrEmptyFrame},
		{"empty segments", [][]byte{{}, nil}, port.ErrEmptyFrame},
		{"one byte too large", [][]byte{make([]byte, 1000), make([]byte, 1001)}, port.ErrTooLarge},
		{"exactly MaxFrame", [][]byte{make([]byte, 1000), make([]byte, 1000)}, nil},
	} {
		if err := a.Transmit(tc.segs); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if s := p.Stats(AtoB); s.Sent != 1 || s.Delivered != 1 {
		t.Fatalf("stats %+v: only the MaxFrame frame counts", s)
	}
}

func TestNewPipeRejectsBadConfig(t *testing.T) {
	for _, cfg := range []PipeConfig{
		{Loss: -0.1},
		{Duplicate: 1.5},
		{Reorder: 0.6, Loss: 0.6},
		{Loss: nan()},
		{Depth: -1},
		{MaxFrame: -1},
		{ReorderDepth: -2},
		{Depth: 4, ReorderDepth: 5},
		{Depth: 1 << 30},
	} {
		if _, err := NewPipe(cfg); err == nil {
			t.Errorf("NewPipe(%+v) succeeded", cfg)
		}
	}
}

func nan() float64 { z := 0.0; return z / z }

func TestPipeClose(t *testing.T) {
	p := newPipe(t, PipeConfig{})
	a, b := p.A(), p.B()
	if err := a.Transmit([][]byte{frameWithID(1, 64)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	out := make([][]byte, 4)
	if n := b.Receive(out); n != 0 {
		t.Errorf("closed end received %d frames", n)
	}
	for name, err := range map[string]error{
		"Transmit": b.Transmit([][]byte{{1}}),
		"Flush":    b.Flush(),
		"Wait":     b.Wait(time.Second),
	} {
		if !errors.Is(err, port.ErrClosed) {
			t.Errorf("%s on a closed end: %v, want ErrClosed", name, err)
		}
	}
	// The open end keeps working; what it sends is lost.
	if err := a.Transmit([][]byte{frameWithID(2, 64)}); err != nil {
		t.Fatalf("transmit towards a closed end: %v", err)
	}
	if s := p.Stats(AtoB); s.Sent != 2 || s.Delivered != 1 || s.Dropped != 1 {
		t.Fatalf("stats %+v, want 2 sent, 1 delivered before Close, 1 dropped after", s)
	}
}

func TestPipeTxFullUntilPeerDrains(t *testing.T) {
	const depth = 4
	p := newPipe(t, PipeConfig{Depth: depth})
	a, b := p.A(), p.B()
	for i := range uint32(depth) {
		if err := a.Transmit([][]byte{frameWithID(i, 64)}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	for range 3 {
		if err := a.Transmit([][]byte{frameWithID(99, 64)}); !errors.Is(err, port.ErrTxFull) {
			t.Fatalf("transmit into a full pipe: %v, want ErrTxFull", err)
		}
	}
	if s := p.Stats(AtoB); s.Sent != depth || s.Full != 3 {
		t.Fatalf("stats %+v", s)
	}
	// Flush does not make room: only the receiver does.
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := a.Transmit([][]byte{frameWithID(99, 64)}); !errors.Is(err, port.ErrTxFull) {
		t.Fatalf("after Flush: %v, want ErrTxFull", err)
	}
	out := make([][]byte, 1)
	if n := b.Receive(out); n != 1 {
		t.Fatalf("received %d", n)
	}
	if err := a.Transmit([][]byte{frameWithID(depth, 64)}); err != nil {
		t.Fatalf("after the peer took one frame: %v", err)
	}
	if ids := drain(t, b, 64); !slices.Equal(ids, []uint32{1, 2, 3, 4}) {
		t.Fatalf("delivered %v", ids)
	}
}

// model computes, independently of the pipe's implementation, what a
// direction delivers for n frames: PipeConfig's documented rules (Filter
// first; otherwise one Float64 draw picks loss, duplicate or reorder, and
// a reorder draws its distance 1+IntN(ReorderDepth)), turned into delivery
// times and sorted.
func model(cfg PipeConfig, dir Direction, n int) (ids []uint32, st PipeStats) {
	depth := cfg.ReorderDepth
	if depth == 0 {
		depth = DefaultPipeReorderDepth
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(dir)))
	type event struct{ at, class, id int }
	var events []event
	for i := range n {
		v := Pass
		if cfg.Filter != nil {
			v = cfg.Filter(dir, frameWithID(uint32(i), 64))
		}
		hold := 0
		if v == Pass && cfg.Loss+cfg.Duplicate+cfg.Reorder > 0 {
			u := rng.Float64()
			switch {
			case u < cfg.Loss:
				v = Drop
			case u < cfg.Loss+cfg.Duplicate:
				v = Duplicate
			case u < cfg.Loss+cfg.Duplicate+cfg.Reorder:
				hold = 1 + rng.IntN(depth)
			}
		}
		st.Sent++
		switch {
		case v == Drop:
			st.Dropped++
		case v == Duplicate:
			st.Duplicated++
			events = append(events, event{i, 0, i}, event{i, 1, i})
		case hold > 0:
			st.Reordered++
			// Delivered right after frame i+hold, after frames held earlier.
			events = append(events, event{i + hold, 2, i})
		default:
			events = append(events, event{i, 0, i})
		}
	}
	sort.SliceStable(events, func(x, y int) bool {
		ex, ey := events[x], events[y]
		if ex.at != ey.at {
			return ex.at < ey.at
		}
		if ex.class != ey.class {
			return ex.class < ey.class
		}
		return ex.id < ey.id
	})
	for _, e := range events {
		if e.at < n { // later ones are still held
			ids = append(ids, uint32(e.id))
		}
	}
	st.Delivered = uint64(len(ids))
	return ids, st
}

// run transmits n frames from A to B, draining B after every frame, and
// returns what B received.
func run(t testing.TB, p *Pipe, n int) []uint32 {
	t.Helper()
	var ids []uint32
	for i := range uint32(n) {
		if err := p.A().Transmit([][]byte{frameWithID(i, 64)}); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		ids = append(ids, drain(t, p.B(), 64)...)
	}
	return ids
}

func TestPipeFaultsFollowTheModel(t *testing.T) {
	third := func(_ Direction, f []byte) Verdict {
		switch binary.BigEndian.Uint32(f) {
		case 2:
			return Drop
		case 5:
			return Duplicate
		}
		return Pass
	}
	for _, tc := range []struct {
		name string
		cfg  PipeConfig
	}{
		{"perfect", PipeConfig{Seed: 1}},
		{"loss", PipeConfig{Seed: 2, Loss: 0.2}},
		{"duplicate", PipeConfig{Seed: 3, Duplicate: 0.2}},
		{"reorder", PipeConfig{Seed: 4, Reorder: 0.3, ReorderDepth: 4}},
		{"all three", PipeConfig{Seed: 5, Loss: 0.1, Duplicate: 0.1, Reorder: 0.2}},
		{"filter with faults", PipeConfig{Seed: 6, Loss: 0.1, Reorder: 0.2, Filter: third}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2000
			p := newPipe(t, tc.cfg)
			got := run(t, p, n)
			want, wantStats := model(tc.cfg, AtoB, n)
			if !slices.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Fatalf("deliveries differ from the model at position %d: got %v, want %v",
					i, got[i:min(i+8, len(got))], want[i:min(i+8, len(want))])
			}
			if st := p.Stats(AtoB); st != wantStats {
				t.Fatalf("stats %+v, model %+v", st, wantStats)
			}
			held := wantStats.Sent + wantStats.Duplicated - wantStats.Delivered - wantStats.Dropped
			if int(held) != len(p.links[AtoB].held) {
				t.Fatalf("%d frames held, counters imply %d", len(p.links[AtoB].held), held)
			}
		})
	}
}

// TestPipeFaultPatterns pins each fault's visible effect on the delivered
// sequence, with probabilities that leave no room for chance.
func TestPipeFaultPatterns(t *testing.T) {
	seq := func(ids ...uint32) []uint32 { return ids }
	for _, tc := range []struct {
		name  string
		cfg   PipeConfig
		want  []uint32
		stats PipeStats
	}{
		{"loss 1", PipeConfig{Loss: 1}, nil, PipeStats{Sent: 5, Dropped: 5}},
		{"duplicate 1", PipeConfig{Duplicate: 1}, seq(0, 0, 1, 1, 2, 2, 3, 3, 4, 4),
			PipeStats{Sent: 5, Delivered: 10, Duplicated: 5}},
		// Every frame waits for exactly one later frame, which is itself
		// held: the stream arrives in order, one frame behind.
		{"reorder 1 depth 1", PipeConfig{Reorder: 1, ReorderDepth: 1}, seq(0, 1, 2, 3),
			PipeStats{Sent: 5, Delivered: 4, Reordered: 5}},
		{"filter drops the third", PipeConfig{Filter: func(_ Direction, f []byte) Verdict {
			if binary.BigEndian.Uint32(f) == 2 {
				return Drop
			}
			return Pass
		}}, seq(0, 1, 3, 4), PipeStats{Sent: 5, Delivered: 4, Dropped: 1}},
		{"filter duplicates the second", PipeConfig{Loss: 1, Filter: func(_ Direction, f []byte) Verdict {
			if binary.BigEndian.Uint32(f) == 1 {
				return Duplicate
			}
			return Pass
		}}, seq(1, 1), PipeStats{Sent: 5, Delivered: 2, Dropped: 4, Duplicated: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipe(t, tc.cfg)
			if got := run(t, p, 5); !slices.Equal(got, tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
			if st := p.Stats(AtoB); st != tc.stats {
				t.Fatalf("stats %+v, want %+v", st, tc.stats)
			}
		})
	}
}

// TestPipeReorderSwapsNeighbours: with depth 1, a held frame trails the
// next one, so every reordering is a swap of neighbours.
func TestPipeReorderSwapsNeighbours(t *testing.T) {
	p := newPipe(t, PipeConfig{Seed: 42, Reorder: 0.3, ReorderDepth: 1})
	const n = 1000
	got := run(t, p, n)
	swaps := 0
	for i := 0; i+1 < len(got); i++ {
		if got[i] > got[i+1] {
			swaps++
			if got[i] != got[i+1]+1 && got[i+1] != got[i]-1 {
				t.Fatalf("position %d: %d before %d is not a neighbour swap", i, got[i], got[i+1])
			}
		}
	}
	st := p.Stats(AtoB)
	if swaps == 0 || uint64(swaps) > st.Reordered {
		t.Fatalf("%d swaps for %d reordered frames", swaps, st.Reordered)
	}
	if r := float64(st.Reordered) / n; r < 0.2 || r > 0.4 {
		t.Fatalf("reordered %.2f of frames, configured 0.3", r)
	}
}

func TestPipeFilterSeesDirectionAndFrame(t *testing.T) {
	var seen [2][]uint32
	p := newPipe(t, PipeConfig{Filter: func(dir Direction, f []byte) Verdict {
		seen[dir] = append(seen[dir], binary.BigEndian.Uint32(f))
		if len(f) != 300 {
			t.Errorf("filter saw %d bytes, want the whole 300-byte frame", len(f))
		}
		return Pass
	}})
	for i := range uint32(3) {
		f := frameWithID(i, 300)
		if err := p.A().Transmit([][]byte{f[:100], f[100:]}); err != nil {
			t.Fatal(err)
		}
		if err := p.B().Transmit([][]byte{frameWithID(10+i, 300)}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(seen[AtoB], []uint32{0, 1, 2}) || !slices.Equal(seen[BtoA], []uint32{10, 11, 12}) {
		t.Fatalf("filter saw %v", seen)
	}
}

func TestPipeDeterministic(t *testing.T) {
	cfg := PipeConfig{Seed: 7, Loss: 0.05, Duplicate: 0.05, Reorder: 0.1, ReorderDepth: 5}
	first := run(t, newPipe(t, cfg), 3000)
	if again := run(t, newPipe(t, cfg), 3000); !slices.Equal(first, again) {
		t.Fatal("the same seed gave different deliveries")
	}
	cfg.Seed = 8
	if other := run(t, newPipe(t, cfg), 3000); slices.Equal(first, other) {
		t.Fatal("seeds 7 and 8 gave the same deliveries: the seed is ignored")
	}
}

// TestPipeDeterministicAcrossGoroutines drives the two ends from two
// goroutines, the receiver at its own pace: the deliveries must equal the
// single-goroutine run's, since faults are decided at Transmit.
func TestPipeDeterministicAcrossGoroutines(t *testing.T) {
	cfg := PipeConfig{Seed: 11, Loss: 0.05, Duplicate: 0.05, Reorder: 0.1, Depth: 16}
	const n = 5000
	want := run(t, newPipe(t, cfg), n)

	p := newPipe(t, cfg)
	a, b := p.A(), p.B()
	var got []uint32
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(20 * time.Second)
		for len(got) < len(want) && time.Now().Before(deadline) {
			if ids := drain(t, b, 64); len(ids) > 0 {
				got = append(got, ids...)
				continue
			}
			if err := b.Wait(10 * time.Millisecond); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for i := uint32(0); i < n; {
		switch err := a.Transmit([][]byte{frameWithID(i, 64)}); {
		case err == nil:
			i++
		case errors.Is(err, port.ErrTxFull) && time.Now().Before(deadline):
			time.Sleep(time.Microsecond)
		default:
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	<-done
	if !slices.Equal(got, want) {
		t.Fatalf("concurrent run delivered %d frames, single-goroutine run %d, or in another order", len(got), len(want))
	}
	if p.Stats(AtoB).Full == 0 {
		t.Log("the transmitter never found the pipe full; the race with the receiver was not exercised")
	}
}

func TestPipeDoorbellWakesWait(t *testing.T) {
	p := newPipe(t, PipeConfig{})
	b := p.B()

	// A doorbell rung before Wait makes the next Wait return at once.
	b.Doorbell()
	start := time.Now()
	if err := b.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait after Doorbell took %v", d)
	}

	// Nothing pending: Wait sleeps out its timeout.
	start = time.Now()
	if err := b.Wait(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("idle Wait returned after %v, before its 30ms timeout", d)
	}

	for name, wake := range map[string]func(){
		"doorbell": b.Doorbell,
		"frame":    func() { _ = p.A().Transmit([][]byte{frameWithID(1, 64)}) },
	} {
		t.Run(name, func(t *testing.T) {
			drain(t, b, 64)
			woke := make(chan time.Duration)
			go func() {
				start := time.Now()
				_ = b.Wait(-1) // no limit: only the wake-up ends it
				woke <- time.Since(start)
			}()
			time.Sleep(20 * time.Millisecond) // let it block
			wake()
			select {
			case d := <-woke:
				if d < 20*time.Millisecond {
					t.Fatalf("Wait returned after %v, before the wake-up", d)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Wait did not wake")
			}
		})
	}
}

func TestPipeDataPathAllocatesNothing(t *testing.T) {
	p := newPipe(t, PipeConfig{Seed: 1, Loss: 0.1, Duplicate: 0.1, Reorder: 0.1,
		Filter: func(Direction, []byte) Verdict { return Pass }})
	a, b := p.A(), p.B()
	f := frameWithID(1, 1500)
	segs := [][]byte{f[:60], f[60:1496], f[1496:]}
	out := make([][]byte, 32)
	step := func() {
		for range 8 {
			if err := a.Transmit(segs); err != nil {
				t.Fatal(err)
			}
		}
		_ = a.Flush()
		b.Doorbell()
		_ = b.Wait(0)
		b.Receive(out)
		b.Release()
	}
	for range 1000 { // warm up: every buffer the pipe will ever need
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Fatalf("%v allocations per round of 8 frames", n)
	}
}

func BenchmarkPipe(b *testing.B) {
	for _, size := range []int{64, 1500, 9000} {
		b.Run(fmt.Sprintf("frame=%d", size), func(b *testing.B) {
			p := newPipe(b, PipeConfig{})
			tx, rx := p.A(), p.B()
			f := frameWithID(1, size)
			segs := [][]byte{f}
			out := make([][]byte, 32)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i += 32 {
				for range 32 {
					if err := tx.Transmit(segs); err != nil {
						b.Fatal(err)
					}
				}
				for got := 0; got < 32; {
					got += rx.Receive(out)
				}
			}
			rx.Release()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
		})
	}
}

// BenchmarkPipeTwoGoroutines measures a transmitter and a receiver on two
// goroutines, the receiver sleeping in Wait when the pipe is empty.
func BenchmarkPipeTwoGoroutines(b *testing.B) {
	p := newPipe(b, PipeConfig{Depth: 1024})
	tx, rx := p.A(), p.B()
	segs := [][]byte{frameWithID(1, 1500)}
	b.ReportAllocs()
	b.SetBytes(1500)
	b.ResetTimer()
	done := make(chan struct{})
	go func() {
		defer close(done)
		out := make([][]byte, 64)
		for got := 0; got < b.N; {
			n := rx.Receive(out)
			if n == 0 {
				_ = rx.Wait(time.Millisecond)
			}
			got += n
		}
		rx.Release()
	}()
	for i := 0; i < b.N; {
		if err := tx.Transmit(segs); err == nil {
			i++
		}
	}
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}
