package ndkpi

import (
	"fmt"
	"strings"
)

// OpFlag is NDK_OP_FLAG_*: per-request flags of Send, Read, Write, Bind,
// FastRegister, Invalidate and SendAndInvalidate (NDKPI.md §6, values from
// ndkpi.h).
type OpFlag uint32

const (
	OpFlagSilentSuccess           OpFlag = 0x001 // no CQ entry on success; failures still complete
	OpFlagReadFence               OpFlag = 0x002 // wait for every earlier RDMA read on the QP
	OpFlagSendAndSolicitEvent     OpFlag = 0x004 // the peer's SOLICITED arm fires on this receive
	OpFlagAllowRemoteRead         OpFlag = 0x008
	OpFlagAllowLocalWrite         OpFlag = 0x010
	OpFlagAllowRemoteWrite        OpFlag = 0x030 // includes OpFlagAllowLocalWrite
	OpFlagInline                  OpFlag = 0x040
	OpFlagRDMAReadSink            OpFlag = 0x080
	OpFlagRDMAReadLocalInvalidate OpFlag = 0x100 // ndkpi.h value; the Read doc page's 0x200 is DEFER (NDKPI.md §10)
	OpFlagDefer                   OpFlag = 0x200 // NDKPI 1.2: batch the doorbell
)

var opFlagNames = []FlagName[OpFlag]{
	// Composites first, so 0x30 prints as ALLOW_REMOTE_WRITE, not as two flags.
	{OpFlagAllowRemoteWrite, "ALLOW_REMOTE_WRITE"},
	{OpFlagSilentSuccess, "SILENT_SUCCESS"},
	{OpFlagReadFence, "READ_FENCE"},
	{OpFlagSendAndSolicitEvent, "SEND_AND_SOLICIT_EVENT"},
	{OpFlagAllowRemoteRead, "ALLOW_REMOTE_READ"},
	{OpFlagAllowLocalWrite, "ALLOW_LOCAL_WRITE"},
	{OpFlagInline, "INLINE"},
	{OpFlagRDMAReadSink, "RDMA_READ_SINK"},
	{OpFlagRDMAReadLocalInvalidate, "RDMA_READ_LOCAL_INVALIDATE"},
	{OpFlagDefer, "DEFER"},
}

func (f OpFlag) String() string { return FlagString(f, opFlagNames) }

// OperationType is NDK_OPERATION_TYPE, the Type of a completion (NDKPI.md
// §5; values from ndkpi.h, plus the atomic extension's two).
type OperationType uint32

const (
	OpReceive              OperationType = 1
	OpReceiveAndInvalidate OperationType = 0x8001 // a receive whose send carried an invalidate token
	OpSend                 OperationType = 2      // also NdkSendAndInvalidate's initiator completion (seed 000/004)
	OpFastRegister         OperationType = 4
	OpBind                 OperationType = 8
	OpInvalidate           OperationType = 16
	OpRead                 OperationType = 32
	OpWrite                OperationType = 64

	// OpCompareAndSwap and OpFetchAndAdd are the completion types of the
	// atomic extension (ndkxdp values: NDK_OPERATION_TYPE has no atomics;
	// they stay clear of ndkpi.h's bits and of ReceiveAndInvalidate).
	OpCompareAndSwap OperationType = 0x10000
	OpFetchAndAdd    OperationType = 0x20000

	// OpReceiveWriteWithImmediate is the receive completion that a peer's
	// RDMA WRITE with immediate consumed (immediate-data extension, verbs'
	// IBV_WC_RECV_RDMA_WITH_IMM): its bytes went to the WRITE's target,
	// not to the receive buffer.
	OpReceiveWriteWithImmediate OperationType = 0x40000
)

func (t OperationType) String() string {
	switch t {
	case OpReceive:
		return "Receive"
	case OpReceiveAndInvalidate:
		return "ReceiveAndInvalidate"
	case OpSend:
		return "Send"
	case OpFastRegister:
		return "FastRegister"
	case OpBind:
		return "Bind"
	case OpInvalidate:
		return "Invalidate"
	case OpRead:
		return "Read"
	case OpWrite:
		return "Write"
	case OpCompareAndSwap:
		return "CompareAndSwap"
	case OpFetchAndAdd:
		return "FetchAndAdd"
	case OpReceiveWriteWithImmediate:
		return "ReceiveWriteWithImmediate"
	}
	return fmt.Sprintf("OperationType(%#x)", uint32(t))
}

// CQNotify is NDK_CQ_NOTIFY_*: what an NdkArmCq waits for (NDKPI.md §6, §8).
type CQNotify uint32

const (
	CQNotifyErrors    CQNotify = 0 // CQ errors only: overrun, fatal failure
	CQNotifyAny       CQNotify = 1 // the next completion
	CQNotifySolicited CQNotify = 2 // a receive of a solicited send, or any error completion
)

func (n CQNotify) String() string {
	switch n {
	case CQNotifyErrors:
		return "ERRORS"
	case CQNotifyAny:
		return "ANY"
	case CQNotifySolicited:
		return "SOLICITED"
	}
	return fmt.Sprintf("CQNotify(%d)", uint32(n))
}

// FlagName names one bit, or one composite of bits, of a flag set.
type FlagName[F ~uint32] struct {
	Flag F
	Name string
}

// FlagString prints a bit set as NAME|NAME, with any bits no name covers
// in hex; composite names must come before their parts in names.
func FlagString[F ~uint32](f F, names []FlagName[F]) string {
	if f == 0 {
		return "0"
	}
	var parts []string
	rest := f
	for _, n := range names {
		if rest&n.Flag == n.Flag {
			parts = append(parts, n.Name)
			rest &^= n.Flag
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(rest)))
	}
	return strings.Join(parts, "|")
}
