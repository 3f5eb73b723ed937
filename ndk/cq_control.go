package ndk

import (
	"math"
	"time"
)

// ModerationUnbounded is NDKPI's MAXULONG for ControlInterruptModeration:
// as the count it hands control to the interval, and as the interval
// (ModerationUnbounded microseconds, ModerationIntervalUnbounded) to the
// count.
const ModerationUnbounded = math.MaxUint32

// ModerationIntervalUnbounded is the interval that hands control to the
// count: NDKPI's MAXULONG microseconds.
const ModerationIntervalUnbounded = ModerationUnbounded * time.Microsecond

// Resize changes how many completions the CQ holds (NdkResizeCq; rounded
// up to a power of two, as CreateCQ does). Queued completions, the arm and
// the moderation carry over. The adapter sets AdapterFlagCQResizeSupported.
// It fails with STATUS_INVALID_PARAMETER for a depth of 0, above
// MaxCQDepth, or below the number of completions queued (the entries would
// not fit; verbs' ib_resize_cq refuses it the same way), and
// STATUS_INVALID_HANDLE after Close, STATUS_NOT_SUPPORTED on an adapter
// without the flag. It completes inline; it never pends.
// Producers wait while the entries move, so call it outside the data
// path's busiest moments.
func (c *CQ) Resize(depth int) error {
	const op = "resize cq"
	if c.closed.Load() {
		return errorf(StatusInvalidHandle, op, "cq closed")
	}
	info := &c.adapter.info
	if info.AdapterFlags&AdapterFlagCQResizeSupported == 0 {
		return errorf(StatusNotSupported, op, "the adapter does not set CQ_RESIZE_SUPPORTED")
	}
	if depth < 1 || depth > int(info.MaxCQDepth) {
		return errorf(StatusInvalidParameter, op, "depth %d out of range [1, MaxCQDepth %d]", depth, info.MaxCQDepth)
	}
	return c.be.resize(depth)
}

// ControlInterruptModeration coalesces the CQ's notifications
// (NdkControlCqInterruptModeration): a fired Arm calls back once count
// completions have arrived since the last callback, or interval after it
// fired, whichever comes first. The adapter sets
// AdapterFlagCQInterruptModerationSupported.
//
// As NDKPI defines the values:
//   - interval 0 turns moderation off (the default): a fired Arm calls
//     back at once;
//   - interval ModerationIntervalUnbounded hands control to count alone;
//   - count ModerationUnbounded, or above the CQ's depth, hands control to
//     interval alone, and so does count 0; count 1 calls back at every
//     fired Arm, as without moderation;
//   - both unbounded is STATUS_INVALID_PARAMETER_MIX.
//
// interval has microsecond resolution (rounded up) and must lie in [0,
// ModerationIntervalUnbounded], else STATUS_INVALID_PARAMETER. A CQ error
// is never held back. It fails with STATUS_INVALID_HANDLE after Close and
// STATUS_NOT_SUPPORTED on an adapter without the flag; it never pends.
func (c *CQ) ControlInterruptModeration(interval time.Duration, count uint32) error {
	const op = "control cq interrupt moderation"
	if c.closed.Load() {
		return errorf(StatusInvalidHandle, op, "cq closed")
	}
	if c.adapter.info.AdapterFlags&AdapterFlagCQInterruptModerationSupported == 0 {
		return errorf(StatusNotSupported, op, "the adapter does not set CQ_INTERRUPT_MODERATION_SUPPORTED")
	}
	if interval < 0 || interval > ModerationIntervalUnbounded {
		return errorf(StatusInvalidParameter, op, "interval %v outside [0, %v]", interval, ModerationIntervalUnbounded)
	}
	us := (interval + time.Microsecond - 1) / time.Microsecond
	countOff := count == ModerationUnbounded || int(count) > c.Depth()
	timeOff := us == ModerationUnbounded
	// The effective moderation: 0 turns each bound off.
	var ivl time.Duration
	var cnt uint64
	switch {
	case us == 0:
	case timeOff && countOff:
		return errorf(StatusInvalidParameterMix, op, "interval and count both unbounded: nothing would release a notification")
	case timeOff:
		cnt = uint64(count)
	case countOff:
		ivl = us * time.Microsecond
	default:
		ivl, cnt = us*time.Microsecond, uint64(count)
	}
	return c.be.moderate(ivl, cnt)
}
