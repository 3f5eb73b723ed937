package rc

import (
	"testing"
	"time"
)

// TestAdaptSpin: the idle spin doubles after a sleep that work ended
// within spinMax, up to spinMax; halves after a longer sleep, down to
// SpinTime; stays when the engine did not sleep. A SpinTime above
// spinMax is never shortened.
func TestAdaptSpin(t *testing.T) {
	us := func(n int64) int64 { return n * int64(time.Microsecond) }
	e := &Engine{spin: us(20), spinMin: us(20)}
	for _, step := range []struct {
		slept, want int64
	}{
		{us(30), us(40)},    // the answer came 30µs into the sleep
		{us(30), us(80)},    //
		{-1, us(80)},        // no sleep: the deadline had passed
		{us(150), us(160)},  //
		{us(10), us(200)},   // capped at spinMax
		{us(10), us(200)},   //
		{us(5000), us(100)}, // idle: back towards SpinTime
		{us(5000), us(50)},  //
		{us(5000), us(25)},  //
		{us(5000), us(20)},  // never below SpinTime
		{us(5000), us(20)},  //
	} {
		e.adaptSpin(step.slept)
		if e.spin != step.want {
			t.Fatalf("after a sleep of %v: spin %v, want %v", time.Duration(step.slept), time.Duration(e.spin), time.Duration(step.want))
		}
	}
	long := &Engine{spin: us(1000), spinMin: us(1000)}
	for _, slept := range []int64{us(10), us(5000), -1} {
		long.adaptSpin(slept)
		if long.spin != us(1000) {
			t.Fatalf("SpinTime 1ms, after a sleep of %v: spin %v", time.Duration(slept), time.Duration(long.spin))
		}
	}
}
