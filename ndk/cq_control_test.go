package ndk

import (
	"errors"
	"testing"
	"time"
)

// NdkControlCqInterruptModeration's parameter rules (NDKPI.md §3 CQ).
func TestControlInterruptModerationParameters(t *testing.T) {
	c, _ := newNotifyingCQ(t, 64)
	for _, tc := range []struct {
		name     string
		interval time.Duration
		count    uint32
		want     error
	}{
		{"Off", 0, 0, nil},
		{"OffWhateverTheCount", 0, ModerationUnbounded, nil},
		{"CountOnly", ModerationIntervalUnbounded, 8, nil},
		{"IntervalOnly", time.Millisecond, ModerationUnbounded, nil},
		{"IntervalOnlyCountAboveDepth", time.Millisecond, 65, nil},
		{"Both", time.Millisecond, 8, nil},
		{"BothUnbounded", ModerationIntervalUnbounded, ModerationUnbounded, ErrInvalidParameterMix},
		{"UnboundedIntervalCountAboveDepth", ModerationIntervalUnbounded, 65, ErrInvalidParameterMix},
		{"NegativeInterval", -time.Microsecond, 8, ErrInvalidParameter},
		{"IntervalAboveMaxULong", ModerationIntervalUnbounded + time.Microsecond, 8, ErrInvalidParameter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.ControlInterruptModeration(tc.interval, tc.count)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("ControlInterruptModeration(%v, %d) = %v, want %v", tc.interval, tc.count, err, tc.want)
			}
		})
	}
	c.Close()
	if err := c.ControlInterruptModeration(0, 0); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("after Close: %v", err)
	}
}

// Without the adapter flags both calls are STATUS_NOT_SUPPORTED, as NDKPI
// requires of a provider that does not advertise them.
func TestResizeAndModerationNeedTheirAdapterFlags(t *testing.T) {
	a := newTestAdapter(t, func(cfg *adapterConfig) {
		cfg.info.AdapterFlags &^= AdapterFlagCQResizeSupported | AdapterFlagCQInterruptModerationSupported
	})
	c, err := a.CreateCQ(16, func(Status) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(32); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Resize: %v, want STATUS_NOT_SUPPORTED", err)
	}
	if err := c.ControlInterruptModeration(time.Millisecond, 4); !errors.Is(err, ErrNotSupported) {
		t.Errorf("ControlInterruptModeration: %v, want STATUS_NOT_SUPPORTED", err)
	}
}

// NdkResizeCq: the depth changes, queued completions stay, and a depth of
// 0, above MaxCQDepth or below what is queued is STATUS_INVALID_PARAMETER.
func TestResizeCQ(t *testing.T) {
	c, _ := newNotifyingCQ(t, 16)
	for range 12 {
		complete(t, c, plain)
	}
	for _, depth := range []int{0, -1, int(providerInfo().MaxCQDepth) + 1, 11} {
		if err := c.Resize(depth); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("Resize(%d) = %v, want STATUS_INVALID_PARAMETER", depth, err)
		}
	}
	if err := c.Resize(4096); err != nil || c.Depth() != 4096 {
		t.Fatalf("Resize(4096) = %v, depth %d", err, c.Depth())
	}
	if n := drain(c); n != 12 {
		t.Fatalf("%d completions after the resize, want 12", n)
	}
	c.Close()
	if err := c.Resize(16); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("after Close: %v", err)
	}
}

// Count moderation through the public API: eight completions make one
// callback, the eighth.
func TestControlInterruptModerationCoalesces(t *testing.T) {
	c, calls := newNotifyingCQ(t, 64)
	if err := c.ControlInterruptModeration(ModerationIntervalUnbounded, 8); err != nil {
		t.Fatal(err)
	}
	mustArm(t, c, CQNotifyAny)
	for range 7 {
		complete(t, c, plain)
	}
	calls.expectNone(t)
	complete(t, c, plain)
	calls.expect(t, StatusSuccess)
	if n := drain(c); n != 8 {
		t.Fatalf("callback found %d completions, want 8", n)
	}
}
