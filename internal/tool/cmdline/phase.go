package cmdline

import (
	"context"
	"sync"
)

// Tracker holds the phase a command is in, for the message a signal
// leaves: "interrupted during SEND".
type Tracker struct {
	mu   sync.Mutex
	name string
}

// Phase returns what the command is doing, "start-up" before it said.
func (t *Tracker) Phase() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.name == "" {
		return "start-up"
	}
	return t.name
}

type trackerKey struct{}

// WithTracker gives ctx the tracker that EnterPhase writes to.
func WithTracker(ctx context.Context, t *Tracker) context.Context {
	return context.WithValue(ctx, trackerKey{}, t)
}

// EnterPhase records that the command now does what name says; without a
// tracker in ctx (tests that call run) it does nothing.
func EnterPhase(ctx context.Context, name string) {
	if t, ok := ctx.Value(trackerKey{}).(*Tracker); ok {
		t.mu.Lock()
		t.name = name
		t.mu.Unlock()
	}
}
