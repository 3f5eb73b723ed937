// Package daemon serves one ndk adapter to client processes: the library
// behind `ndkxdp daemon`. The daemon owns what the kernel lets one owner
// have (the attached steering program, pinned under
// /sys/fs/bpf/ndkxdp/netns-N/IF; an AF_XDP socket on every receive queue; the
// engines); applications reach it with ndk.Dial and use the ndk API as on
// an adapter of their own.
//
// # Who owns what
//
// Each client connection is a session. The daemon runs the NDK objects
// (PDs, CQs, MRs, QPs, connectors, listeners) on its adapter and gives
// the client handles for them, valid in that session only: a handle of
// another session, or of another type, is refused like one never given
// out, so an application reaches only its own objects.
//
//	session segment   daemon creates per session: the post and arm
//	                  bitmaps, the published WRITE counts, the event
//	                  ring, and the relay's doorbell (proto.RelayBell),
//	                  whose eventfd the daemon makes and the engine
//	                  sleeps on; the client rings it (shm.Doorbell) after
//	                  a post or an arm. Nothing in it is read for any
//	                  other session, and no page or descriptor that wakes
//	                  the engine is shared between two sessions
//	QP segment        daemon creates per QP: a send ring and a receive
//	                  ring (client produces, relay consumes), the count of
//	                  peer WRITE packets placed and the QP's state
//	                  (daemon writes)
//	SRQ segment       daemon creates per SRQ: a receive ring (client
//	                  produces, relay consumes), its post hint (client
//	                  sets, relay clears) and the count of its receives
//	                  completed (daemon writes; the client's depth check)
//	CQ segment        daemon creates per CQ: the completion ring (relay
//	                  produces, client consumes), the arm word (client
//	                  raises, relay clears when it fires) and the CQ
//	                  error (daemon writes)
//	arena             client creates (Adapter.Memory, AllocBuffer's
//	                  pool): a sealed memfd the daemon maps, in which
//	                  every region the client registers must lie
//
// Segments are sealed memfds passed with SCM_RIGHTS (ndk/internal/shm).
// Record layouts are in ndk/internal/proto.
//
// # Data path
//
// A post writes one record into the QP's ring and rings the engine's
// doorbell: two atomic operations while the engine is awake, no system
// call. A receive rings only when the engine must act on it (its QP
// failed, or lives on another queue): otherwise the SEND's frame wakes the
// engine, whose relay moves marked receives before the frames of its turn,
// as an in-process PostReceive rings no engine. The request's context
// stays in the client, in a table indexed by the request's sequence
// number, which the completion carries back. Each session has a relay that
// runs in every turn of the queue-0 engine's loop (rc.Poller): it takes
// records from the client's rings and posts them on the daemon's QPs, and
// moves the daemon CQs' completions into the client's rings, then fires
// the client's arms (the notification itself leaves on a goroutine of the
// session, so the engine never waits on a socket). No goroutine stands
// between a client and the engine. Before the engine sleeps, the relay
// arms its daemon CQs, so that a completion from another queue's engine
// rings it awake; with no QP of the session on another queue the arm is
// for errors only, since every completion is then made in the relay's own
// loop (Server.RelayRings). A hostile client can only keep the engine from
// sleeping (a pending flag it keeps set, or its eventfd written in a
// loop): CPU, as a client posting in a loop would cost. What it writes
// into its own doorbell withholds wake-ups from its own session at most. Memory is not copied between the processes: a region's
// bytes are the arena's pages, mapped in both, registered in the daemon
// under the client's address so that the address an application hands its
// peer is the one the wire carries. The engine copies payload into and out
// of frames as it does for any registered memory in process.
//
// SRQs, memory windows and fast registration: creating, initializing,
// modifying and closing are control requests. Bind, FastRegister and
// Invalidate are records in the QP's send ring (proto.Send says which
// fields they use), so they complete in order with the QP's other
// requests; the relay looks every handle up among the session's objects,
// takes a FastRegister's memory from the session's arenas by arena and
// offset (never at an address the client names), and lets the daemon's
// token table check every token against the QP's PD. NDKPI hands out a
// window's or FRMR's new token when the post returns, before the relay has
// seen the record: the client draws the new keys itself and the record
// carries them; the daemon keeps the index, which names the object's slot,
// and refuses the current keys (ndk/daemon_mem.go says why this and not a
// control call or a wait). A receive posted on an SRQ is a record in the
// SRQ's ring, served when its hint is set; its completion reaches the
// receive CQ of the QP that took it, with a request context (reqSlot, kind
// KindSRQ) that names the receive in the SRQ's context table. A receive
// may use the token a FastRegister posted before it on any of the
// session's QPs returned, and must find the token of an Invalidate posted
// before it gone: the client marks a QP in the post bitmap after it
// publishes the QP's send record (a local operation with DEFER too, which
// it does not ring for), and each pass of the relay counts the receives
// it may move, on QP and SRQ rings, then reads the bitmap again and moves
// every send record published before the count, and only then moves the
// counted receives (relay.pass); a UD QP's refill and ModifySRQ's move do
// the same. SRQ notifications are messages (they come from the SRQ's
// goroutine, not the relay).
//
// UD QPs (ud.go) are client QPs with the same rings, made by create_qp
// with its UD fields: each SEND record of a UD QP carries its
// destination (proto.UDDest: address, MAC, QPN, Q_Key, and the TOS it names), and the relay
// posts it with SendTo on the daemon's UD QP.
// Receives and their completions take the RC path: the engine writes the
// GRH into the client's buffer, and the completion carries the sender's
// QPN and any immediate. A client's UD services (ServeUD) answer SIDR_REQs
// on the daemon's CM with the client's QP until closed or the session
// ends; ResolveUD and UDReplyTo's next hop run on the daemon's CM and the
// kernel's routes and neighbours of its namespace.
//
// # Control path
//
// Requests are JSON objects, one per SOCK_SEQPACKET datagram, each a
// typed request of proto/ops.go answered by its reply type with the same
// ID, or by a proto.Message with the failure's NTSTATUS; events (CQ
// notifications, incoming connections, a peer's disconnect, completed
// closes) are messages without an ID. One table (handlers.go) maps each
// operation to its typed handler and says whether it blocks, needs a
// hello, is an operator's or keeps the descriptors sent with it; an
// operation not in it is answered "no such request". Requests that wait
// on the network (connect, accept, disconnect, resolve_ud) run on
// goroutines of their own, at most 64 at once per client, under the
// request's deadline, and the client can cancel one (proto.Cancel).
//
// # Failure handling
//
// A client is untrusted. A value that no correct client writes and that
// the daemon cannot answer within the client's own objects (a bitmap bit
// beyond its QP slots, a malformed control message) ends the session:
// logged with the reason and counted (Status.Ended, metric
// ndkxdp_sessions_ended_total). A panic while serving a session, on its
// control goroutines or in its relay's pass in the engine's loop, is
// recovered and ends that session alone. The daemon checks every handle, size and offset
// of a request, refuses a memfd that is not sealed or is smaller than
// claimed, and re-checks every record: an index no correct producer
// stores, or a malformed record, flushes that QP and stops the relay from
// reading its rings; an SGE the daemon's token check refuses (another
// client's region, a deregistered one) completes the request with the
// refusal, as does a Bind, FastRegister or Invalidate that names what is
// not the client's. An SRQ record that is malformed or refused has no QP
// to complete on: the SRQ's ring is read no more and the client gets the
// SRQ's fatal notification, STATUS_INTERNAL_ERROR. Inline data is copied
// from the record, never read at an address the client names. When a
// client's socket closes (exit, crash, SIGKILL), its session ends:
// connections are disconnected (the peer gets a DREQ), listeners closed,
// QPs closed (pending requests cancelled), SRQs and windows closed,
// regions deregistered, PDs and CQs closed, and only then its memory
// unmapped.
// Malformed control messages end the session the same way. Server.Close
// does this for every session (the daemon's SIGTERM).
//
// # Operators
//
// Requests named admin_* (admin.go) need no hello and create nothing: a
// session that makes only these is not a client. They answer what `ndkxdp
// status`, `info`, `stats` and `qp` print (Query asks them): the sessions
// (SO_PEERCRED pid and uid, start time, QPs), the wire and its queues'
// AF_XDP bind modes, every counter (engines, per QP, sockets, steering
// program, CM) and every QP's state, peer, PSNs and owner. The same
// counters feed Prometheus (metrics.go, ServeMetrics). admin_dump (dump.go,
// Dump) streams a live capture: each engine copies frames into a bounded
// ring of its queue (port.TapRing) or drops and counts them, never waits, and the session
// sends the ring's frames as events until the operator's connection ends.
// Since a capture holds every application's payload bytes, only root or
// the daemon's user may start one; the other requests show what ps and
// rdma resource show to any user.
package daemon
