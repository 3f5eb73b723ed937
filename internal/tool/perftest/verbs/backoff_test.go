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
// lasts, then blocks in Wait; Reset starts a new spin; Busy never waits;
// an ended context is returned.
func TestBackoffSpinsThenWaits(t *testing.T) {
	ep := &waitCounter{}
	b := verbs.Backoff{Spin: 5 * time.Millisecond}
	ctx := context.Background()
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
	b.Reset()
	for range 64 {
		b.Idle(ctx, ep)
	}
	if ep.waits != 1 {
		t.Fatalf("%d waits right after Reset", ep.waits)
	}

	busy := verbs.Backoff{Spin: time.Nanosecond, Busy: true}
	for range 1000 {
		if err := busy.Idle(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	if ep.waits != 1 {
		t.Fatalf("busy polling waited")
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
