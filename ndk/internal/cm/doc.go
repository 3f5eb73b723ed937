// Package cm is the InfiniBand Communication Manager of one ndkxdp adapter:
// the connection state machines of IBTA chapter 12 (REQ, REP, RTU, REJ,
// MRA, DREQ, DREP) carried as MADs on QP1, with rdma_cm's private-data
// header and ServiceIDs, so that librdmacm peers (rping, perftest -R, any
// verbs application on Linux rxe or RoCE hardware) connect to ndkxdp and
// ndkxdp to them. It implements what NDKPI's connector, listener and shared
// endpoint need (NDKPI.md §3, §8): Connect, ConnectWithSharedEndpoint,
// CompleteConnect, Accept, Reject, Disconnect, GetConnectionData,
// Get{Local,Peer}Address, Listen with port 0, connect-event pausing,
// endpoint reference counting, and the NTSTATUS codes of each outcome
// (its errors are *ndkpi.Error, which package ndk re-exports as ndk.Error).
//
// It is not a transport and owns no goroutine. A Manager sends MADs through
// a Transport and is handed received ones with HandleMAD; GSIFramer,
// CheckGSI and ParseGSI build and check the RoCEv2 UD frames that carry
// them. It drives queue pairs only through the QP interface (RTR, RTS,
// error, drained), which the public ndk QP implements on the RC engine.
// Timers come from an injected Clock; package cmtest has a fake clock,
// fake QPs and a lossy in-memory link for deterministic tests. Resolver
// finds the source address, interface and next-hop MAC through the
// kernel's routing and neighbour tables.
//
// Example (active side; the passive side calls NewListener, Listen, and in
// the connect callback ConnectionData and Accept):
//
//	m, err := cm.New(cm.Config{Transport: engine, CAGUID: rocev2.EUI64(mac)})
//	// engine: for each frame with cm.CheckGSI(&pkt) == nil,
//	//         m.HandleMAD(reply, srcQP, mad)
//	path, err := cm.ResolvePath(dst.Addr()) // in the adapter's namespace
//	c := m.NewConnector()
//	err = c.Connect(qp, path, netip.AddrPort{}, dst,
//		cm.ConnectParams{InboundReadLimit: 1, OutboundReadLimit: 1},
//		func(err error) {
//			if err == nil {
//				data, _ := c.ConnectionData() // peer's REP private data
//				err = c.CompleteConnect(onDisconnect)
//			}
//		})
//	...
//	err = c.Disconnect(func(err error) { /* DREP arrived, QP drained */ })
//
// # Files
//
// The connection code is split by phase, as cm.c's handlers are:
//
//   - connector.go: the Connector, its states and the bookkeeping that lets
//     Close wait for running callbacks; ConnectionData, LocalAddr, PeerAddr,
//     RemoteInfo and Close; moving the QP to error; the retransmission timer
//     and MRA.
//   - active.go: Connect (checks without the lock, startConnect under it,
//     newREQ), CompleteConnect, and the REP answering our REQ.
//   - passive.go: a REQ arriving (handleREQ, dupREQ, deliverConnect),
//     Accept (beginAccept, the QP to RTS, finishAccept with newREP), and RTU
//     or first data establishing the connection.
//   - reject.go: Reject and the REJ in both directions.
//   - disconnect.go: Disconnect, DREQ and DREP, the disconnect event, stale
//     connections and the time-wait.
//   - abort.go: the disconnect reasons of NDKPI 2.1, TransportFailed (a
//     QP that failed on its own aborts its connection: DREQ and the
//     consumer's event) and Abort (the abortive disconnect).
//   - listener.go: local endpoints (binding, ephemeral ports, reference
//     counts), SharedEndpoint and Listener.
//   - manager.go: Manager, Params and Stats, the effects run after the lock,
//     identifiers, timers, and HandleMAD dispatching to the handlers above.
//
// Around them: path.go has PathInfo, RemoteInfo and the QP and Transport
// interfaces; clock.go the Clock, the deadline heap and IBA time units;
// gsi.go the QP1 framing; resolve.go the Resolver; sidr.go UD service
// resolution (SIDR_REQ, SIDR_REP: ServeUD, ResolveUD); errors.go
// RejectError, the cause a peer's REJ gives a failed connection.
// FuzzManagerMADs (fuzz_test.go) drives a Manager with sequences of MADs,
// consumer calls and clock steps.
//
// # What goes on the wire
//
// Every field is what Linux's ib_cm and rdma_cm put there over RoCE
// (torvalds/linux drivers/infiniband/core/cm.c cm_format_req, cm_format_rep,
// cma.c cma_connect_ib, cma_accept_ib; ROCEV2.md 3): Q_Key 0, both CM
// response timeouts 20, MaxCMRetries 15, RetryCount 7, RNRRetryCount 7
// (what rping and perftest ask; ConnectParams.Retry and
// AcceptParams.Retry change them per connection as rdma_conn_param does),
// PathMTU the largest that fits the interface MTU, permissive LIDs, hop
// limit 64, SL 0, the traffic class Params.TrafficClass (the adapter's
// TOS byte, 0 unless set, as rdma_cm's default_roce_tos), IPv4-mapped (or
// IPv6) GIDs, the rdma_cm
// flow label, LocalAckTimeout cm_ack_timeout(15, 16) = 17, TargetAckDelay
// 15, the CA GUID the EUI-64 of the MAC, ServiceID RDMA_PS_TCP | port, the
// 36-byte cma header first in the REQ's private data, responder resources
// and initiator depth from the read limits, transaction IDs formed as
// cm_form_tid forms them and reused by the replies as Linux reuses them.
// Retransmission waits cm_convert_to_ms: 2·2^(16-8) + 2^(20-8) ms for a
// REQ, 2^(LocalCMResponseTimeout-8) ms for a REP, MaxCMRetries times; an
// MRA adds its service timeout. GSI frames carry UDP source port 55410,
// AckReq set and a PSN counting from 0, as rxe's QP1 does. The QP reaches
// RTS before the REP leaves (cma_accept_ib). TestMADsMatchLinux replays the
// five connections of the public rdma_cm captures and finds every REQ,
// REP, RTU, DREQ and DREP field and every frame header equal to Linux's,
// apart from the identifiers below.
//
// # Differences from Linux
//
// Fields and behaviour that differ on purpose:
//
//   - Identifiers. Communication IDs are a counter XOR a random operand, as
//     in cm.c, but from our own sequence; the high word of transaction IDs
//     is a random nonzero 32-bit value where Linux uses its MAD agent's small
//     counter (2 in the captures). The GSI PSN and the IPv4 identification
//     count per adapter, so their values differ from any given capture.
//   - LocalAckTimeout is 17, from the packet lifetime 16 that Linux uses
//     since CMA_IBOE_PACKET_LIFETIME changed from 18 (Debian 13's 6.12
//     sends 17); the montybeatnik captures and Debian 12's 6.1 show 19.
//     Params.PacketLifeTime selects the old value (the capture test does
//     so per capture). As the passive side we take the QP's ACK timeout
//     from the REQ, as cm.c does, so each peer gets its own: 19 from
//     Debian 12, 17 from Debian 13's rping, 16 from perftest 25.01, which
//     sets rdma_cm's ACK timeout option to 14 (TestPassiveAckTimeoutFromREQ).
//   - PacketRate is always 0 (port current). rdma_cm derives it from the
//     netdev speed; the rxe captures show 0.
//   - The SRQ bit of REQ and REP is 0: the QP interface does not say whether
//     the QP uses a shared receive queue.
//   - When a REQ or REP runs out of retries we send REJ reason 4 (timeout)
//     with our GUID as ARI, as IBTA 12.9 asks. Linux's CM sends nothing
//     then (cm_process_send_error); its REJ handler does match such a REJ
//     by the ARI GUID (cm_acquire_rejected_id), so Linux peers release the
//     connection at once instead of waiting for their own timeout.
//   - A repeated REQ that finds the REP sent is answered with the REP again;
//     Linux drops it and relies on its REP retransmission. A repeated REQ
//     while the consumer has not yet accepted is answered with MRA (service
//     timeout 24), which is what rdma_cm's delayed MRA produces.
//   - A connection that ended in any way (rejected, timed out, refused)
//     keeps its IDs for the time-wait and answers a late repeated REQ with
//     the REJ it sent (or REJ 10, stale, after a disconnect); Linux forgets
//     rejected connections at once, so there a late duplicate can start a
//     new connection. A REQ from the same peer QP under a new
//     communication ID starts a new connection, as in Linux, whose CM
//     forgets the peer's QP as the connection enters time-wait.
//   - A REQ whose transport type is not RC gets REJ 9 (invalid transport
//     type); rdma_cm's handler fails and Linux sends REJ 28. A listener
//     whose backlog (Params.ListenBacklog) is full answers REJ 28, as NDKPI
//     lists "backlog full" under CONNECTION_REFUSED.
//   - The passive side's path MTU is the smaller of the REQ's and its own
//     interface's; Linux takes the REQ's, which rxe refuses when it exceeds
//     the port MTU.
//   - A DREQ that arrives while we wait for RTU completes Accept
//     (the peer evidently sent its RTU) and then disconnects; Linux goes to
//     DREQ_RCVD without an established event.
//   - Against floods of REQs that are never completed: an accepted request
//     stays in the listener's backlog until its RTU, so a listener holds at
//     most ListenBacklog half-open connections (Linux's ib_cm has no
//     backlog; rdma_cm's is the consumer's); and the REP's timeout and
//     retries, and the time-wait, that a REQ asks for are capped by our own
//     parameters (the time-wait at 16 times our path's ACK timeout), where
//     Linux waits as long as the REQ says, up to hours
//     (TestSYNFloodHoldsAtMostTheBacklog).
//   - Against peers that end every connection they start (a REJ for every
//     REP, a DREQ after every RTU): the connections in time-wait, which
//     the backlog no longer holds, are bounded by Params.MaxTimeWait
//     (4,096) for the whole manager; one more evicts the oldest, counted
//     in Stats.TimeWaitEvictions. Linux's ib_cm keeps them all. So every
//     state that holds memory has a bound: half-open by the backlog,
//     established and those being set up by the consumer's QPs, time-wait
//     by MaxTimeWait; the timer heap holds one entry per connection with a
//     timer armed (TestREJForEveryREPBoundsTimeWait).
//
// Everything else a peer sees (the choice of REJ 8 for a port nobody listens
// on or a paused listener, REJ 28 for an address no listener is bound to,
// REJ 10 and a DREQ to the old connection for a stale QP, a DREP for any
// DREQ, an RTU for a repeated REP, a single DREQ when a connected connector
// is closed) follows cm.c.
package cm
