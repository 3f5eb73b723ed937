package verbs

import (
	"context"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/spin"
)

// DefaultSpin is how long a Backoff spins before it blocks. A ping-pong's
// answer on the veth pair comes within about 10µs, so a consumer waiting
// for one spins through it; beyond that the thread gives its core back to
// the engines and to other processes (ndk/internal/rc/doc.go, "Polling").
const DefaultSpin = 20 * time.Microsecond

// Backoff is a consumer's adaptive wait for an Endpoint: after an empty
// Poll or Peek the caller calls Idle, which yields its P and returns,
// until Spin has passed since the first empty poll; then Idle blocks in
// Endpoint.Wait. A goroutine that only yields keeps its OS thread, so
// when the polling threads of several processes outnumber the cores each
// one waits for the kernel's time slice, milliseconds; blocking lets the
// thread with work run at once. The spin's clock is read every 16 calls,
// and at the call after a thread yield that came back slow (another
// thread held the core for a slice, spin.SlowYield), so that beside a
// computing process a consumer blocks after one slice rather than 16.
// Busy never blocks (busy polling, a core
// per consumer). The zero Backoff spins for DefaultSpin.
type Backoff struct {
	Spin time.Duration
	Busy bool
	// Waits counts the calls that blocked in Endpoint.Wait.
	Waits uint64

	n     int
	since time.Time
	yield spin.Yielder
}

// Waiter is what a Backoff blocks in: an Endpoint, or anything else that
// can wait for news (the demo's CQ waits).
type Waiter interface {
	Wait(ctx context.Context) error
}

// Reset starts the next spin: call it when a poll found work.
func (b *Backoff) Reset() { b.n = 0 }

// Idle is called after an empty poll. It returns ctx's error once ctx
// ends, and Wait's error.
func (b *Backoff) Idle(ctx context.Context, ep Waiter) error {
	if b.n == 0 {
		b.since = time.Now()
	}
	b.n++
	if b.n&15 != 0 {
		if yieldThread(&b.yield) {
			// The yield came back slow: another thread held the core
			// for a slice, longer than a spin, so the next empty poll
			// looks at the clock rather than one up to 15 slices on.
			b.n |= 15
		}
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	spin := b.Spin
	if spin <= 0 {
		spin = DefaultSpin
	}
	if b.Busy || (time.Since(b.since) < spin && !quiet(&b.yield)) {
		b.yield.Yield()
		return nil
	}
	b.n = 0
	b.Waits++
	return ep.Wait(ctx)
}

// yieldThread is spin.Yielder.Yield; a variable so that a test can make
// its yields slow.
var yieldThread = (*spin.Yielder).Yield

// quiet is spin.Yielder.Quiet; a variable so that a test can hold the
// spin's timing apart from how loaded the machine is.
var quiet = (*spin.Yielder).Quiet
