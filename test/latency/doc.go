// Package latency holds the latency-tail tests and benchmarks of ndkxdp
// between two processes: `ndkxdp perf *_lat` in two network namespaces
// joined by a veth pair, the way users measure, against kernel TCP's
// ping-pong between the same two namespaces (`ndkxdp perf tcp_lat`).
//
// The tests show correctness under contention: every latency test ends,
// with a busy process pinned to the cores beside it, and a side whose
// peer leaves ends at once instead of waiting out -timeout. The
// benchmarks report ratios measured in one run (p99/p50, and p99 against
// TCP's p99), idle and with one spinning process, and beside each idle
// test the floor (floor_test.go): a ping-pong of the same median between
// two processes that runs no network code, whose p99/p50 is what the
// machine alone allows. They time nothing against fixed limits, since
// this machine is shared:
//
//	go test -run x -bench . -benchtime 1x ./test/latency/
//
// The tests build cmd/ndkxdp with the go command and need root (they
// are skipped without, and fail under NDKXDP_STRICT=1).
package latency
