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
// The tests need root (namespaces, XDP); without it they skip, and with
// NDKXDP_STRICT=1 they fail. Example:
//
//	go test ./test/rdma -run TestSizes -v
//	go test ./test/rdma -run XXX -bench RDMAvsBaseline -benchtime 1x
package rdma
