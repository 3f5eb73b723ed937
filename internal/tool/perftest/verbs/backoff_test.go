package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// waitCounter is an Endpoint whose Wait only counts.
type waitCounter struct {
	verbs.Endpoint
	waits int
}

func (w *waitCounter) Wait(ctx context.Context) error {
	w.waits++
	return ctx.Err()
}

// TestBackoffSpinsThenWaits: Idle returns without waiting while the spin
// lasts, then blocks in Wait; Reset starts a new spin; a quiet Yielder
// (slow yields beside a computing process) ends the spin at once; Busy
// never waits; a slow yield has the next call look at the clock; an
// ended context is returned.
func TestBackoffSpinsThenWaits(t *testing.T) {
	ctx := context.Background()
	// The spin's timing, apart from the machine's load: on a loaded
	// machine the Yielder may turn quiet, which the last part tests.
	restore := verbs.SetQuiet(false)
	defer restore()
	restoreYields := verbs.SetSlowYields(false)
	defer restoreYields()
	ep := &waitCounter{}
	b := verbs.Backoff{Spin: 5 * time.Millisecond}
	start := time.Now()
	for time.Since(start) < 2*time.Millisecond {
		if err := b.Idle(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	if ep.waits != 0 {
		t.Fatalf("%d waits within the spin", ep.waits)
	}
	for deadline := time.Now().Add(time.Second); ep.waits == 0; {
		if err := b.Idle(ctx, ep); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no wait a second after a 5ms spin")
		}
	}
	if b.Waits != 1 {
		t.Fatalf("Waits %d, want 1", b.Waits)
	}

	// A spin that began before a pause has run out; Reset begins another,
	// which 16 calls (one look at the clock) do not outlast.
	b.Spin = 200 * time.Millisecond
	for range 5 {
		b.Idle(ctx, ep)
	}
	time.Sleep(250 * time.Millisecond)
	b.Reset()
	for range 16 {
		b.Idle(ctx, ep)
	}
	if ep.waits != 1 {
		t.Fatalf("%d waits right after Reset", ep.waits-1)
	}
	// Without Reset the same calls find the spin over.
	for range 5 {
		b.Idle(ctx, ep)
	}
	time.Sleep(250 * time.Millisecond)
	for range 16 {
		b.Idle(ctx, ep)
	}
	if ep.waits != 2 {
		t.Fatalf("%d waits after a pause without Reset, want 1", ep.waits-1)
	}

	// Quiet: the first look at the clock waits, however long the spin.
	verbs.SetQuiet(true)
	q := verbs.Backoff{Spin: time.Hour}
	for range 16 {
		q.Idle(ctx, ep)
	}
	if ep.waits != 3 {
		t.Fatalf("a quiet Yielder: %d waits in 16 calls of an hour's spin, want 1", ep.waits-2)
	}

	// A slow yield (a slice another thread held, past a 20µs spin):
	// the next empty poll looks at the clock and waits, where it looked
	// only every 16 calls.
	verbs.SetQuiet(false)
	verbs.SetSlowYields(true)
	ep = &waitCounter{}
	s := verbs.Backoff{Spin: 20 * time.Microsecond}
	s.Idle(ctx, ep)
	time.Sleep(time.Millisecond) // the slice the stubbed yield stands for
	s.Idle(ctx, ep)
	if ep.waits != 1 {
		t.Fatalf("after a slow yield past the spin: %d waits in 2 calls, want 1", ep.waits)
	}
	// A spin longer than the slice goes on after it.
	ep = &waitCounter{}
	long := verbs.Backoff{Spin: time.Hour}
	for range 64 {
		long.Idle(ctx, ep)
	}
	if ep.waits != 0 {
		t.Fatalf("slow yields within an hour's spin: %d waits, want 0", ep.waits)
	}

	ep = &waitCounter{}
	busy := verbs.Backoff{Spin: time.Nanosecond, Busy: true}
	for range 1000 {
		if err := busy.Idle(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	if ep.waits != 0 {
		t.Fatalf("busy polling waited %d times", ep.waits)
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	var err error
	for range 16 {
		if err = busy.Idle(done, ep); err != nil {
			break
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Idle with an ended context: %v", err)
	}
}
