// Package rawxdp is a raw AF_XDP endpoint on one host of a veth pair
// (internal/vethpair): the steering program attached to the host's veth,
// one UMEM, one socket on one queue, and frames moved with no protocol at
// all. End-to-end tests (test/e2e) use it to check the foundation (program,
// loader, rings) without the RDMA engine, and the baseline
// (internal/tool/baseline, `ndkxdp perf baseline`) uses it as the ceiling
// that ndkxdp is measured against.
//
// An Endpoint is driven by one goroutine at a time, like the rings it owns.
//
// Example:
//
//	e, err := rawxdp.Open(p.A, rawxdp.Config{Attach: loader.AttachAuto})
//	if err != nil { ... }
//	defer e.Close()
//	err = e.Send(frame)
//	data, descs, err := e.Receive(time.Second)
package rawxdp
