package inproc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// pipeQP is a QP on a provider over one end of an in-memory pipe, and its
// CM handle.
func pipeQP(t *testing.T) (*rc.QP, *cmQP) {
	t.Helper()
	pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 64})
	if err != nil {
		t.Fatal(err)
	}
	regions, err := memreg.New(16)
	if err != nil {
		t.Fatal(err)
	}
	p, err := OverPort(pipe.A(), Link{Addr: ipA, MAC: rocev2.MAC{2, 0, 0, 0, 0, 1}, MTU: 1500, PathMTU: rocev2.MTU1024}, Config{Regions: regions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := cq.New(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := p.CreateQP(rc.QPConfig{RecvCQ: c, SendCQ: c, RecvDepth: 4, SendDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	return q, p.ConnectionQP(q, 0).(*cmQP)
}

// drainedCall calls x.Drained and returns a channel that receives when
// its callback ran.
func drainedCall(x cm.QP) <-chan time.Time {
	ch := make(chan time.Time, 1)
	x.Drained(func() { ch <- time.Now() })
	return ch
}

// TestDrainedWaitsForTheEngine: Drained's callback runs once the engine
// drained the QP after ToError, not before, and not only at the deadline.
func TestDrainedWaitsForTheEngine(t *testing.T) {
	q, x := pipeQP(t)
	done := drainedCall(x)
	select {
	case <-done:
		t.Fatal("Drained's callback ran before ToError")
	case <-time.After(50 * time.Millisecond):
	}
	x.ToError()
	select {
	case <-done:
	case <-time.After(x.drainTimeout / 2):
		t.Fatalf("Drained's callback did not run within %v of ToError", x.drainTimeout/2)
	}
	if s := q.State(); s != rc.StateError {
		t.Fatalf("QP state %v when Drained's callback ran", s)
	}
}

// TestDrainedRespectsItsDeadline: a QP that never drains still gets its
// callback, at the deadline.
func TestDrainedRespectsItsDeadline(t *testing.T) {
	_, x := pipeQP(t)
	x.drainTimeout = 100 * time.Millisecond
	start := time.Now()
	done := drainedCall(x)
	select {
	case at := <-done:
		if d := at.Sub(start); d < x.drainTimeout {
			t.Fatalf("callback after %v, before the %v deadline, on a QP that did not drain", d, x.drainTimeout)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drained's callback did not run at its deadline")
	}
}

func TestWaitDrained(t *testing.T) {
	ch := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := waitDrained(ctx, ch); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on an open channel: %v, want the deadline", err)
	}
	close(ch)
	if err := waitDrained(context.Background(), ch); err != nil {
		t.Fatalf("wait on a closed channel: %v", err)
	}
}

// TestConnectionTraffic: a passive connection takes the DSCP and ECN its
// REQ asks for and keeps the adapter's VLAN priority; a REQ asking for 0,
// or for the adapter's own, leaves the default; CE, which no sender sets,
// is taken as ECT(0).
func TestConnectionTraffic(t *testing.T) {
	def := rc.TrafficClass{DSCP: 10, ECN: rocev2.ECT1, VLAN: true, VLANID: 7, PCP: 3}
	for _, tc := range []struct {
		tos  uint8
		want *rc.TrafficClass
	}{
		{0, nil},
		{rocev2.TOS(10, rocev2.ECT1), nil},
		{rocev2.TOS(26, rocev2.ECT0), &rc.TrafficClass{DSCP: 26, ECN: rocev2.ECT0, VLAN: true, VLANID: 7, PCP: 3}},
		{rocev2.TOS(46, rocev2.NotECT), &rc.TrafficClass{DSCP: 46, ECN: rocev2.NotECT, VLAN: true, VLANID: 7, PCP: 3}},
		{rocev2.TOS(0, rocev2.CE), &rc.TrafficClass{DSCP: 0, ECN: rocev2.ECT0, VLAN: true, VLANID: 7, PCP: 3}},
	} {
		got := connectionTraffic(def, tc.tos)
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("REQ TOS %#x: %+v, want %+v", tc.tos, got, tc.want)
		}
		if got != nil {
			if err := got.Validate(); err != nil {
				t.Errorf("REQ TOS %#x: %v", tc.tos, err)
			}
		}
	}
}
