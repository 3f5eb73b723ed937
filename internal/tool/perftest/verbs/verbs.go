package verbs

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Access is what a registration allows. The values are NDK_MR_FLAG_*
// (NDKPI.md §6, ndk.MRFlag), so the wiring converts with a plain cast.
type Access uint32

const (
	AccessLocalWrite  Access = 0x1
	AccessRemoteRead  Access = 0x2
	AccessRemoteWrite Access = 0x5 // includes AccessLocalWrite, as NDK_MR_FLAG_ALLOW_REMOTE_WRITE does
	// AccessRemoteAtomic lets the peer run atomics on the region. NDKPI has
	// no separate flag (atomics are outside NDK 1.2); verbs needs
	// IBV_ACCESS_REMOTE_ATOMIC, so the bit is ours and above NDK's.
	AccessRemoteAtomic Access = 0x100
)

// Region is registered memory: the bytes, the address a peer names in RDMA
// operations, and the two tokens (NDK's local and remote token, verbs' lkey
// and rkey).
type Region struct {
	Buf  []byte
	Addr uint64
	LKey uint32
	RKey uint32
}

// Segment is a window of a region, the one-entry scatter/gather list every
// operation here takes.
type Segment struct {
	Region Region
	Off    int
	Len    int
}

// Bytes returns the window's bytes.
func (s Segment) Bytes() []byte { return s.Region.Buf[s.Off : s.Off+s.Len] }

// Seg returns the window [off, off+n) of r, or an error if it does not fit.
func (r Region) Seg(off, n int) (Segment, error) {
	if off < 0 || n < 0 || off+n > len(r.Buf) {
		return Segment{}, fmt.Errorf("segment [%d, %d) outside a %d-byte region: %w", off, off+n, len(r.Buf), ErrInvalid)
	}
	return Segment{Region: r, Off: off, Len: n}, nil
}

// Op names the operation a completion reports.
type Op uint8

const (
	OpSend Op = iota + 1
	OpReceive
	OpRead
	OpWrite
	OpFetchAdd
	OpCompareSwap
	// OpRecvRDMAWithImm is a receive that the peer's RDMA WRITE with
	// immediate consumed (IBV_WC_RECV_RDMA_WITH_IMM): Bytes is the
	// WRITE's length, which landed where the WRITE named.
	OpRecvRDMAWithImm
)

func (o Op) String() string {
	switch o {
	case OpSend:
		return "send"
	case OpReceive:
		return "receive"
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFetchAdd:
		return "fetch-add"
	case OpCompareSwap:
		return "compare-swap"
	case OpRecvRDMAWithImm:
		return "receive-rdma-with-imm"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Completion is one finished request (NDK_RESULT_EX): the caller's ID, the
// operation, the bytes received (receives) or transferred, and nil or the
// failure (a flushed request reports ErrFlushed). Imm is the immediate
// data of an OpRecvRDMAWithImm (IBV_WC_WITH_IMM's imm_data, in host
// order: the 32 bits as the wire's big-endian field gives them).
type Completion struct {
	ID    uint64
	Op    Op
	Bytes int
	Imm   uint32
	Err   error
}

// Endpoint is one connected reliable-connection QP with its completion
// queue, as the NDK API offers it. Posting never blocks: a full queue
// returns ErrQueueFull. All methods are called from one goroutine.
type Endpoint interface {
	// Alloc returns n zeroed bytes that Register accepts. The tools take
	// every buffer they register from it: an implementation may register
	// only memory it made (ndk through a daemon registers only memory the
	// daemon maps, ndk.Adapter.Memory).
	Alloc(n int) ([]byte, error)
	// Register makes buf usable in requests on this endpoint (NdkRegisterMr).
	Register(buf []byte, access Access) (Region, error)
	// Send posts a SEND of local (NdkSend). An unsignaled request makes no
	// completion when it succeeds (NDK_OP_FLAG_SILENT_SUCCESS).
	Send(id uint64, local Segment, signaled bool) error
	// Receive posts a receive buffer (NdkReceive); its completion is always
	// signaled and carries the received length.
	Receive(id uint64, local Segment) error
	// Read posts an RDMA READ of local.Len bytes at remoteAddr into local (NdkRead).
	Read(id uint64, local Segment, remoteAddr uint64, rkey uint32, signaled bool) error
	// Write posts an RDMA WRITE of local to remoteAddr (NdkWrite).
	Write(id uint64, local Segment, remoteAddr uint64, rkey uint32, signaled bool) error
	// Poll moves up to len(out) completions into out and returns how many
	// (NdkGetResultsEx). It does not block and must not allocate. It returns
	// ErrDisconnected once the peer has disconnected and every request has
	// completed. A receive completion does not come while a signaled SEND
	// posted before it is unacknowledged, unless a request failed or the
	// peer disconnected: perftest and rping wait for their SEND's
	// completion before they look for the answer (which can overtake the
	// ACK), as perftest's separate send and receive CQs let them; an
	// endpoint opened with ConnParams.Unordered holds nothing back.
	Poll(out []Completion) (int, error)
	// Peek returns the byte at off in r as the peer's RDMA WRITEs have left
	// it. ib_write_lat learns of an arriving WRITE only by polling the last
	// byte of its buffer (no completion exists at the responder); Peek is
	// that poll, ordered after the placement of every WRITE the
	// implementation has executed, so the poll is no data race.
	Peek(r Region, off int) byte
	// Wait blocks until something Poll or Peek would see may have changed
	// (a completion, a peer's WRITE placed, the peer's disconnect) or ctx
	// ends, which it returns. It may return early; it never sleeps through
	// an event that came after the caller's last empty Poll or Peek.
	// Callers spin on Poll and Peek for a while before they wait (Backoff).
	Wait(ctx context.Context) error
	// Close disconnects (DREQ) and releases the QP; requests still queued
	// complete with ErrFlushed first. Closing twice is harmless.
	Close() error
}

// AnyWaiter is the optional extension for tests that load several QPs
// at once (perf -q): WaitAny blocks as Wait does, until something the
// Poll or Peek of any endpoint in eps would see may have changed, or ctx
// ends. eps are endpoints opened through the same Connector or Listener
// as the receiver (the receiver among them or not). One goroutine polls
// them all; an endpoint in eps may not be waited on by another goroutine
// meanwhile. Endpoints without it do not implement it; the tools then
// refuse more than one QP.
type AnyWaiter interface {
	WaitAny(ctx context.Context, eps []Endpoint) error
}

// Atomics is the optional extension for ib_atomic_bw: 8-byte fetch-and-add
// and compare-and-swap on the peer's memory, the original value landing in
// local (8 bytes). Endpoints without atomics do not implement it.
type Atomics interface {
	FetchAdd(id uint64, local Segment, remoteAddr uint64, rkey uint32, add uint64, signaled bool) error
	CompareSwap(id uint64, local Segment, remoteAddr uint64, rkey uint32, compare, swap uint64, signaled bool) error
}

// Immediate is the optional extension for ib_write_bw --write_with_imm:
// an RDMA WRITE with 32 bits of immediate data, which also completes a
// receive at the peer (OpRecvRDMAWithImm); with none posted there, the
// peer holds it up with RNR NAKs. Its own completion is OpWrite.
// Endpoints without it do not implement it.
type Immediate interface {
	WriteImm(id uint64, local Segment, remoteAddr uint64, rkey uint32, imm uint32, signaled bool) error
}

// PeerData is the optional extension for protocols that carry their setup
// in the connection's private data, as rsockets does: the user private data
// of the peer's REQ (on an endpoint a Listener accepts, from Prepare on)
// or REP (on an endpoint a Connector connected), after rdma_cm's header.
// Endpoints without it do not implement it.
type PeerData interface {
	PeerPrivateData() []byte
}

// ConnParams are the rdma_conn_param values a side offers (librdmacm
// rdma_connect / rdma_accept) plus a hook that runs on the new endpoint
// before the connection is established, to post the receives the peer may
// need at once (rping and perftest post theirs before rdma_connect and
// rdma_accept).
type ConnParams struct {
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	PrivateData        []byte
	// SRQ, if set, makes the new endpoint take its receives from this
	// shared receive queue (NdkCreateQpWithSrq): its own Receive fails
	// with ErrInvalid, and a SEND it receives completes on its Poll with
	// the ID of the SRQ's receive it consumed. The SRQ must come from the
	// SRQMaker the connection is opened through.
	SRQ     SRQ
	Prepare func(Endpoint) error
	// UDAnnounce is perftest's UD connection parameters, which its
	// latency test exchanges (perftest_communication.c
	// rdma_cm_send_ud_connection_parameters and
	// rdma_cm_initialize_ud_connection_parameters): a UDConnector's
	// endpoint, once resolved, sends one 4-byte SEND with immediate
	// naming its QPN, and a UDListener's endpoint posts a receive for it
	// ahead of Prepare's, waits for it and sends to its sender from then
	// on. UD endpoints only.
	UDAnnounce bool
	// Served, if set, is called by a UDListener's AcceptUD once the new
	// endpoint answers resolution requests, before AcceptUD waits for
	// one: a server that lets its client resolve only after that (as
	// perftest's server listens on the UDP port space before its sync)
	// never has a client's request refused. UD endpoints only.
	Served func()
	// UC makes the new endpoint's QP an unreliable-connection one
	// (IBV_QPT_UC, perftest's -c UC): SENDs and RDMA WRITEs only, which
	// nothing acknowledges; a message that cannot be placed is dropped.
	UC bool
	// Unordered makes the endpoint's Poll return receive completions as
	// they come, also while a signaled SEND of its own is unacknowledged:
	// perftest's bidirectional send test (run_iter_bi) polls its receive
	// CQ and its send CQ apart, and both sides keep SENDs outstanding
	// while they repost the receives the other's SENDs wait for, which a
	// held receive completion would never let them do.
	Unordered bool
}

// SRQ is a shared receive queue (NdkCreateSrq): receives posted once and
// taken by whichever endpoint made on it (ConnParams.SRQ) receives a SEND
// first. The completion comes from that endpoint's Poll. A receive's
// segment may be in a region registered on any endpoint of the SRQ's
// maker. Receive never blocks: depth receives outstanding (posted and not
// yet completed) make it return ErrQueueFull. One goroutine posts.
type SRQ interface {
	// Receive posts a receive buffer (NdkSrqReceive).
	Receive(id uint64, local Segment) error
	// Close releases the SRQ (NdkCloseSrq) once the endpoints made on it
	// are closed; receives no endpoint took are dropped. Closing twice is
	// harmless.
	Close() error
}

// SRQMaker is implemented by the Connectors and Listeners whose endpoints
// can share a receive queue (perftest --use-srq). Others do not implement
// it; the tools then refuse the option.
type SRQMaker interface {
	// CreateSRQ makes an SRQ of depth receives for endpoints connected
	// through the maker.
	CreateSRQ(depth int) (SRQ, error)
}

// Connector opens connections to one peer address (rdma_resolve_addr,
// rdma_resolve_route, rdma_connect over IB CM).
type Connector interface {
	// Connect connects to the peer's rdma_cm port. A REJ from the peer is
	// returned as a *RejectError.
	Connect(ctx context.Context, port uint16, p ConnParams) (Endpoint, error)
}

// Listener accepts connections on one rdma_cm port (rdma_listen).
type Listener interface {
	// Accept waits for the next REQ and accepts it with p.
	Accept(ctx context.Context, p ConnParams) (Endpoint, error)
	Close() error
}

// RejectError is a connection attempt the peer answered with a CM REJ
// (IBTA 12.6.7); Reason is the REJ reason code.
type RejectError struct {
	Reason uint16
}

// RejectInvalidServiceID is REJ reason 8: nobody listens on that port (yet).
const RejectInvalidServiceID = 8

func (e *RejectError) Error() string {
	return fmt.Sprintf("connection rejected by the peer (CM REJ reason %d)", e.Reason)
}

// Sentinel errors an Endpoint returns.
var (
	ErrInvalid      = errors.New("invalid argument")
	ErrQueueFull    = errors.New("work queue full")
	ErrFlushed      = errors.New("request flushed")
	ErrDisconnected = errors.New("connection closed by the peer")
	ErrAccess       = errors.New("remote access error")
	ErrTooLong      = errors.New("message longer than the receive buffer")
	// ErrRetryExceeded is a request the peer never acknowledged within
	// the retry count (IB_WC_RETRY_EXC_ERR).
	ErrRetryExceeded = errors.New("transport retry count exceeded")
)

// Direct is implemented by the Connectors and Listeners whose device can
// make QPs that are connected out of band, as perftest connects its data
// QPs without -R (ctx_connect: ibv_modify_qp to RTR and RTS with the QPN,
// PSN and GID the peer sent over TCP). Others do not implement it; the
// tools then take rdma_cm only.
type Direct interface {
	// Unconnected creates a QP (RC, or on p.SRQ) and runs p.Prepare on
	// it; it is connected by ConnectTo once the peer's address is known.
	Unconnected(p ConnParams) (OOB, error)
}

// DirectUD is implemented by the Connectors and Listeners that make UD
// endpoints addressed out of band (perftest -c UD without -R: Q_Key
// DEF_QKEY, the peer's QPN and GID from the handshake): ConnectTo on
// one gives its sends the peer's QP as their destination. Such an
// endpoint takes no SRQ and p.UDAnnounce must be false.
type DirectUD interface {
	UnconnectedUD(p ConnParams, qkey uint32) (OOB, error)
}

// OOB is an endpoint that Direct made and that is not yet connected:
// its receives may be posted, nothing may be sent.
type OOB interface {
	Endpoint
	// Local is what the peer needs to connect to it: its QPN, the first
	// PSN it sends and its GID.
	Local() Address
	// ConnectTo connects it to the peer's QP (RTR, then RTS).
	ConnectTo(ctx context.Context, peer Address, o OOBParams) error
}

// Address is one side's QP as an out-of-band exchange gives it.
type Address struct {
	QPN, PSN uint32
	GID      [16]byte
}

// OOBParams are the transport attributes that ibv_modify_qp sets on an
// out-of-band connection.
type OOBParams struct {
	// MTU is the path MTU in bytes.
	MTU int
	// InboundReads is max_dest_rd_atomic, OutboundReads max_rd_atomic.
	InboundReads, OutboundReads int
	// AckTimeout is the local ACK timeout (IB's timeout code t is
	// 4.096 µs x 2^t).
	AckTimeout time.Duration
	// RetryCount and RNRRetry are retry_cnt and rnr_retry (0-7).
	RetryCount, RNRRetry int
	// MinRNRTimer is the wait the QP's RNR NAKs ask for.
	MinRNRTimer time.Duration
}
