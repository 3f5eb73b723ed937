package main

import (
	"context"
	"errors"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/spin"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// cqWait is how the demo waits for a CQ, as the tools do (verbs.Backoff):
// after an empty poll it spins verbs.DefaultSpin, yielding its P and its
// thread, then arms the CQ and blocks on its notification. A loop that
// only calls runtime.Gosched keeps its OS thread: with -daemon, the
// client process's two such loops held both cores of a 2-core machine,
// and the daemons' engines waited for time slices (ping-pong p99 4-6ms).
type cqWait struct {
	cq    *ndk.CQ
	wake  chan struct{} // the CQ's notification puts a token here
	y     spin.Yielder
	since time.Time
	n     int
	timer *time.Timer
}

// newCQWait creates a CQ of depth on a whose notifications wake the
// returned waiter.
func newCQWait(a *ndk.Adapter, depth int) (*cqWait, error) {
	w := &cqWait{wake: make(chan struct{}, 1)}
	cq, err := a.CreateCQ(depth, func(ndk.Status) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	w.cq = cq
	return w, nil
}

// errWaitDeadline is idle's error when deadline passes.
var errWaitDeadline = errors.New("deadline passed")

// reset starts the next spin: call it when a poll found a completion.
func (w *cqWait) reset() { w.n = 0 }

// idle is called after an empty poll. It returns nil to poll again,
// ctx's error, errWaitDeadline once deadline (if not zero) passes, and
// nil at once when stop closes.
func (w *cqWait) idle(ctx context.Context, stop <-chan struct{}, deadline time.Time) error {
	if w.n == 0 {
		w.since = time.Now()
	}
	w.n++
	if w.n&15 != 0 {
		w.y.Yield()
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	if !deadline.IsZero() && now.After(deadline) {
		return errWaitDeadline
	}
	if now.Sub(w.since) < verbs.DefaultSpin && !w.y.Quiet() {
		w.y.Yield()
		return nil
	}
	w.n = 0
	if err := w.cq.Arm(ndk.CQNotifyAny); err != nil {
		return err
	}
	var expired <-chan time.Time
	if !deadline.IsZero() {
		if w.timer == nil {
			w.timer = time.NewTimer(time.Until(deadline))
		} else {
			w.timer.Reset(time.Until(deadline))
		}
		defer w.timer.Stop()
		expired = w.timer.C
	}
	select {
	case <-w.wake:
	case <-expired:
	case <-stop:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
