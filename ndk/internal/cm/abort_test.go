package cm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// A QP that fails on its own aborts its connection (seed 004): the
// failing side's QP is moved to error, a DREQ tells the peer, each
// consumer's disconnect event fires once, and a second report changes
// nothing. Disconnect afterwards completes once the peer answered.
func TestTransportFailedAbortsConnection(t *testing.T) {
	p := newPair(t, cmtest.Faults{}, cm.Params{})
	ls := listen(t, p.b, netip.AddrPortFrom(ipB, 4791))
	c := p.connect(t, ls, 0x100, netip.AddrPortFrom(ipB, 4791))

	p.b.TransportFailed(c.qpB.N, 9) // the receiver NAKed an invalid request
	if !p.clk.RunUntil(func() bool { return c.eventA.get() == 1 && c.eventB.get() == 1 }, time.Minute) {
		t.Fatalf("disconnect events: active %d, passive %d; want 1 each", c.eventA.get(), c.eventB.get())
	}
	if c.qpB.ErrorCount() == 0 {
		t.Fatal("the failing side's QP was not moved to error")
	}
	if n := p.b.Stats().Sent[rocev2.AttrDREQ]; n == 0 {
		t.Fatal("no DREQ: the CM connection was not torn down")
	}
	p.b.TransportFailed(c.qpB.N, 12)
	p.a.TransportFailed(c.qpA.N, 12)  // the sender's QP failed too, after the peer's DREQ
	p.b.TransportFailed(0xABCDEF, 12) // no connection: ignored
	p.clk.Advance(time.Second)
	if c.eventA.get() != 1 || c.eventB.get() != 1 {
		t.Fatalf("events after repeated reports: %d, %d; want 1, 1", c.eventA.get(), c.eventB.get())
	}
	var disc result
	if err := c.passive.Disconnect(disc.done); err != nil {
		t.Fatalf("disconnect after the abort: %v", err)
	}
	if !p.clk.RunUntil(disc.called, time.Minute) {
		t.Fatal("disconnect after the abort did not complete")
	}
	if _, err := disc.get(); err != nil {
		t.Fatalf("disconnect after the abort: %v", err)
	}
}
