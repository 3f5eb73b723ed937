// Package baseline measures what ndkxdp is compared against, on the same veth
// pair and in the same run: raw AF_XDP (the ceiling: what the engine could do
// if RDMA cost nothing), Go UDP sockets and Go TCP with TCP_NODELAY (the
// competition a Go service would otherwise use).
//
// Each measurement gives a message rate (messages per second at the
// receiver) and a ping-pong round trip (p50 and p99). Sizes are Ethernet frame
// sizes without the FCS, so a 64-byte UDP frame carries 22 bytes of payload
// and a TCP "frame" of the same size is a 22-byte message on a stream.
//
// It is what `ndkxdp perf baseline` runs, and it serves the Go benchmarks in
// this package and the ndkxdp benchmarks (test/rdma) that report their
// figures as ratios to these. The demo and the benchmarks also summarize
// their round trips with its Latency. Every loop is bounded in time and
// count, and all traffic stays on the veth pair (internal/vethpair) between
// two namespaces.
//
// Example:
//
//	p, _ := vethpair.NewPair(vethpair.Config{})
//	defer p.Close()
//	r, err := baseline.Run(p, baseline.Options{Duration: time.Second})
//	fmt.Print(r.Table())
package baseline
