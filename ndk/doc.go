// Package ndk is ndkxdp's public RDMA API, shaped after Microsoft's NDKPI
// (the Windows kernel RDMA provider interface): the same objects, flag
// values, status codes and rules, expressed as Go methods. NDKPI.md is the
// reference; SEEDS.md maps each rule of the seed pages to its test.
//
// What is here (the object model, without the transport):
//   - Status (NTSTATUS) and errors that carry it: errors.Is(err,
//     ndk.ErrInvalidParameter), ndk.StatusOf(err);
//   - the NDK flag and enum types with their numeric values (OpFlag, MRFlag,
//     CQNotify, AdapterFlag, OperationType, RdmaTechnology, ObjectType,
//     Version);
//   - AdapterInfo with ndkxdp's limits, which every create checks;
//   - Adapter, CQ (GetResults, GetResultsEx, Arm with the NDKPI notification
//     rules), PD, MR (RegisterMr, tokens, Deregister) and SGE.
//
// What comes with the transport engine (ndk/internal): Open(ifname, opts),
// which starts the AF_XDP engines and returns an Adapter; QP, SRQ, MW,
// Connector, Listener and SharedEndpoint; posting (Send, SendAndInvalidate,
// Receive, Read, Write, Bind, FastRegister, Invalidate, Flush); IB CM
// connection setup. The engine completes into a CQ through its internal
// core (ndk/internal/cq) and checks tokens through the adapter's table
// (ndk/internal/memreg), both lock-free and allocation-free.
//
// What it is not: a binding to Windows, or a verbs (libibverbs) API.
// Blocking NDKPI calls that return STATUS_PENDING and complete through a
// callback are synchronous Go calls here, except where NDKPI's semantics
// need the pending state (a PD closed before its MRs: PD.Closed).
//
// Notification callbacks run on a goroutine belonging to the CQ, never on
// an engine goroutine; they are serialized per CQ and may call GetResults,
// GetResultsEx and Arm. Closing the CQ or its adapter waits for a running
// callback, so neither may be called from inside one.
//
// Example:
//
//	a, _ := ndk.Open("eth1", nil) // with the transport
//	defer a.Close()
//	var cq *ndk.CQ
//	cq, _ = a.CreateCq(1024, func(s ndk.Status) {
//		if s != ndk.StatusSuccess {
//			log.Printf("cq error: %v", s) // overrun or fatal: tear down
//			return
//		}
//		var rs [32]ndk.ResultEx
//		for n := cq.GetResultsEx(rs[:]); n > 0; n = cq.GetResultsEx(rs[:]) {
//			handle(rs[:n])
//		}
//		cq.Arm(ndk.CQNotifyAny)
//	})
//	cq.Arm(ndk.CQNotifyAny)
//	pd, _ := a.CreatePd()
//	buf := make([]byte, 1<<20)
//	mr, err := pd.RegisterMr(buf, ndk.MRFlagAllowRemoteWrite)
//	if errors.Is(err, ndk.ErrInvalidParameter) { ... }
//	sge, _ := mr.SGE(0, 4096)
//	_ = sge // qp.Send(ctx, []ndk.SGE{sge}, 0) with the transport
package ndk
