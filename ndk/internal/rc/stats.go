package rc

import (
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/counters"
)

// liveCounters are written by the engine goroutine, with atomic adds,
// and read by Stats from anywhere.
type liveCounters struct {
	_ [0]atomic.Uint64 // 64-bit alignment for the atomic adds, on 32-bit platforms too
	counters.Engine
	// writesPlaced is incremented after each WRITE packet's bytes are
	// placed: a release that PlacedWrites' load pairs with.
	writesPlaced atomic.Uint64
}

// PlacedWrites returns how many RDMA WRITE packets the QP's engine has
// placed into memory (for every QP of the engine). The load is an
// acquire: bytes those packets placed are visible to the caller afterwards,
// so a consumer may poll memory a peer writes without a data race.
func (q *QP) PlacedWrites() uint64 { return q.eng.c.writesPlaced.Load() }

// ArmPlacedWrites asks for one token on ch (a send that never blocks: a
// full ch already holds one) when the engine next places a WRITE packet
// for q; a later arm replaces an earlier one. A consumer that polls
// memory a peer writes arms, checks the memory once more, and then blocks
// on ch: the engine increments PlacedWrites before it looks at the arm,
// and both are sequentially consistent atomics, so either the check sees
// the bytes or the engine sees the arm.
func (q *QP) ArmPlacedWrites(ch *chan struct{}) {
	q.writeArm.Store(ch)
	q.eng.ConsumerBlocks()
}

// wakeArmed fires and clears a one-shot arm.
func wakeArmed(arm *atomic.Pointer[chan struct{}]) {
	if ch := arm.Swap(nil); ch != nil {
		select {
		case *ch <- struct{}{}:
		default:
		}
	}
}

// Stats are an engine's counters since it started (counters.Engine
// declares them).
type Stats = counters.Engine

// Stats returns the engine's counters. While the engine runs, the
// snapshot is taken on the engine goroutine, so it is consistent and
// orders the caller with the engine: what the engine did before (placing a
// WRITE's bytes, say) happens before Stats returns, and what the caller
// did before calling (filling memory a peer will READ) happens before the
// engine's next step. A peer's completion tells the consumer that the
// engine placed bytes, but that causality crosses the kernel, where the
// race detector cannot follow it; Stats makes it visible.
func (e *Engine) Stats() Stats {
	var s Stats
	if e.do(func() { s = e.snapshot() }) != nil {
		s = e.snapshot()
	}
	return s
}

func (e *Engine) snapshot() Stats { return e.c.Snapshot() }

// PlacedWrites is QP.PlacedWrites for the engine as a whole.
func (e *Engine) PlacedWrites() uint64 { return e.c.writesPlaced.Load() }
