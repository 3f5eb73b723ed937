package main

import (
	"context"
	"sync"
)

// tracker holds the phase a command is in, for the message a signal
// leaves: "interrupted during SEND".
type tracker struct {
	mu   sync.Mutex
	name string
}

func (t *tracker) phase() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.name == "" {
		return "start-up"
	}
	return t.name
}

type trackerKey struct{}

func withTracker(ctx context.Context, t *tracker) context.Context {
	return context.WithValue(ctx, trackerKey{}, t)
}

// enterPhase records that the command now does what name says; without a
// tracker in ctx (tests that call run) it does nothing.
func enterPhase(ctx context.Context, name string) {
	if t, ok := ctx.Value(trackerKey{}).(*tracker); ok {
		t.mu.Lock()
		t.name = name
		t.mu.Unlock()
	}
}
