// Package cq is the completion-queue core of ndkxdp: the ring the engine
// completes into, the arm word, and the goroutine that runs notification
// callbacks. Package ndk wraps it as ndk.CQ; the engine holds a *CQ and
// calls Push.
//
// The notification rules are those of the NDKPI completion-handling page
// (seed 002, NDKPI.md §8):
//   - one callback per arm; the arm is cleared, then the callback is called;
//   - callbacks of one CQ are serialized and run on the CQ's own goroutine,
//     never on the engine goroutine that pushed, so a slow callback cannot
//     stall the data path;
//   - an arm made while the CQ holds completions that arrived after the last
//     notification fires at once (completions already present at the last
//     notification do not re-fire);
//   - arms made before an earlier one fired combine as NDKPI.md §8's table:
//     ANY over SOLICITED over ERRORS;
//   - ANY fires on the next completion; SOLICITED on a receive of a
//     solicited send or any completion with an error status; ERRORS only on
//     a CQ error (overrun, fatal). A CQ error satisfies every arm and is
//     reported once, with its status (STATUS_BUFFER_OVERFLOW for overrun);
//   - Close waits for a running callback; no callback starts after Close.
//
// Push allocates nothing and takes no lock: it stores the entry in a
// lock-free MPSC ring and does one atomic add on the arm word, which both
// counts the completion and reads the arm (a solicited or error completion
// also bumps a second counter). Only when the CQ is armed does it go further
// (a CAS to clear the arm and a channel send to wake the callback
// goroutine).
//
// Resize (NdkResizeCq) appends a ring and seals the old one, which the
// consumer leaves once drained, so Push and Pop stay lock-free; interrupt
// moderation (NdkControlCqInterruptModeration, moderation.go) holds a fired
// notification in the callback goroutine until enough completions arrived
// or its interval passed.
//
// It is not the public API: status, type and arm come from package ndkpi
// (NTSTATUS, NDK_OPERATION_TYPE, NDK_CQ_NOTIFY), which ndk re-exports, so
// this package does not import ndk.
//
// Example:
//
//	c, _ := cq.New(1024, func(status ndkpi.Status) { /* drain with Pop, re-arm */ })
//	c.Arm(ndkpi.CQNotifyAny)
//	c.Push(&cq.Entry{Type: ndkpi.OpSend, RequestContext: ctx}) // engine side
//	var e cq.Entry
//	for c.Pop(&e) { ... }
//	c.Close()
package cq
