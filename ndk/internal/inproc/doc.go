// Package inproc is ndkxdp's in-process provider: the datapath an
// ndk.Adapter runs on when the engines live in the consumer's own process.
// Open assembles it for a network interface (the steering program from
// package loader, one UMEM and one AF_XDP socket per queue from afxdp, a
// port and an rc engine per socket) and connection management on the
// first queue; OverPort runs one engine over any port.Port, which is how
// package ndk's tests run without privileges.
//
// Package ndk owns the NDK object model (CQs, PDs, MRs and their tokens,
// QPs, connectors) and asks a provider only for what its unexported
// provider interface lists: the wire's address, MAC and path MTU, QP
// creation and closing on the engines, engine counters, neighbour and
// route resolution, the IB CM and its handle on a QP, and Close. A second
// provider, a client of an ndkxdp daemon, is to satisfy the same
// interface.
//
// What is where:
//
//	provider.go  Provider, Config, Link; OverPort; QP numbers and their
//	             engines (CreateQP, CloseQP, the forwarding owners); Close
//	open.go      Open: interface, address, steering program, UMEM, sockets
//	mad.go       the MAD goroutine: QP1 datagrams from the management
//	             queue's engine to the CM through a bounded queue, and the
//	             CM's MADs out (SendMAD, the MADFaults test hook)
//	route.go     the adapter's network namespace, its addresses, route and
//	             next-hop resolution for the CM (ResolvePath) and neighbour
//	             resolution for QPs connected out of band
//	cmqp.go      the CM's handle on an RC QP (cm.QP): RTR, RTS, error, and
//	             the wait for the engine's drain signal (rc.QP.Drained)
//	madrate.go   each source's share of the CM: MADs beyond 100,000 a
//	             second (REQs beyond 10,000) from one address are
//	             dropped before the queue
//	loss.go      Config.InjectLoss: a port that drops a share of what it
//	             receives, for soak runs and fault tests
//
// It is not the engine (rc), the CM's state machines (cm) or the public
// API (ndk), and it holds no NDK object.
//
// Example (package ndk's Open, in outline):
//
//	p, err := inproc.Open("eth1", inproc.Config{Regions: regions, Queues: 2, CM: cm.DefaultParams()})
//	if errors.Is(err, inproc.ErrAddress) { ... } // STATUS_INVALID_ADDRESS
//	q, queue, err := p.CreateQP(rc.QPConfig{PD: 1, RecvCQ: rcq, SendCQ: scq, RecvDepth: 64, SendDepth: 64})
//	...
//	p.Close()
package inproc
