// Package cmtest holds test doubles for package cm: a fake clock that runs
// CM timers deterministically, a fake QP that records the transitions the
// CM asks for, and an in-memory link that carries MADs between two
// Managers as real GSI frames, with seeded loss, duplication and delay.
//
// It is not a network or an RC engine: frames never leave the process, and
// the fake QP moves no data.
//
// Example:
//
//	clk := cmtest.NewClock()
//	link := cmtest.NewLink(clk, cmtest.Faults{Drop: 0.2, Seed: 1})
//	a, _ := cm.New(cm.Config{Transport: link.A, Clock: clk, CAGUID: link.A.GUID()})
//	b, _ := cm.New(cm.Config{Transport: link.B, Clock: clk, CAGUID: link.B.GUID()})
//	link.A.Attach(a)
//	link.B.Attach(b)
//	// ... Listen on b, Connect from a with link.A.PathTo(link.B, ...) ...
//	clk.RunUntil(func() bool { return connected }, time.Minute)
package cmtest
