// Package vethpair builds throw-away two-host networks: two network
// namespaces joined by a veth pair, the way two hosts would be joined by a
// cable. `ndkxdp demo` and `ndkxdp perf baseline` run on one; tests get
// theirs through test/harness, which ties a pair's lifetime to the test.
//
// Every network it builds lives only inside namespaces it creates. Addresses
// come from the benchmarking ranges (198.18.0.0/15 for IPv4, 2001:2::/48 for
// IPv6), no namespace has a default route, and nothing is bridged or routed to
// a real interface. Close deletes the namespaces and, with them, the veth
// pair. Namespaces left behind by a killed run carry the dead process's PID
// in their name and are removed by the next NewPair.
//
// It is not a network emulator: there is no loss or delay injection here.
//
// Example:
//
//	p, err := vethpair.NewPair(vethpair.Config{MTU: 9000, Queues: 2})
//	if err != nil { ... }
//	defer p.Close()
//	err = p.A.Do(func() error {
//		// runs inside namespace A on a locked OS thread; sockets created
//		// here stay in A and may be used from any goroutine afterwards.
//		return nil
//	})
package vethpair
