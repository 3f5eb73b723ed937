package ndk

import (
	"sync"
	"sync/atomic"
)

// Result is NDK_RESULT: one completion as NdkGetCqResults returns it.
type Result struct {
	Status           Status
	BytesTransferred uint32 // valid for receives only (NDKPI.md §5)
	QPContext        any    // the QP's context from CreateQP
	RequestContext   any    // the context the request was posted with
}

// ResultEx is NDK_RESULT_EX: a Result plus the operation type and, for
// ReceiveAndInvalidate, the token the peer invalidated.
type ResultEx struct {
	Result
	Type OperationType
	// ProviderErrorCode is 0 on success; on failure 0 means none was given
	// (NDKPI 2.1).
	ProviderErrorCode uint32
	// TypeSpecificCompletionOutput holds the invalidated token when Type is
	// OpReceiveAndInvalidate; otherwise it is undefined.
	TypeSpecificCompletionOutput uint64
	// Flags and Immediate: the immediate-data extension (immediate.go).
	// A receive that a SEND or WRITE with immediate completed has
	// ResultWithImmediate and the immediate; otherwise both are 0.
	Flags     ResultFlag
	Immediate uint32
}

// CQ is a completion queue (NDK_CQ). The engine completes into it from its
// own goroutines; the consumer polls it with GetResults or GetResultsEx and
// asks for a notification with Arm.
//
// As NDKPI requires, the consumer serializes GetResults, GetResultsEx and
// Arm on one CQ (no two at once, from any goroutines); the CQ takes no lock
// among them. They may be called from the notification callback.
type CQ struct {
	adapter *Adapter
	be      cqBackend // inproc_cq.go, daemon_cq.go

	closed atomic.Bool // Close was called
	// users counts the QPs completing into the CQ (lifetime.go): a
	// close waits for them, as NDKPI.md §8 asks of an antecedent.
	mu    sync.Mutex
	users int
	done  chan struct{}
	once  sync.Once
}

// Depth returns how many completions the CQ holds before it overruns.
func (c *CQ) Depth() int { return c.be.depth() }

// GetResults removes up to len(results) completions, oldest first, and
// returns how many it stored (NdkGetCqResults). A ReceiveAndInvalidate
// completion is returned like any receive, without its Ex fields (seed
// 002). Allocates nothing.
func (c *CQ) GetResults(results []Result) int { return c.be.getResults(results) }

// GetResultsEx is GetResults with the NDK_RESULT_EX fields
// (NdkGetCqResultsEx). Allocates nothing.
func (c *CQ) GetResultsEx(results []ResultEx) int { return c.be.getResultsEx(results) }

// Arm requests one call of the CQ's notification callback (NdkArmCq):
//   - CQNotifyAny: on the next completion;
//   - CQNotifySolicited: on a receive of a solicited send, or any
//     completion with an error status;
//   - CQNotifyErrors: only on a CQ error (overrun, fatal failure).
//
// A CQ error satisfies every arm. If the CQ already holds completions that
// arrived after the last notification and satisfy the arm, the callback
// fires at once. Arming again before the callback fired combines the two
// (NDKPI.md §8: ANY absorbs the others, SOLICITED absorbs ERRORS); it never
// yields two callbacks.
//
// Arm fails with STATUS_INVALID_PARAMETER for an unknown type,
// STATUS_INVALID_DEVICE_REQUEST for a CQ created without a callback, and
// STATUS_INVALID_HANDLE after Close. Allocates nothing when it succeeds.
func (c *CQ) Arm(n CQNotify) error {
	switch n {
	case CQNotifyAny, CQNotifyErrors, CQNotifySolicited:
	default:
		return errorf(StatusInvalidParameter, "arm cq", "unknown notification type %v", n)
	}
	return c.be.arm(n)
}

// Close closes the CQ (NdkCloseCq). While QPs still complete into it, the
// close is pending (NDKPI.md §8: an antecedent closed before its
// successors completes once every successor is closed): Close returns at
// once, the CQ keeps working, and the close completes when the last such
// QP has closed. Otherwise it completes now: it disarms, waits for a
// running notification callback to return, and no callback starts
// afterwards; then it must not be called from the CQ's own callback.
// Closed reports when the close completed. A second Close does nothing.
func (c *CQ) Close() {
	c.mu.Lock()
	c.closed.Store(true)
	pending := c.users > 0
	c.mu.Unlock()
	if !pending {
		c.finishClose()
	}
}

// Closed returns a channel closed when the CQ's close has completed.
func (c *CQ) Closed() <-chan struct{} { return c.done }

// finishClose completes the close: no callback runs or follows once it
// returns.
func (c *CQ) finishClose() {
	c.be.close()
	c.once.Do(func() {
		c.adapter.forgetCQ(c)
		close(c.done)
	})
}
