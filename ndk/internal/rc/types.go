package rc

import (
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// SGE names bytes of registered memory: an address inside a region and the
// region's local token. Its layout matches ndk.SGE field for field, so the
// public API passes its slices through without copying.
type SGE struct {
	Addr   uint64
	Length uint32
	Token  uint32
}

// MaxSGE is the most SGEs one work request carries. A WQE holds its
// QP's limit of them in room made when the QP is created, so that
// posting copies and never allocates.
const MaxSGE = 16

// MaxInline is the most bytes a request carries inline (copied into its
// WQE at post time).
const MaxInline = 256

// Op is an initiator operation.
type Op uint8

const (
	OpSend Op = iota + 1
	OpSendInvalidate
	OpWrite
	OpRead
	// OpCompareSwap and OpFetchAdd are the IB atomics (ROCEV2.md 1.4,
	// opcodes 0x13 and 0x14): an ndkxdp extension, since NDKPI has no
	// atomic verb. The local SGL is the 8 bytes the original value lands
	// in, host byte order as verbs delivers it.
	OpCompareSwap
	OpFetchAdd
	// Local operations (local.go): posted on the send queue, no packet on
	// the wire, retired in order with the other requests.
	OpFastRegister // NdkFastRegister, IB_WR_REG_MR
	OpBind         // NdkBind, IB_WR_BIND_MW
	OpInvalidate   // NdkInvalidate, IB_WR_LOCAL_INV
	// OpSendImm and OpWriteImm carry 32 bits of immediate data to the
	// peer's receive completion (ROCEV2.md 1.4: SEND_*_WITH_IMMEDIATE,
	// RDMA_WRITE_*_WITH_IMMEDIATE): an ndkxdp extension, verbs'
	// IBV_WR_SEND_WITH_IMM and IBV_WR_RDMA_WRITE_WITH_IMM. A WRITE with
	// immediate consumes a receive at the peer. They follow the local
	// operations so that the values of the others stay those of
	// proto's records.
	OpSendImm
	OpWriteImm
)

// responded reports whether the peer answers op with data of its own (READ
// responses, ATOMIC_ACKNOWLEDGE): such requests count against the
// outbound read limit (IBTA 9.5: initiator depth covers READs and atomics)
// and are retired only by their response.
func (op Op) responded() bool { return op == OpRead || op.atomic() }

// local reports whether op is executed locally, without a packet.
func (op Op) local() bool { return op >= OpFastRegister && op <= OpInvalidate }

// write reports whether op is an RDMA WRITE (a RETH in its first packet).
func (op Op) write() bool { return op == OpWrite || op == OpWriteImm }

// immediate reports whether op's last packet carries ImmDt.
func (op Op) immediate() bool { return op == OpSendImm || op == OpWriteImm }

func (op Op) atomic() bool { return op == OpCompareSwap || op == OpFetchAdd }

// onUC reports whether a UC QP carries op: SEND and RDMA WRITE, with
// immediate too, and the local operations (IBTA table 37: UC has no READ,
// atomics or SEND with invalidate).
func (op Op) onUC() bool {
	return op == OpSend || op == OpSendImm || op == OpWrite || op == OpWriteImm || op.local()
}

// ProviderErrorCode values: the ib_wc_status a verbs provider would report
// (torvalds/linux include/rdma/ib_verbs.h enum ib_wc_status), so a failed
// completion says which IB error it was behind its NTSTATUS.
const (
	wcLocLenErr      = 1
	wcLocQPOpErr     = 2
	wcLocProtErr     = 4
	wcWRFlushErr     = 5
	wcBadRespErr     = 7
	wcRemInvReqErr   = 9
	wcRemAccessErr   = 10
	wcRemOpErr       = 11
	wcRetryExcErr    = 12
	wcRNRRetryExcErr = 13
)

// PollMode is how an engine waits for work.
type PollMode uint8

const (
	// PollAdaptive spins for a bounded number of idle loops, then sleeps
	// in Port.Wait until a frame, a doorbell or the next timer.
	PollAdaptive PollMode = iota
	// PollBusy never sleeps: lowest latency, one core per engine.
	PollBusy
	// PollProgress is consumer-driven progress (progress.go): a consumer
	// whose CQ poll finds nothing, or whose post finds no turn running,
	// runs the engine's turn itself on its own thread (Engine.Progress);
	// the engine goroutine naps while consumers drive it and is
	// PollAdaptive when they do not.
	PollProgress
)

// Endpoint is one side of a connection as exchanged out of band (the way
// ibv_rc_pingpong swaps LID/QPN/PSN): address, MAC, QP number and the first
// PSN that side sends.
type Endpoint struct {
	IP  netip.Addr
	MAC rocev2.MAC
	QPN uint32
	PSN uint32
}

// ConnParams are the transport parameters of a connection.
type ConnParams struct {
	Local, Remote Endpoint
	// PathMTU bounds the payload of each packet.
	PathMTU rocev2.MTU
	// InboundReadLimit is how many READs the peer may have outstanding at
	// us (responder resources); OutboundReadLimit how many we may issue.
	InboundReadLimit, OutboundReadLimit int
	// AckTimeout is how long an unacknowledged packet waits before
	// go-back-N; RetryCount how many such retries (0-7; 7 means seven, as
	// IBTA says, not infinite as rxe treats it).
	AckTimeout time.Duration
	RetryCount int
	// RNRRetry is how many RNR NAKs to wait out (0-7; 7 is infinite).
	RNRRetry int
	// MinRNRTimer is what our RNR NAKs ask the peer to wait.
	MinRNRTimer rocev2.RNRTimer
	// Traffic is the connection's traffic class; nil takes the engine's
	// (Config.Traffic).
	Traffic *TrafficClass
}

// State is a QP's state as the consumer sees it.
type State uint32

const (
	StateInit      State = iota // created: receives may be posted
	StateConnected              // RTS: both directions run
	StateError                  // failed or flushed: everything completes CANCELLED
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateInit:
		return "init"
	case StateConnected:
		return "connected"
	case StateError:
		return "error"
	case StateClosed:
		return "closed"
	}
	return "unknown"
}
