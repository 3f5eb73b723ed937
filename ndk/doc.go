// Package ndk is ndkxdp's public RDMA API, shaped after Microsoft's NDKPI
// (the Windows kernel RDMA provider interface): the same objects, flag
// values, status codes and rules, expressed as Go methods. The reference
// is docs/NDKPI.md in the repository (cited below as NDKPI.md, with its
// sections), the design docs/DESIGN.md; SEEDS.md in this directory maps
// each rule of the NDKPI documentation pages to its test.
//
// What is here:
//   - Status (NTSTATUS) and errors that carry it: errors.Is(err,
//     ndk.ErrInvalidParameter), ndk.StatusOf(err); these, OpFlag, CQNotify
//     and OperationType are defined in ndk/internal/ndkpi, which the engine
//     shares, and re-exported here;
//   - the NDK flag and enum types with their numeric values (OpFlag, MRFlag,
//     CQNotify, AdapterFlag, OperationType, RDMATechnology, ObjectType,
//     Version);
//   - AdapterInfo with ndkxdp's limits, which every create checks;
//   - Open(ifname, Options): the steering program, AF_XDP sockets on one
//     UMEM and one RC engine per queue (ndk/internal/rc), returning an
//     Adapter; Adapter.AllocBuffer for UMEM-resident buffers;
//     Options.Capture records every frame as a pcap stream;
//   - Adapter, CQ (GetResults, GetResultsEx, Arm with the NDKPI notification
//     rules, Resize, ControlInterruptModeration), PD, MR (RegisterMR, or
//     CreateMR and Register;
//     RegisterInvalidatableMR; tokens, Deregister) and SGE;
//   - fast registration (fastreg.go): PD.CreateMR(true),
//     MR.InitializeFastRegister, QP.FastRegister (the buffer itself in place
//     of NDK's page array) and QP.Invalidate, on fast MRs and windows;
//   - memory windows (mw.go): PD.CreateMW, QP.Bind, MW.RemoteToken,
//     MW.Close;
//   - shared receive queues (srq.go): PD.CreateSRQ with its notification
//     callback, SRQ.Receive, SRQ.Modify, SRQ.Close, and QPs created on one
//     (QPConfig.SRQ). SRQs, windows and fast registration work through
//     the daemon too (daemon_mem.go); there a FastRegister's memory must
//     come from Adapter.Memory or AllocBuffer, as a RegisterMR's;
//   - NdkGetPrivilegedMemoryRegionToken, NdkBuildLAM and NdkReleaseLAM
//     answer STATUS_NOT_SUPPORTED: a Go engine has no adapter logical
//     addresses (lam.go says why);
//   - QP (PD.CreateQP): Send, SendAndInvalidate, Write, Read, Receive,
//     Bind, FastRegister, Invalidate, Flush, Close, with the NDK_OP_FLAG
//     semantics of the seed pages;
//   - the atomic extension (atomic.go; NDKPI has no atomic verb):
//     QP.CompareAndSwap and QP.FetchAndAdd, MRFlagAllowRemoteAtomic, and
//     completion Types OpCompareAndSwap and OpFetchAndAdd, the IB atomics
//     a verbs peer's ib_atomic_bw uses;
//   - the UD extension (ud.go; NDKPI has only connected QPs):
//     PD.CreateUDQP, QP.SendTo and SendToWithImmediate to a
//     UDDestination, receives with the GRH ahead of the payload (UDSource,
//     Adapter.UDReplyTo), rdma_cm's UD service resolution (SIDR) both
//     ways, Adapter.ServeUD and Adapter.ResolveUD, and multicast groups,
//     QP.JoinMulticast and LeaveMulticast with MulticastDestination
//     (rdma_join_multicast and ibv_attach_mcast); in process and through
//     a daemon alike;
//   - the UC extension (QPConfig.UC; NDKPI has only reliable QPs): an
//     unreliable-connection QP, connected as any other, whose Sends and
//     Writes nothing acknowledges or retransmits (verbs' IBV_QPT_UC, what
//     ibv_uc_pingpong and perftest -c UC use); in process and through a
//     daemon alike;
//   - the immediate-data extension (immediate.go): QP.SendWithImmediate
//     and QP.WriteWithImmediate; the receive's ResultEx has
//     ResultWithImmediate and Immediate, and a WRITE's receive Type
//     OpReceiveWriteWithImmediate, as verbs' IBV_WC_WITH_IMM and
//     IBV_WC_RECV_RDMA_WITH_IMM;
//   - connections through the InfiniBand CM on QP1, as librdmacm peers
//     (rping, perftest -R) expect: Adapter.CreateConnector, Connector
//     (Connect, ConnectWithSharedEndpoint, CompleteConnect, Accept,
//     Reject, Disconnect, GetConnectionData, LocalAddress, PeerAddress,
//     Close; NDKPI 2.1's AcceptEx, CompleteConnectEx with a
//     DisconnectReason, DisconnectEx with an abortive disconnect;
//     SetRetryCounts), Adapter.CreateListener, Listener (Listen with port 0,
//     ControlConnectEvents, Close), Adapter.CreateSharedEndpoint, and
//     Adapter.CMStats. The CM itself (state machines, rdma_cm header,
//     what differs from Linux on the wire) is ndk/internal/cm;
//   - out-of-band connection (QP.LocalEndpoint, QP.ConnectOOB), the way
//     ibv_rc_pingpong exchanges QPN and PSN: for tools and tests that
//     set up both ends themselves. It sends nothing on QP1, so a peer
//     must be connected the same way.
//
// What is where: this package is the API and the NDK object model (the
// adapter's CQs, PDs, MRs and tokens, QPs, connectors and listeners). Each
// object holds one backend (backend.go: adapterBackend, pdBackend,
// cqBackend, qpBackend, srqBackend, connectorBackend, listenerBackend,
// endpointBackend) and calls it, whichever provider it runs on. The
// in-process provider's backends are inproc_*.go, over the engines
// (provider.go: what they ask of ndk/internal/inproc, which assembles the
// steering program, sockets and engines and runs the CM's MAD goroutine,
// route resolution and its handle on QPs); the daemon-client provider's
// are dial.go (Dial, the link), events.go and daemon_*.go (cq, pd, mem:
// windows, fast registration and SRQs, qp, cm), over the daemon's socket
// and shared rings. The other files: adapter.go (Adapter, Close), open.go
// (Open, Options, Stats), cm.go (CMOptions, CMStats, the connections an adapter
// closes with it), connector.go and listener.go, connect.go (out-of-band
// connection), connector_ex.go (NDKPI 2.1 connector calls, disconnect
// reasons, retry counts), qp.go, atomic.go, immediate.go, cq.go and cq_control.go
// (resize, moderation), pd.go, lifetime.go (closes that wait for
// successors), extension.go (NdkQueryExtension on every object, which
// answers STATUS_NOT_SUPPORTED: NDKPI defines no extension), fastreg.go,
// mw.go, srq.go, lam.go, invalidate.go, buffer.go, flags.go, info.go,
// status.go. Test-only hooks (MAD faults for test/cm) are in
// ndk/testhooks, which no program links.
//
// Connections (NDKPI.md §8): Connect, Accept and Disconnect block until
// the peer answered or the CM gave up (NDKPI's STATUS_PENDING becomes the
// wait; a context bounds it). Route and next-hop MAC come from the kernel's
// tables in the adapter's network namespace, from whatever goroutine
// calls. The management queue's engine hands each QP1 datagram to a
// bounded queue served by the adapter's CM goroutine, so connection setup
// never stalls the data path; a listener's connect callback and a
// connector's disconnect callback run on goroutines of their own and may
// call the blocking methods. Listener and Connector Close return at once
// and complete (Closed) after their callbacks and, for a listener, its
// handed-over connectors; an address and port stay taken until the last
// connector using them closes. A QP that fails on its own (an invalid
// token in a SendAndInvalidate it received, a remote access error,
// retries exhausted) aborts its connection, as seed 004 asks: the CM
// sends a DREQ and the consumer's disconnect callback fires with a
// DisconnectReason; the peer's fires too.
//
// Completion statuses of failed requests (NDKPI.md §7 and §9; the
// ProviderErrorCode is the ib_wc_status a verbs provider would report):
//   - the peer's remote access error NAK (bad token, bounds, rights,
//     invalidated): STATUS_ACCESS_VIOLATION for Write, and
//     STATUS_REMOTE_RESOURCES for Read, which NdkRead documents for
//     reading beyond the remote region;
//   - the peer's invalid request or operational error NAK (a SEND larger
//     than the receive, a token SendAndInvalidate cannot invalidate, more
//     READs than its inbound limit): STATUS_REMOTE_RESOURCES;
//   - ACK timeout or RNR retries exhausted: STATUS_IO_TIMEOUT;
//   - on the receiving side, a SEND larger than the receive:
//     STATUS_BUFFER_OVERFLOW; a token it cannot invalidate:
//     STATUS_ACCESS_VIOLATION;
//   - an Invalidate of what is not valid (never registered or bound,
//     invalidated already, an MR from RegisterMR):
//     STATUS_INVALID_DEVICE_REQUEST (ND2: invalidating an unbound MW);
//   - everything pending after the first error, and after Flush or
//     Close: STATUS_CANCELLED (the QP stays in error; ND2 IND2QueuePair).
//
// Read with RDMA_READ_LOCAL_INVALIDATE (AdapterInfo advertises it)
// invalidates the first SGE's token, a fast-registered sink, once the data
// is placed; a sink that cannot be invalidated fails the READ with
// STATUS_INVALID_DEVICE_REQUEST.
//
// FastRegister, Bind and Invalidate act on the token table when they are
// posted and complete in order with the QP's other requests (rc's
// local.go says why): the new tokens are valid when the call returns, as
// NDKPI requires, and a request posted after them may use them at once.
//
// Memory a peer writes with RDMA WRITE is placed by an engine goroutine;
// the requester's completion proves it happened, but that order crosses
// the network, where Go's race detector cannot follow it. Adapter.Stats
// synchronizes with the engines.
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
// Example_server and Example_client are complete programs (TestExamples
// runs them on a veth pair). In short, a client that sends one message:
//
//	a, err := ndk.Open("eth1", ndk.Options{}) // in eth1's network namespace
//	if err != nil {
//		return err
//	}
//	defer a.Close()
//	cq, err := a.CreateCQ(64, nil)
//	if err != nil {
//		return err
//	}
//	pd, err := a.CreatePD()
//	if err != nil {
//		return err
//	}
//	msg := []byte("hello over RDMA")
//	mr, err := pd.RegisterMR(msg, ndk.MRFlagAllowLocalRead)
//	if err != nil {
//		return err
//	}
//	qp, err := pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq,
//		ReceiveQueueDepth: 16, InitiatorQueueDepth: 16,
//		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
//	if err != nil {
//		return err
//	}
//	c, err := a.CreateConnector()
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	dst := netip.MustParseAddrPort("198.18.0.2:7174")
//	err = c.Connect(ctx, qp, netip.AddrPort{}, dst, 1, 1, nil)
//	if errors.Is(err, ndk.ErrConnectionRefused) {
//		return fmt.Errorf("nobody listens on %v: %w", dst, err)
//	} else if err != nil {
//		return err
//	}
//	if err := c.CompleteConnect(nil); err != nil {
//		return err
//	}
//	sge, err := mr.SGE(0, len(msg))
//	if err != nil {
//		return err
//	}
//	if err := qp.Send(nil, []ndk.SGE{sge}, 0); err != nil {
//		return err
//	}
//	var rs [1]ndk.Result
//	for cq.GetResults(rs[:]) == 0 { // or Arm the CQ and sleep until its callback
//		runtime.Gosched()
//	}
//	if rs[0].Status != ndk.StatusSuccess {
//		return fmt.Errorf("send: %v", rs[0].Status)
//	}
//	return c.Disconnect(ctx) // DREQ, DREP
package ndk
