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
// It is used by the Go benchmarks in this package, by `ndkxdp perf baseline`,
// and by later ndkxdp benchmarks that report their figures as ratios to
// these. Every loop is bounded in time and count, and all traffic stays on the
// veth pair between two test namespaces.
//
// Example:
//
//	p, _ := harness.NewPair(harness.Config{})
//	defer p.Close()
//	r, err := baseline.Run(p, baseline.Options{Duration: time.Second})
//	fmt.Print(r.Table())
package baseline
