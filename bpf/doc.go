// Package bpf holds the XDP program that steers RoCEv2 frames into AF_XDP
// sockets, compiled from steer.c by bpf2go. The generated steer_bpfel.go and
// steer_bpfel.o are committed, so building ndkxdp needs no C compiler.
//
// What the program does, per frame (SEC("xdp.frags"), so jumbo and
// multi-buffer frames are accepted):
//
//   - Parses Ethernet with at most one 802.1Q or 802.1ad tag, IPv4 (options
//     skipped by IHL; non-first fragments passed) or IPv6 (UDP must be the
//     first next header: RoCEv2 senders use no extension headers), UDP
//     destination port 4791 and the 12-byte BTH. Headers are read from the
//     linear part, or with bpf_xdp_load_bytes when a driver split them across
//     fragments.
//   - Drops a RoCEv2 frame addressed to another host: a destination MAC
//     other than local_cfg's, or a destination IP not in local_addrs
//     (REASON_DROP_WRONG_DST_MAC, REASON_DROP_WRONG_DST_IP), before any
//     other RoCE check. A NIC in promiscuous mode, a bridge or a forged
//     header hands the host such frames; the kernel would not take them,
//     and the engine must not execute them. Until the loader sets
//     local_cfg.check, nothing is checked.
//   - Looks up the BTH DestQP in qp_owner. A RoCEv2 frame for an unknown QP,
//     a truncated BTH or a BTH with TVer != 0 is dropped: handing it to the
//     kernel would only draw an ICMP port unreachable.
//   - Redirects a frame for a known QP to xsks[rx_queue_index], the socket of
//     the queue it arrived on, because the kernel refuses delivery to a socket
//     bound to another queue (net/xdp/xsk.c, xsk_rcv_check). If the owner in
//     qp_owner is another queue the frame is still redirected, and counted as
//     REASON_REDIRECT_FOREIGN_QUEUE: the engine forwards it, and operators see
//     that RSS placed the flow on the wrong queue. No socket on the arrival
//     queue is a counted drop, never a pass.
//   - Everything else passes to the kernel.
//   - Counts every verdict by reason (SteerReason) in the per-CPU array
//     counters.
//
// Maps: xsks (XSKMAP, RX queue index -> AF_XDP socket fd), qp_owner (HASH,
// 24-bit QPN -> owning queue index; QPN 1, the GSI QP used by IB CM, maps to
// the management queue), counters (PERCPU_ARRAY of u64, indexed by
// SteerReason), local_cfg (ARRAY of one SteerLocalCfg: the adapter's MAC
// and the check switch) and local_addrs (HASH, SteerLocalAddr -> u8: the
// adapter's IP addresses, IPv4 as IPv4-mapped IPv6, so one lookup serves
// both families). The global reason_unused exists only to put enum reason into
// BTF so bpf2go generates SteerReason; the program never reads it, so loaders
// can leave its .rodata map out.
//
// What it is not: this package attaches nothing and owns no map contents.
// Package loader loads the program, attaches it, fills the maps, pins them and
// reads the counters; use it rather than this package.
//
// Only the bpfel target is built: every host ndkxdp supports is
// little-endian, and on a big-endian GOARCH this package does not compile.
// The pinned compiler is clang-14 (Debian 12); the object is byte-for-byte
// reproducible from any checkout path. To change steer.c:
//
//	go generate ./bpf   # needs clang-14, llvm-strip, libbpf-dev, linux-libc-dev
//	bpf/regen-check.sh  # what CI runs: regenerate in a temp copy and compare
//
// Example, running the program on one frame without attaching it (as the
// tests do, through BPF_PROG_TEST_RUN):
//
//	spec, _ := bpf.LoadSteer()
//	var objs struct {
//		bpf.SteerPrograms
//		bpf.SteerMaps
//	}
//	if err := spec.LoadAndAssign(&objs, nil); err != nil { ... }
//	verdict, err := objs.Steer.Run(&ebpf.RunOptions{Data: frame})
package bpf
