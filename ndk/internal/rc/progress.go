package rc

import (
	"runtime/metrics"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Consumer-driven progress (PollProgress), as libfabric's manual progress
// and UCX's worker progress: a consumer whose CQ poll finds nothing, or
// whose post finds the engine goroutine asleep or behind, runs the
// engine's turn itself, on its own thread, instead of waking the engine
// goroutine and waiting for the scheduler to run it. The frame in, the
// completion and the frame out then need no other thread (doc.go,
// "Polling", has why that matters).
//
// The engine's state stays single-threaded: a turn runs only while its
// runner holds the turn token (Engine.turn, taken by CompareAndSwap,
// which is all an uncontended turn costs beyond its work), whether that
// is the engine goroutine or a consumer. A consumer that finds the token
// taken does not wait: the holder's turn, or the engine goroutine's next
// one, does the work (a post rings the doorbell then, so that a turn
// already past the ready ring cannot miss it).
//
// The engine goroutine stays the backstop, and sleeps with the token
// released. While consumers drive it (a poll's turn within drivenNap) it
// does not spin, and naps at most drivenNap on its doorbell alone
// (port.DoorbellWaiter): a nap that frames ended would cost each
// sender's kick a wake-up and take the turn from the consumer polling
// for them. Otherwise it is PollAdaptive, sleeping on the socket and the
// doorbell, so that frames for consumers that stopped polling wake it. A
// consumer that stops polling to block on a notification (a CQ's arm,
// ArmPlacedWrites) says so (ConsumerBlocks), and the engine watches its
// socket again from then until the next poll. A consumer that stops
// polling without blocking so leaves frames to the end of the nap.
//
// A consumer's turn may leave work due before the sleeping engine would
// look again (a timer it armed, frames the transmit ring had no room
// for): it then rings the doorbell, unless the engine naps anyway, which
// bounds how late a timer fires, once consumers stop polling, to
// drivenNap. No wake-up is lost: the engine publishes when its sleep ends
// (sleepUntil) before it releases the token, so a consumer's turn either
// comes before the engine computed its sleep, which then counts the
// consumer's timers, or after, and sees sleepUntil; the port's doorbell
// protocol (port.Bell) covers a ring that comes before the engine
// blocks.
//
// Control calls (Engine.do) and pollers (the daemon's relay) run only on
// the engine goroutine: a watched eventfd must not change under its
// ppoll, and a daemon's clients cannot reach the daemon's engine anyway.

// drivenNap is how long the engine goroutine sleeps at most while
// consumers drive it, and how recent a consumer turn must be for it to
// count as driving. It bounds a timer's lateness once consumers stop
// polling, and costs a napping engine a thousand wake-ups a second.
const drivenNap = time.Millisecond

// Progress is what a consumer's poll that found its CQ empty does on the
// engine. It runs one turn of the engine on the caller's goroutine, if
// the engine polls so (PollProgress) and no other turn is running:
// receive, the ready QPs, transmit, the timers that are due, and the
// port's flush; an adaptive engine has the caller yield its thread now
// and then instead (consumerIdle). It returns how much the turn did
// (frames, QPs, sends). It never blocks and allocates nothing; any
// goroutine may call it.
func (e *Engine) Progress() int {
	if e.poll == PollAdaptive {
		e.consumerIdle()
		return 0
	}
	_, work := e.consumerTurn(true)
	return work
}

// consumerIdle is an adaptive engine's part of a poll that found its CQ
// empty: every idleYieldEvery-th such poll, if no goroutine waits for a
// P, yields the caller's thread (sched_yield), as the engine's own idle
// loop does. A consumer that spins on its CQ with runtime.Gosched between
// polls, Go's idiom, yields its P but keeps its thread. Where this
// process's engines wait for a P, that hands them one; but where each has
// a P of its own and its thread waits for a core, as between processes
// (each an engine and a consumer on two Ps, four polling threads on two
// cores), the engines that owe the consumer its completions, its own and
// the peer process's, wait for the kernel's time slice on a core the
// consumer holds. test/rdma's BenchmarkCPUCost moved 62k-161k 64 B SENDs
// a second so, at 5.4-7.7 CPU-seconds a million on the receiver, and
// about a million a second at 0.3-0.9 with the yield (doc.go,
// "Polling"). A yield with a goroutine waiting would cost the in-process
// ping-pong, whose goroutines share the Ps, a system call for nothing:
// its p50 rose from 10.8-13.3µs to 13.7-15.5µs. PollBusy promises a core
// per engine and does not yield; PollProgress runs the turn instead.
func (e *Engine) consumerIdle() {
	if e.emptyPolls.Add(1)%idleYieldEvery != 0 {
		return
	}
	if !goroutineWaits(e) {
		yieldThread()
	}
}

// goroutineWaits reports whether a goroutine waits for a P; a variable
// so that a test can choose. One caller at a time reads the count into
// the engine's sample (about 50ns, no allocation); another reports false
// without looking.
var goroutineWaits = func(e *Engine) bool {
	if !e.idleLook.CompareAndSwap(false, true) {
		return false
	}
	metrics.Read(e.idleSample[:])
	v := e.idleSample[0].Value
	e.idleLook.Store(false)
	return v.Kind() == metrics.KindUint64 && v.Uint64() > 0
}

// runnableMetric counts the goroutines waiting for a P.
const runnableMetric = "/sched/goroutines/runnable:goroutines"

// idleYieldEvery is how many empty polls a consumer's thread yield comes
// in: a sched_yield costs a system call, and a ping-pong consumer that
// polls in a loop should meet its answer outside one.
const idleYieldEvery = 4

// yieldThread yields the calling thread; a variable so that a test can
// count the yields. sched_yield never blocks: a raw system call, which
// the runtime does not see (internal/spin's schedYield has why).
var yieldThread = func() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// consumerTurn is Progress, also reporting whether the turn ran. A poll's
// turn (poll) marks the engine as driven; a post's does not, so that an
// engine whose consumer only posts is woken by the timers those posts
// arm and then batches the posts that follow itself (QP.doorbell), one
// kick for many, where a kick per post would cost the poster a system
// call each.
func (e *Engine) consumerTurn(poll bool) (ran bool, work int) {
	if e.poll != PollProgress || !e.turn.CompareAndSwap(0, 1) {
		return false, 0
	}
	e.now = e.clock()
	if poll {
		// Polling again: a consumer that said it would block
		// (ConsumerBlocks) may have posted since, which does not count.
		e.drivenAt = e.now
		if e.blocking.Load() {
			e.blocking.Store(false)
		}
	}
	e.replayLeft = replayBudget
	work = e.receive()
	work += e.receiveForwarded()
	work += e.drainReady()
	work += e.transmitGSI()
	work += e.transmit()
	if e.now >= e.nextTimer {
		e.timers()
	}
	if err := e.port.Flush(); err != nil {
		atomic.AddUint64(&e.c.TxErrors, 1)
	}
	due := e.nextTimer
	if len(e.active) > 0 {
		due = min(due, e.now+int64(blockedWait))
	}
	// Loaded under the token: an engine that went to sleep before this
	// turn stored it before it released the token.
	s := e.sleepUntil.Load()
	e.turn.Store(0)
	atomic.AddUint64(&e.c.ConsumerTurns, 1)
	if s != 0 && due < s-int64(drivenNap) {
		e.port.Doorbell()
	}
	return true, work
}

// ConsumerBlocks tells a PollProgress engine that a consumer is about to
// block on a notification instead of polling: the engine, napping on its
// doorbell alone while consumers drive it, is woken to watch its socket
// again, so that the frame the consumer waits for wakes it. Other modes
// ignore it. It allocates nothing; any goroutine may call it.
func (e *Engine) ConsumerBlocks() {
	if e.poll != PollProgress || e.blocking.Load() {
		return
	}
	e.blocking.Store(true)
	e.port.Doorbell()
}
