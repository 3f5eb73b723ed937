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

func (b *inprocCQ) getResults(results []Result) int {
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
