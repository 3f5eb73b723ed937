package ndk

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// The immediate-data extension. NDKPI has no immediate data (NDK_RESULT_EX
// has no field for it); RoCE peers use it: SEND and RDMA WRITE with
// immediate (ROCEV2.md 1.4: SEND_LAST/ONLY_WITH_IMMEDIATE 0x03/0x05,
// RDMA_WRITE_LAST/ONLY_WITH_IMMEDIATE 0x09/0x0B), for instance NCCL,
// UCX and perftest's --write_with_imm. ndkxdp offers them as an extension
// of its own, outside NDKPI, as verbs has them: two QP methods, and a
// flag and a field in ResultEx for the receive that carries the
// immediate. A WRITE with immediate consumes a receive at the peer, as in
// verbs: with none posted the peer answers RNR NAKs until one is.

// ResultFlag says what else a ResultEx carries (verbs' ibv_wc_flags).
type ResultFlag uint32

const (
	// ResultWithImmediate: Immediate holds the immediate data of the SEND
	// or WRITE with immediate that this receive completed (verbs'
	// IBV_WC_WITH_IMM).
	ResultWithImmediate ResultFlag = 1

	// OpReceiveWriteWithImmediate is the ResultEx Type of a receive that
	// a peer's WriteWithImmediate consumed (verbs'
	// IBV_WC_RECV_RDMA_WITH_IMM): BytesTransferred is the WRITE's length,
	// which went to the memory the WRITE named, and the receive's own
	// buffer is untouched (rxe's do_complete reports the same).
	OpReceiveWriteWithImmediate OperationType = ndkpi.OpReceiveWriteWithImmediate
)

// SendWithImmediate is Send with 32 bits of immediate data, which reach
// the peer's receive completion (ndkxdp extension; verbs'
// IBV_WR_SEND_WITH_IMM): the peer's ResultEx has Type OpReceive,
// ResultWithImmediate and Immediate. immediate is a number: it travels
// big-endian, as the ImmDt header does, and a verbs peer reads it with
// ntohl(wc.imm_data). Flags, failures and the initiator's completion
// (Type OpSend) are Send's. Allocates nothing when it succeeds.
func (q *QP) SendWithImmediate(ctx any, sgl []SGE, flags OpFlag, immediate uint32) error {
	wr := rc.SendWR{Op: rc.OpSendImm, Flags: flags, Context: ctx, SGL: engineSGL(sgl), Imm: immediate}
	return q.post("send with immediate", postSend, &wr)
}

// WriteWithImmediate is Write followed, once its bytes are placed, by a
// receive completion at the peer carrying immediate (ndkxdp extension;
// verbs' IBV_WR_RDMA_WRITE_WITH_IMM). It consumes one of the peer's
// receives: the peer's ResultEx has Type OpReceiveWriteWithImmediate,
// BytesTransferred the WRITE's length, ResultWithImmediate and
// Immediate. sgl may be empty (a zero-length WRITE that only
// notifies). Flags are Write's plus SEND_AND_SOLICIT_EVENT, which makes
// the peer's receive solicited. Failures and the initiator's completion
// (Type OpWrite) are Write's; a peer with no receive posted holds it up
// with RNR NAKs, which the connection's RNR retry count bounds.
// Allocates nothing when it succeeds.
func (q *QP) WriteWithImmediate(ctx any, sgl []SGE, remoteAddress uint64, remoteToken uint32, flags OpFlag, immediate uint32) error {
	wr := rc.SendWR{Op: rc.OpWriteImm, Flags: flags, Context: ctx, SGL: engineSGL(sgl),
		RemoteAddr: remoteAddress, RemoteToken: remoteToken, Imm: immediate}
	return q.post("write with immediate", postWriteWithImmediate, &wr)
}
