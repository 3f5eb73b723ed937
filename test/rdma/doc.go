// Package rdma holds ndkxdp's end-to-end RDMA tests and benchmarks: two
// hosts, each a network namespace running ndkxdp (ndk.Open on its end of a
// veth pair), exchanging RoCEv2 over the pair.
//
// What it covers: every operation and flag of the QP API, message sizes
// from 0 B to 16 MiB around the path-MTU boundaries at 1024 and 4096, 64
// QPs at once, remote access violations, and one named test per rule of
// the seed pages (ndk/SEEDS.md maps them). BenchmarkRDMAvsBaseline puts
// ndkxdp's message rate, ping-pong and WRITE bandwidth beside raw AF_XDP,
// Go UDP and Go TCP from test/baseline, in one run on the same pair.
//
// What it is not: unit tests (ndk/internal/rc runs the engine over an
// in-memory pipe) or interoperability with Linux rxe (test/interop).
//
// # Measured
//
// `go test ./test/rdma -run XXX -bench RDMAvsBaseline -benchtime 1x`, three
// runs on the project's 2-core Debian 12 VM (kernel 6.18, veth MTU 9000,
// adaptive polling, other work sharing the machine), gave:
//
//	                          ndkxdp          reference          ratio      target
//	64 B SEND msg/s           432k-575k       AF_XDP 371k-400k   1.08-1.55  >= 0.50
//	                                          Go UDP 158k-185k   2.74-3.11  > 1
//	SEND ping-pong p50        8.1-10.5 us     AF_XDP 9.6-12.9 us 0.73-0.93  <= 2
//	                                          Go TCP 13.6-16.6us 0.50-0.77  < 1
//	64 KiB WRITE              7.0-8.6 Gbit/s  Go TCP 17.6-19.8   0.35-0.49  >= 0.70
//
// The WRITE target is not met. Copy-mode AF_XDP on veth moves every 4 KiB
// frame through the sender's kick syscall (veth transmit, the peer's XDP
// redirect and its copy into the peer's UMEM all run there: about half of
// the CPU time in a profile), plus an ICRC pass and a copy into the TX
// frame on each side, while Go TCP moves 64 KiB GSO segments. Zero-copy
// transmit from UMEM buffers (ndk.AllocBuffer; the port still copies) and
// a port API to build frames in place would remove one pass per side.
// Before the engines yielded on every idle loop, the ping-pong took 20 us.
//
// The tests need root (namespaces, XDP); without it they skip, and with
// NDKXDP_STRICT=1 they fail. Example:
//
//	go test ./test/rdma -run TestSizes -v
//	go test ./test/rdma -run XXX -bench RDMAvsBaseline -benchtime 1x
package rdma
