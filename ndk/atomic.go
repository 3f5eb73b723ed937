package ndk

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// The atomic extension. NDKPI has no atomic verb (NDK 1.2 and 2.x define
// none); RoCE peers use the InfiniBand atomics (ROCEV2.md 1.4: CMP_SWAP
// 0x13, FETCH_ADD 0x14, ATOMIC_ACKNOWLEDGE 0x12), for instance perftest's
// ib_atomic_bw. ndkxdp offers them as an extension of its own, outside
// NDKPI: an MR flag that lets peers run atomics on a region, two QP
// methods, and two completion types. Everything else follows Read.

const (
	// MRFlagAllowRemoteAtomic lets the peer run CompareAndSwap and
	// FetchAndAdd on 8-byte aligned words of the MR (ndkxdp extension,
	// verbs' IBV_ACCESS_REMOTE_ATOMIC). It includes MRFlagAllowLocalWrite,
	// as MRFlagAllowRemoteWrite does, because the peer changes the memory.
	MRFlagAllowRemoteAtomic MRFlag = 0x101

	// OpCompareAndSwap and OpFetchAndAdd are the ResultEx Types of the
	// atomic extension's completions (ndkxdp values, outside ndkpi.h's).
	OpCompareAndSwap OperationType = ndkpi.OpCompareAndSwap
	OpFetchAndAdd    OperationType = ndkpi.OpFetchAndAdd
)

// CompareAndSwap posts an atomic compare-and-swap on the 8-byte word at
// remoteAddress in the peer's memory (ndkxdp extension; IB CMP_SWAP): if
// the word equals compare it becomes swap; either way the value it held
// before lands in result, which must be one 8-byte SGE with local write, in
// host byte order. remoteAddress must be 8-byte aligned and remoteToken
// must name an MR with MRFlagAllowRemoteAtomic.
//
// The peer executes it atomically with respect to every other atomic on
// the word, from any QP, and never twice: a retransmitted request is
// answered from the saved result. Atomics count against the connection's
// outbound read limit, like Read. Flags: SILENT_SUCCESS, READ_FENCE, DEFER.
// The completion has Type OpCompareAndSwap.
//
// It fails inline like Read, and with STATUS_INVALID_PARAMETER when result
// is not one 8-byte SGE. The peer refusing the token, bounds or right
// completes it with STATUS_ACCESS_VIOLATION; a misaligned address with
// STATUS_REMOTE_RESOURCES (IB invalid request); both fail the connection.
// Allocates nothing when it succeeds.
func (q *QP) CompareAndSwap(ctx any, result SGE, remoteAddress uint64, remoteToken uint32, compare, swap uint64, flags OpFlag) error {
	q.atomicSGL[0] = rc.SGE(result)
	wr := rc.SendWR{Op: rc.OpCompareSwap, Flags: flags, Context: ctx, SGL: q.atomicSGL[:],
		RemoteAddr: remoteAddress, RemoteToken: remoteToken, Compare: compare, SwapAdd: swap}
	return q.post("compare and swap", postAtomic, &wr)
}

// FetchAndAdd posts an atomic fetch-and-add of add to the 8-byte word at
// remoteAddress in the peer's memory (ndkxdp extension; IB FETCH_ADD); the
// value before the addition lands in result. Everything else is as for
// CompareAndSwap; the completion has Type OpFetchAndAdd.
func (q *QP) FetchAndAdd(ctx any, result SGE, remoteAddress uint64, remoteToken uint32, add uint64, flags OpFlag) error {
	q.atomicSGL[0] = rc.SGE(result)
	wr := rc.SendWR{Op: rc.OpFetchAdd, Flags: flags, Context: ctx, SGL: q.atomicSGL[:],
		RemoteAddr: remoteAddress, RemoteToken: remoteToken, SwapAdd: add}
	return q.post("fetch and add", postAtomic, &wr)
}
