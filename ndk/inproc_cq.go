package ndk

import (
	"errors"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
)

// inprocCQ is the in-process provider's CQ (backend.go): the completion
// ring the engines push into (ndk/internal/cq).
type inprocCQ struct {
	c    *CQ
	core *cq.CQ
	// prov runs the engines' turns when a poll finds nothing (a no-op
	// unless they poll PollProgress); nil without a provider.
	prov provider
}

// core returns the completion ring of an in-process CQ, nil for a
// daemon-backed one.
func (c *CQ) core() *cq.CQ {
	if b, ok := c.be.(*inprocCQ); ok {
		return b.core
	}
	return nil
}

func (b *inprocCQ) depth() int { return b.core.Cap() }

// progressed runs the engines' turns for a poll that found the CQ empty
// (consumer-driven progress: rc's progress.go) and reports whether a
// completion may have come of it.
func (b *inprocCQ) progressed() bool {
	return b.prov != nil && b.prov.Progress() > 0
}

func (b *inprocCQ) getResults(results []Result) int {
	n := b.popResults(results)
	if n == 0 && b.progressed() {
		n = b.popResults(results)
	}
	return n
}

func (b *inprocCQ) popResults(results []Result) int {
	var e cq.Entry
	n := 0
	for n < len(results) && b.core.Pop(&e) {
		results[n] = Result{
			Status:           e.Status,
			BytesTransferred: e.BytesTransferred,
			QPContext:        e.QPContext,
			RequestContext:   e.RequestContext,
		}
		n++
	}
	return n
}

func (b *inprocCQ) getResultsEx(results []ResultEx) int {
	n := b.popResultsEx(results)
	if n == 0 && b.progressed() {
		n = b.popResultsEx(results)
	}
	return n
}

func (b *inprocCQ) popResultsEx(results []ResultEx) int {
	var e cq.Entry
	n := 0
	for n < len(results) && b.core.Pop(&e) {
		results[n] = ResultEx{
			Result: Result{
				Status:           e.Status,
				BytesTransferred: e.BytesTransferred,
				QPContext:        e.QPContext,
				RequestContext:   e.RequestContext,
			},
			Type:                         e.Type,
			ProviderErrorCode:            e.ProviderErrorCode,
			TypeSpecificCompletionOutput: e.TypeSpecificCompletionOutput,
		}
		if e.HasImmediate {
			results[n].Flags, results[n].Immediate = ResultWithImmediate, e.Immediate
		}
		n++
	}
	return n
}

func (b *inprocCQ) arm(n CQNotify) error {
	if b.prov != nil {
		// The consumer will wait for the notification instead of polling:
		// engines that consumers drove must watch their sockets again.
		b.prov.ConsumerBlocks()
	}
	if !b.core.Arm(n) {
		if b.c.closed.Load() {
			return errorf(StatusInvalidHandle, "arm cq", "cq closed")
		}
		return errorf(StatusInvalidDeviceRequest, "arm cq", "cq was created without a notification callback")
	}
	return nil
}

func (b *inprocCQ) resize(depth int) error {
	if err := b.core.Resize(depth); err != nil {
		s := StatusInsufficientResources
		if errors.Is(err, cq.ErrResizeTooSmall) {
			s = StatusInvalidParameter
		}
		return &Error{Status: s, Op: "resize cq", Err: err}
	}
	return nil
}

func (b *inprocCQ) moderate(interval time.Duration, count uint64) error {
	b.core.Moderate(interval, count)
	return nil
}

// close is idempotent; a concurrent second call also waits.
func (b *inprocCQ) close() { b.core.Close() }
