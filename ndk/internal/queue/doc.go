// Package queue holds the bounded lock-free rings between an NDK consumer
// and the ndkxdp engine: SPSC for a QP's send and receive queues (one
// posting goroutine, one engine goroutine, as NDKPI's posting rules allow:
// "the consumer never posts to the same queue from two threads at once") and
// MPSC for completion queues (several engine goroutines may complete into one
// CQ; one consumer, serialized by NDKPI's completion-handling rules), and
// MPMC for shared receive queues (one posting goroutine, and the engines
// of every QP on the SRQ taking receives).
//
// Each side keeps its own index and a cached copy of the peer's; only the
// shared indices are atomic, loaded with acquire and stored with release
// semantics as in the kernel's xsk_queue.h ring comment (sync/atomic is
// sequentially consistent, which is stronger). Push and pop allocate nothing
// and never block: a full ring refuses the push, an empty ring returns false.
//
// It is not a general-purpose channel: no blocking, no close, no fairness,
// and calling one side from two goroutines at once is a bug the ring does
// not detect.
//
// Example:
//
//	sq, _ := queue.NewSPSC[wqe](256)
//	if !sq.TryPush(&w) { /* queue full: STATUS_INSUFFICIENT_RESOURCES */ }
//	// engine goroutine:
//	var w wqe
//	for sq.TryPop(&w) { execute(&w) }
package queue
