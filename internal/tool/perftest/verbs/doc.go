// Package verbs is the contract between the ndkxdp test tools (rping,
// perf) and the RDMA API they run on: a connected reliable-connection
// endpoint with the few NDK operations they need (NdkRegisterMr, NdkSend,
// NdkReceive, NdkRead, NdkWrite, NdkGetResultsEx, connect and accept with
// rdma_cm parameters), and atomics as an optional extension. Shared
// receive queues (NdkCreateSrq, NdkSrqReceive) are another: a Connector
// or Listener that implements SRQMaker makes SRQs, and an endpoint opened
// with ConnParams.SRQ takes its receives from one (perf --use-srq).
// verbstest's pair has none; the tools refuse the option there.
// AnyWaiter is a third: one goroutine waiting on several endpoints at
// once (perf -q); ndk's endpoints and a verbstest Network's have it.
//
// It is not an RDMA implementation. The ndk package provides the real one
// (the wiring in cmd/ndkxdp adapts ndk.QP, ndk.CQ and ndk.MR to Endpoint);
// verbstest provides an in-memory pair that executes the operations by
// copying bytes between registered regions, so the tools' protocol logic
// runs in unit tests.
//
// Example:
//
//	a, b := verbstest.Pair(verbstest.Options{})
//	buf, _ := a.Alloc(64)
//	r, _ := a.Register(buf, verbs.AccessLocalWrite)
//	seg, _ := r.Seg(0, 16)
//	_ = a.Receive(1, seg)
//	_ = b // b.Send(...) lands in buf; a.Poll reports OpReceive with Bytes
package verbs
