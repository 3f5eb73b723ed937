package demo

import (
	"context"
	"errors"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// CQWait is how the demo waits for a CQ, as the tools do (verbs.Backoff):
// after an empty poll it spins verbs.DefaultSpin, yielding its P and its
// thread, then arms the CQ and blocks on its notification. A loop that
// only calls runtime.Gosched keeps its OS thread: with -daemon, the
// client process's two such loops held both cores of a 2-core machine,
// and the daemons' engines waited for time slices (ping-pong p99 4-6ms).
type CQWait struct {
	cq   *ndk.CQ
	wake chan struct{} // the CQ's notification puts a token here
	b    verbs.Backoff

	// The bounds of the wait in progress (idle).
	stop     <-chan struct{}
	deadline time.Time
	timer    *time.Timer
}

// newCQWait creates a CQ of depth on a whose notifications wake the
// returned waiter.
func newCQWait(a *ndk.Adapter, depth int) (*CQWait, error) {
	w := &CQWait{wake: make(chan struct{}, 1)}
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
func (w *CQWait) reset() { w.b.Reset() }

// idle is called after an empty poll. It returns nil to poll again,
// ctx's error, errWaitDeadline once deadline (if not zero) passes, and
// nil at once when stop closes.
func (w *CQWait) idle(ctx context.Context, stop <-chan struct{}, deadline time.Time) error {
	if !deadline.IsZero() && time.Now().After(deadline) {
		return errWaitDeadline
	}
	w.stop, w.deadline = stop, deadline
	return w.b.Idle(ctx, w)
}

// Wait implements verbs.Waiter: it arms the CQ (an arm fires at once for
// a completion queued since the last notification) and blocks until its
// notification, the deadline, stop or ctx's end.
func (w *CQWait) Wait(ctx context.Context) error {
	if err := w.cq.Arm(ndk.CQNotifyAny); err != nil {
		return err
	}
	var expired <-chan time.Time
	if !w.deadline.IsZero() {
		if w.timer == nil {
			w.timer = time.NewTimer(time.Until(w.deadline))
		} else {
			w.timer.Reset(time.Until(w.deadline))
		}
		defer w.timer.Stop()
		expired = w.timer.C
	}
	select {
	case <-w.wake:
	case <-expired:
	case <-w.stop:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
