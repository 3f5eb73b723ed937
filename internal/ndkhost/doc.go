// Package ndkhost opens ndkxdp on one host of a veth pair
// (internal/vethpair): the adapter, opened inside the host's namespace on
// its veth end, one protection domain, and a receive and an initiator
// completion queue. `ndkxdp demo` runs on two of them; test/cm and
// test/rdma wrap Open in their own openHost, which fails the test on an
// error and closes the host when the test ends.
//
// A host is served in either of the two modes of ndkxdp: in process
// (ndk.Open), or, with Config.Daemon, by a daemon (ndk/daemon) in the test
// process on a socket in a temporary directory, whose client (ndk.Dial)
// is Host.Adapter. The end-to-end suites run each test in both modes.
//
// It is not a fixture for QPs, memory or connections: each user creates
// those on the PD and CQs it is given, as its own checks require.
//
// Example:
//
//	p, err := vethpair.NewPair(vethpair.Config{})
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//	a, err := ndkhost.Open(p.A, ndkhost.Config{})
//	if err != nil {
//		return err
//	}
//	defer a.Close()
//	qp, err := a.PD.CreateQP(ndk.QPConfig{ReceiveCQ: a.RCQ, InitiatorCQ: a.ICQ,
//		ReceiveQueueDepth: 64, InitiatorQueueDepth: 64,
//		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
package ndkhost
