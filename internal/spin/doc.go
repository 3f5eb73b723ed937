// Package spin is how ndkxdp's polling threads give way while they spin:
// the engines' idle loops and the consumers' completion polling (the
// tools, the client library). A spinner that only yields its P
// (runtime.Gosched) keeps its OS thread, so when the polling threads of
// several processes outnumber the cores, one with work waits for the
// kernel to end another's time slice: milliseconds (ndk/internal/rc's
// doc, "Polling"). Yielder also yields the thread (sched_yield(2)), which
// hands the core to the other polling threads at once, as long as they
// yield back. A thread that does not (a process computing, a spinner
// elsewhere) keeps the core for its whole slice after such a yield; a
// Yielder that sees one stops yielding the thread for a while, and the
// caller's bounded spin ends in a blocking wait, from which the kernel
// wakes it ahead of that thread.
package spin
