// Package ndkverbs runs the ndkxdp test tools' protocol logic (rping,
// perftest) on ndk: it adapts an ndk QP, its completion queue and its
// memory registrations to the verbs.Endpoint contract of
// internal/tool/perftest/verbs, with the atomic extension as verbs.Atomics.
//
// What the adapter maps:
//
//   - Alloc: ndk.Adapter.Memory, so that the tools run on an adapter from
//     ndk.Dial (Dial here), which registers only memory the daemon maps.
//   - Register: ndk.PD.RegisterMR with the verbs access bits, which are
//     NDK_MR_FLAG values; AccessRemoteAtomic becomes
//     ndk.MRFlagAllowRemoteAtomic. The region's address is the buffer's
//     real address, its keys the MR's local and remote tokens.
//   - Send, Receive, Read, Write: the QP calls with one SGE; an unsignaled
//     request is NDK_OP_FLAG_SILENT_SUCCESS. FetchAdd and CompareSwap are
//     ndk's QP.FetchAndAdd and QP.CompareAndSwap.
//   - Poll: CQ.GetResultsEx on the initiator CQ, then on the receive CQ,
//     whose completions wait while a signaled SEND is unacknowledged (the
//     order perftest and rping expect; see Endpoint.Poll).
//     STATUS_CANCELLED is verbs.ErrFlushed, an IB_WC_REM_ACCESS_ERR
//     completion verbs.ErrAccess, IB_WC_RETRY_EXC_ERR
//     verbs.ErrRetryExceeded, STATUS_BUFFER_OVERFLOW verbs.ErrTooLong.
//     Once the peer disconnected and the CQs are empty it returns
//     verbs.ErrDisconnected. Poll allocates nothing; neither do posts
//     whose ID is below 256 (Go boxes those without allocating).
//   - Peek: ndk's QP.PeerWrites (an acquire on the engine's placements),
//     then the byte.
//   - WriteImm (verbs.Immediate) is QP.WriteWithImmediate; the receive it
//     completes reports OpRecvRDMAWithImm with the WRITE's length and the
//     immediate (ResultEx.Immediate). An empty segment posts a receive
//     or a WRITE with no SGE, as rsockets' messages are.
//   - PeerPrivateData (verbs.PeerData) is NdkGetConnectionData's private
//     data of the peer's REQ (read before Prepare runs) or REP.
//   - SRQs (verbs.SRQMaker on Connector and Listener): Device.CreateSRQ
//     is ndk.PD.CreateSRQ with one SGE per receive and no limit
//     notification; an endpoint opened with verbs.ConnParams.SRQ has its
//     QP made on it (QPConfig.SRQ), and its receive completions come from
//     its own receive CQ as before. ndk has SRQs in process only, so
//     through a daemon CreateSRQ fails.
//   - Wait arms both CQs (NdkArmCq) and the QP's peer-write count onto
//     the endpoint's token channel; WaitAny (verbs.AnyWaiter) points the
//     notifications of several endpoints of the Device at the caller's
//     channel and arms them all, so that perf -q sleeps on all its QPs.
//     An endpoint whose notifications move to another channel reports
//     news once (a notification fires once, and may have gone to the
//     other channel unseen).
//
// It is not connection management: Device.Endpoint gives a QP that the
// caller connects (ConnectOOB, or IB CM through ndk's Connector and
// Listener), then hands back with Endpoint.Connected.
//
// Example:
//
//	dev, _ := ndkverbs.New(adapter)
//	ep, _ := dev.Endpoint(ndkverbs.Depths{})
//	_ = ep.QP().ConnectOOB(peer, ndk.ConnectOptions{})
//	ep.Connected(nil) // no disconnect hook
//	buf, _ := ep.Alloc(4096)
//	r, _ := ep.Register(buf, verbs.AccessLocalWrite)
//	seg, _ := r.Seg(0, 64)
//	_ = ep.Receive(1, seg)
package ndkverbs
