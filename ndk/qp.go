package ndk

import (
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// QPConfig is NdkCreateQp's parameters (NDKPI.md §3, PD dispatch): the
// CQs, the context returned in every completion, queue depths, SGE limits
// and the inline size, each checked against the adapter's AdapterInfo.
type QPConfig struct {
	ReceiveCQ, InitiatorCQ *CQ
	Context                any
	ReceiveQueueDepth      int
	InitiatorQueueDepth    int
	MaxReceiveRequestSGE   int
	MaxInitiatorRequestSGE int
	InlineDataSize         int
	// SRQ makes it NdkCreateQpWithSrq: the QP takes its receives from the
	// SRQ (of the same PD) and has no receive queue, so
	// ReceiveQueueDepth and MaxReceiveRequestSGE must be 0 (srq.go).
	SRQ *SRQ
	// UC makes an unreliable-connection QP (ndkxdp extension; verbs'
	// IBV_QPT_UC): connected as any QP (Connector, ConnectOOB), it carries
	// Send and Write, with immediate too, that nothing acknowledges or
	// retransmits. A request completes once its last packet is sent; a
	// message whose packets do not all arrive in order is dropped at the
	// peer, as is one that finds no receive, a bad token or too small a
	// buffer, without failing either QP. Read, the atomics and
	// SendAndInvalidate fail with STATUS_NOT_SUPPORTED (rc/uc.go).
	UC bool
	// BlockSelfMulticastLoopback keeps a UD QP's own datagrams to a
	// multicast group it joined from coming back to it (verbs'
	// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, mckey -l); the adapter's other
	// member QPs take them still (QP.JoinMulticast).
	BlockSelfMulticastLoopback bool
}

// QP is a reliable-connection queue pair (NDK_QP). Requests posted on it
// run in the engine of the queue it was assigned to.
//
// As NDKPI requires (NDKPI.md §8), the consumer never posts to one queue
// from two goroutines at once: Send, SendAndInvalidate, Read, Write, Bind,
// FastRegister and Invalidate share the initiator queue; Receive has the
// receive queue, which may be driven concurrently with it. Flush and Close
// may run concurrently with posts.
type QP struct {
	pd      *PD
	adapter *Adapter
	be      qpBackend // inproc_qp.go, daemon_qp.go
	queue   int
	rcq     *CQ // the CQs it holds open (lifetime.go)
	icq     *CQ
	closed  atomic.Bool // Close was called
	// conn is the connector Connect or Accept gave the QP to: a close
	// waits for its close (lifetime.go). done is closed when the QP's
	// close completed.
	conn atomic.Pointer[Connector]
	done chan struct{}
	psn  uint32 // the first PSN this QP sends, drawn at random
	// atomicSGL holds an atomic's result SGE while it is posted (atomic.go):
	// initiator posts are serialized, and a local array would escape.
	atomicSGL [1]rc.SGE
	recvSGL   sglCopy // Receive's
	ud        *udInfo // a UD QP's Q_Key and MTU (ud.go); nil for RC
	uc        bool    // QPConfig.UC
}

// The public SGE must stay layout-identical to the engine's, which posts
// read in place (no copy, no allocation).
var _ = [1]struct{}{}[unsafe.Sizeof(SGE{})-unsafe.Sizeof(rc.SGE{})]
var _ = [1]struct{}{}[unsafe.Offsetof(SGE{}.Length)-unsafe.Offsetof(rc.SGE{}.Length)]
var _ = [1]struct{}{}[unsafe.Offsetof(SGE{}.Token)-unsafe.Offsetof(rc.SGE{}.Token)]

// unsafeSGL is engineSGL's inverse.
func unsafeSGL(sgl []rc.SGE) []SGE {
	return unsafe.Slice((*SGE)(unsafe.Pointer(unsafe.SliceData(sgl))), len(sgl))
}

func engineSGL(sgl []SGE) []rc.SGE {
	if len(sgl) == 0 {
		return nil
	}
	return unsafe.Slice((*rc.SGE)(unsafe.Pointer(unsafe.SliceData(sgl))), len(sgl))
}

// CreateQP creates a QP on the PD (NdkCreateQp). It fails with
// STATUS_INVALID_PARAMETER when a CQ is missing or belongs to another
// adapter, or a depth, SGE count or inline size is out of [0, its
// AdapterInfo limit] (depths at least 1); STATUS_NOT_SUPPORTED on an
// adapter opened without a transport; STATUS_INVALID_HANDLE after the PD
// or adapter closed.
//
// The QP is assigned to a queue round-robin; receives may be posted at
// once, initiator requests after ConnectOOB (or, with connection
// management, after the connector completes).
func (pd *PD) CreateQP(cfg QPConfig) (*QP, error) { return pd.createQP(cfg, false, 0) }

// createQP is CreateQP, of a UD QP with Q_Key qkey (ud.go) if ud.
func (pd *PD) createQP(cfg QPConfig, ud bool, qkey uint32) (*QP, error) {
	const op = "create qp"
	a := pd.adapter
	info := &a.info
	switch {
	case cfg.ReceiveCQ == nil || cfg.InitiatorCQ == nil:
		return nil, errorf(StatusInvalidParameter, op, "a receive and an initiator CQ are required")
	case cfg.ReceiveCQ.adapter != a || cfg.InitiatorCQ.adapter != a:
		return nil, errorf(StatusInvalidParameter, op, "CQ of another adapter")
	case cfg.SRQ != nil && (cfg.SRQ.pd != pd || cfg.ReceiveQueueDepth != 0 || cfg.MaxReceiveRequestSGE != 0):
		return nil, errorf(StatusInvalidParameter, op, "a QP on an SRQ takes the SRQ's receives: same PD, ReceiveQueueDepth and MaxReceiveRequestSGE 0")
	case cfg.SRQ == nil && (cfg.ReceiveQueueDepth < 1 || cfg.ReceiveQueueDepth > int(info.MaxReceiveQueueDepth)):
		return nil, errorf(StatusInvalidParameter, op, "ReceiveQueueDepth %d outside [1, %d]", cfg.ReceiveQueueDepth, info.MaxReceiveQueueDepth)
	case cfg.InitiatorQueueDepth < 1 || cfg.InitiatorQueueDepth > int(info.MaxInitiatorQueueDepth):
		return nil, errorf(StatusInvalidParameter, op, "InitiatorQueueDepth %d outside [1, %d]", cfg.InitiatorQueueDepth, info.MaxInitiatorQueueDepth)
	case cfg.MaxReceiveRequestSGE < 0 || cfg.MaxReceiveRequestSGE > int(info.MaxReceiveRequestSGE):
		return nil, errorf(StatusInvalidParameter, op, "MaxReceiveRequestSGE %d outside [0, %d]", cfg.MaxReceiveRequestSGE, info.MaxReceiveRequestSGE)
	case cfg.MaxInitiatorRequestSGE < 0 || cfg.MaxInitiatorRequestSGE > int(info.MaxInitiatorRequestSGE):
		return nil, errorf(StatusInvalidParameter, op, "MaxInitiatorRequestSGE %d outside [0, %d]", cfg.MaxInitiatorRequestSGE, info.MaxInitiatorRequestSGE)
	case cfg.InlineDataSize < 0 || cfg.InlineDataSize > int(info.MaxInlineDataSize):
		return nil, errorf(StatusInvalidParameter, op, "InlineDataSize %d outside [0, %d]", cfg.InlineDataSize, info.MaxInlineDataSize)
	}
	if ud {
		if cfg.UC {
			return nil, errorf(StatusInvalidParameter, "create ud qp", "a QP is UC or UD, not both")
		}
		return pd.be.createUDQP(cfg, qkey)
	}
	q, err := pd.be.createQP(cfg)
	if err == nil {
		q.uc = cfg.UC
	}
	return q, err
}

// QPN returns the QP number peers address.
func (q *QP) QPN() uint32 { return q.be.qpn() }

// Queue returns the device queue whose engine runs the QP.
func (q *QP) Queue() int { return q.queue }

// Connected reports whether the QP is connected and not in error.
func (q *QP) Connected() bool { return q.be.connected() }

// queueFull holds each post operation's STATUS_INSUFFICIENT_RESOURCES
// error, built once. A full queue is not a fault but the back-pressure a
// streaming consumer meets on every post until completions free slots, so
// its error must cost no allocation: building it with fmt.Sprintf on each
// refused post took 7-12% of the CPU of the 64 KiB WRITE benchmark
// (test/rdma) and fed the garbage collector. Callers must not modify it.
var queueFull = func() map[string]error {
	m := make(map[string]error)
	for _, op := range []string{"send", "send and invalidate", "write", "read", "receive", "compare and swap", "fetch and add"} {
		m[op] = errorf(StatusInsufficientResources, op, "queue full: wait for completions")
	}
	return m
}()

// postError turns an engine post status into the error the NDK call
// returns. It allocates, except for a full queue; only failures reach it.
func postError(op string, st Status) error {
	if err, ok := queueFull[op]; ok && st == StatusInsufficientResources {
		return err
	}
	switch st {
	case StatusConnectionInvalid:
		return errorf(StatusConnectionInvalid, op, "queue pair not connected")
	case StatusInvalidParameter:
		return errorf(StatusInvalidParameter, op, "SGE count or inline size over the QP's limits, or total length over the adapter's MaxTransferLength")
	case StatusAccessViolation:
		return errorf(StatusAccessViolation, op, "an SGE's local token, bounds or rights do not allow this access")
	case StatusInsufficientResources:
		return errorf(StatusInsufficientResources, op, "queue full: wait for completions")
	case StatusInvalidHandle:
		return errorf(StatusInvalidHandle, op, "queue pair closed")
	case StatusInvalidDeviceRequest:
		return errorf(StatusInvalidDeviceRequest, op, "the QP takes its receives from its SRQ: post them with SRQ.Receive")
	}
	return errorf(st, op, "post failed")
}

func (q *QP) post(op string, pop postOp, wr *rc.SendWR) error {
	if err := checkOpFlags(pop, wr.Flags, q.adapter.info.AdapterFlags); err != nil {
		// Earlier DEFER posts still go (NDKPI.md §8), as after any
		// inline failure.
		q.be.ringDeferred()
		return err
	}
	if q.uc && (pop == postRead || pop == postAtomic || pop == postSendAndInvalidate) {
		q.be.ringDeferred()
		return errorf(StatusNotSupported, op, "a UC QP carries Send and Write only")
	}
	return q.be.post(op, *wr)
}

// UC reports whether q is an unreliable-connection QP (QPConfig.UC).
func (q *QP) UC() bool { return q.uc }

// Send posts a send of the bytes sgl names (NdkSend; seed 003). Flags:
// SILENT_SUCCESS (no completion unless it fails), READ_FENCE (start after
// every earlier Read completed), SEND_AND_SOLICIT_EVENT (the peer's
// SOLICITED arm fires on this receive), INLINE (the bytes are copied now;
// tokens are not checked, the SGE count may exceed MaxInitiatorRequestSGE,
// the total must fit InlineDataSize) and DEFER (no doorbell: the request
// waits for the next post without DEFER).
//
// It returns nil once queued (a completion follows, unless silent), or:
// STATUS_CONNECTION_INVALID on a QP never connected;
// STATUS_INVALID_PARAMETER for undocumented flags, too many SGEs or
// inline data over the limit; STATUS_ACCESS_VIOLATION for an SGE its
// token does not cover; STATUS_INSUFFICIENT_RESOURCES when the initiator
// queue is full. These inline failures produce no completion. After the
// QP failed or was flushed, requests complete with STATUS_CANCELLED.
// Send never blocks and allocates nothing when it succeeds.
func (q *QP) Send(ctx any, sgl []SGE, flags OpFlag) error {
	wr := rc.SendWR{Op: rc.OpSend, Flags: flags, Context: ctx, SGL: engineSGL(sgl)}
	return q.post("send", postSend, &wr)
}

// SendAndInvalidate is Send plus remoteToken, which the peer invalidates
// when the receive completes (NdkSendAndInvalidate; seeds 000, 004). The
// initiator's completion has Type OpSend; the peer's has
// OpReceiveAndInvalidate with the token in TypeSpecificCompletionOutput.
// A token the peer cannot invalidate aborts the connection: the peer's
// receive fails, this request completes with STATUS_REMOTE_RESOURCES and
// both QPs enter the error state.
func (q *QP) SendAndInvalidate(ctx any, sgl []SGE, flags OpFlag, remoteToken uint32) error {
	wr := rc.SendWR{Op: rc.OpSendInvalidate, Flags: flags, Context: ctx, SGL: engineSGL(sgl), InvalidateToken: remoteToken}
	return q.post("send and invalidate", postSendAndInvalidate, &wr)
}

// Write posts an RDMA write of sgl to the peer's memory at remoteAddress,
// named by remoteToken (NdkWrite). Flags: SILENT_SUCCESS, READ_FENCE,
// INLINE, DEFER. The peer refusing the access completes it with
// STATUS_ACCESS_VIOLATION and fails the connection.
func (q *QP) Write(ctx any, sgl []SGE, remoteAddress uint64, remoteToken uint32, flags OpFlag) error {
	wr := rc.SendWR{Op: rc.OpWrite, Flags: flags, Context: ctx, SGL: engineSGL(sgl), RemoteAddr: remoteAddress, RemoteToken: remoteToken}
	return q.post("write", postWrite, &wr)
}

// Read posts an RDMA read of the peer's memory at remoteAddress into sgl
// (NdkRead). Flags: SILENT_SUCCESS, READ_FENCE, DEFER. At most the
// connection's outbound read limit run at once. The peer refusing the
// access (bad token, bounds or rights) completes it with
// STATUS_REMOTE_RESOURCES, as NdkRead documents for reads beyond the
// remote region, and fails the connection.
func (q *QP) Read(ctx any, sgl []SGE, remoteAddress uint64, remoteToken uint32, flags OpFlag) error {
	wr := rc.SendWR{Op: rc.OpRead, Flags: flags, Context: ctx, SGL: engineSGL(sgl), RemoteAddr: remoteAddress, RemoteToken: remoteToken}
	return q.post("read", postRead, &wr)
}

// Receive posts a receive buffer (NdkReceive); allowed before the QP is
// connected. Its completion reports the bytes received, with Type
// OpReceive, or OpReceiveAndInvalidate and the invalidated token. It fails
// inline with STATUS_INVALID_PARAMETER (too many SGEs),
// STATUS_ACCESS_VIOLATION (an SGE without local write) or
// STATUS_INSUFFICIENT_RESOURCES (queue full). Allocates nothing when it
// succeeds.
func (q *QP) Receive(ctx any, sgl []SGE) error {
	return q.be.receive(ctx, q.recvSGL.hold(sgl))
}

// sglCopy holds a receive's SGL for the call into the backend: a slice
// passed to an interface method escapes, so the caller's would move to
// the heap (a literal in the call, an allocation per post). Receives on
// one queue are serialized (NDKPI.md §8), so one copy per queue does.
type sglCopy [16]SGE

// hold copies sgl into h; an SGL longer than any queue takes (AdapterInfo's
// MaxReceiveRequestSGE) goes on as it is, to fail as it would.
func (h *sglCopy) hold(sgl []SGE) []SGE {
	if len(sgl) > len(h) {
		return slices.Clone(sgl)
	}
	return h[:copy(h[:], sgl)]
}

// Flush cancels every pending request (NdkFlush): each completes with
// STATUS_CANCELLED, in order, and the QP is in the error state
// afterwards, as after a failure. It returns before the cancellations
// complete.
func (q *QP) Flush() { q.be.flush() }

// Close closes the QP (NdkCloseQp): pending requests complete with
// STATUS_CANCELLED, the QP number leaves the steering map, and later posts
// fail with STATUS_INVALID_HANDLE. While the connector it was given to
// (Connect, Accept) is not closed, the close is pending (NDKPI.md §8: the
// QP is the connector's antecedent): Close returns nil at once, the QP
// works on, and the close completes when the connector's has. Closed
// reports when; only then do its PD and CQs count it no more. A second
// Close does nothing.
func (q *QP) Close() error {
	if !q.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c := q.conn.Load(); c != nil && !c.isClosed() {
		go func() {
			<-c.done
			_ = q.finishClose()
		}()
		return nil
	}
	return q.finishClose()
}
