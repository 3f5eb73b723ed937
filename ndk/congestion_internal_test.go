package ndk

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// TestCongestionOptionsReachTheEngine: every DCQCN setting an adapter is
// opened with lands in the engine's configuration under its hardware
// name, and zero fields stay zero for the engine's defaults.
func TestCongestionOptionsReachTheEngine(t *testing.T) {
	o := CongestionOptions{Mode: CongestionOn, CNPInterval: 20 * time.Microsecond, LineRateMbps: 300, MinRateMbps: 2,
		AIRateMbps: 0.5, HAIRateMbps: 5, IncreaseTimer: 3 * time.Millisecond, ByteCounter: 1 << 20, AlphaTimer: 550 * time.Microsecond}
	want := rc.CCConfig{Mode: rc.CCOn, CNPInterval: 20 * time.Microsecond, LineRate: 300, RPGMinRate: 2,
		RPGAIRate: 0.5, RPGHAIRate: 5, RPGTimeReset: 3 * time.Millisecond, RPGByteReset: 1 << 20, DCETCPRTT: 550 * time.Microsecond}
	if got := o.rc(); got != want {
		t.Fatalf("engine configuration %+v, want %+v", got, want)
	}
	if got := (CongestionOptions{}).rc(); got != (rc.CCConfig{}) {
		t.Fatalf("zero options gave %+v, want the zero configuration", got)
	}
}
