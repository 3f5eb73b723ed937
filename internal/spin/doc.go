// Package spin is how ndkxdp's polling threads give way while they spin:
// the engines' idle loops and the consumers' completion polling (the
// tools, the client library). A spinner that only yields its P
// (runtime.Gosched) keeps its OS thread, so when the polling threads of
// several processes outnumber the cores, one with work waits for the
// kernel to end another's time slice: milliseconds (ndk/internal/rc's
// doc, "Polling"). Yielder also yields the thread (sched_yield(2)),
// which hands the core to the other polling threads at once, as long as
// they yield back. A thread that does not (a process computing) keeps the
// core for its whole slice after each such yield; a Yielder whose yields
// come back that late, one after another, says so (Quiet), and its
// caller's spin ends in a blocking wait, from which the kernel wakes it
// when its work comes. It never spins on without yielding the thread:
// that spinner would be the thread that keeps the core.
package spin
