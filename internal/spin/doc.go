// Package spin is how ndkxdp's polling threads give way while they spin:
// the engines' idle loops and the consumers' completion polling (the
// tools, the client library). A spinner that only yields its P
// (runtime.Gosched) keeps its OS thread, so when the polling threads of
// several processes outnumber the cores, one with work waits for the
// kernel to end another's time slice: milliseconds (ndk/internal/rc's
// doc, "Polling"). Yielder also yields the thread (sched_yield(2)),
// which hands the core to the other polling threads at once. It does so
// on every yield: the spin is bounded by its caller, which then blocks,
// and a spinner that kept its thread instead would hold the core for a
// whole slice.
package spin
