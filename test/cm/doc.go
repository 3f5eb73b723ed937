// Package cm tests ndkxdp's connection management end to end: two ndkxdp
// adapters on the two ends of a veth pair (test/harness), connecting
// through the InfiniBand CM on QP1 with the public ndk API (Listener,
// Connector, SharedEndpoint), over IPv4 and IPv6.
//
// It covers what NDKPI asks of connectors and listeners (NDKPI.md §3, §8):
// connect, accept, data, disconnect from either side, rejection with
// private data, refusal, unreachable destinations, a listener closed while
// its connections live, port 0, shared endpoints; CM datagrams dropped,
// duplicated and delayed (testhooks.SetMADFaults); the MADs the adapter
// puts on the wire against those Linux sent in the public rdma_cm
// captures; and 1,000 connections opened, used and closed with goroutines
// and heap back where they started.
//
// Each test runs in both modes of ndkxdp, as subtests: inproc (ndk.Open in
// the test process) and daemon (each host's adapter served by ndk/daemon,
// the test's connectors, listeners and QPs on a client of it from
// ndk.Dial; internal/ndkhost). MAD faults are set on the adapter that
// sends the MADs (ndkhost.Host.Served).
//
// It is not a test of the CM state machines in isolation (those run on a
// fake clock in ndk/internal/cm) or of interoperation with Linux rxe
// (test/interop). The tests need root; without it they skip, and fail
// under NDKXDP_STRICT=1.
//
// Example:
//
//	go test -count=1 ./test/cm
//	NDKXDP_STRICT=1 go test -count=1 -run TestThousandConnections -v ./test/cm
package cm
