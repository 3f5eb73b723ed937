package ndk

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

var opFlagNames = []flagName[OpFlag]{
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

func (f OpFlag) String() string { return flagString(f, opFlagNames) }

// postOp names the initiator calls whose flags NDKPI documents; unlike
// OperationType it tells Send from SendAndInvalidate.
type postOp uint8

const (
	postSend postOp = iota
	postSendAndInvalidate
	postWrite
	postRead
	postBind
	postFastRegister
	postInvalidate
	postAtomic // ndkxdp extension (atomic.go)
)

// postOpFlags lists, per initiator call, the flags NDKPI documents for it
// (NDKPI.md §6 "Accepted by"; seed 003 for Send, seeds 000/004 for
// SendAndInvalidate).
var postOpFlags = [...]struct {
	name     string
	accepted OpFlag
}{
	postSend:              {"send", OpFlagSilentSuccess | OpFlagReadFence | OpFlagSendAndSolicitEvent | OpFlagInline | OpFlagDefer},
	postSendAndInvalidate: {"send and invalidate", OpFlagSilentSuccess | OpFlagReadFence | OpFlagSendAndSolicitEvent | OpFlagInline | OpFlagDefer},
	postWrite:             {"write", OpFlagSilentSuccess | OpFlagReadFence | OpFlagInline | OpFlagDefer},
	postRead:              {"read", OpFlagSilentSuccess | OpFlagReadFence | OpFlagRDMAReadLocalInvalidate | OpFlagDefer},
	postBind:              {"bind", OpFlagSilentSuccess | OpFlagReadFence | OpFlagAllowRemoteRead | OpFlagAllowRemoteWrite | OpFlagDefer},
	postFastRegister: {"fast register", OpFlagSilentSuccess | OpFlagReadFence | OpFlagAllowRemoteRead |
		OpFlagAllowRemoteWrite | OpFlagRDMAReadSink | OpFlagDefer},
	postInvalidate: {"invalidate", OpFlagSilentSuccess | OpFlagReadFence | OpFlagDefer},
	postAtomic:     {"atomic", OpFlagSilentSuccess | OpFlagReadFence | OpFlagDefer},
}

// checkOpFlags rejects flags that op does not accept, and flags whose
// adapter capability is not reported (RDMA_READ_LOCAL_INVALIDATE needs
// AdapterFlagRDMAReadLocalInvalidateSupported, NDKPI.md §6). The QP's post
// calls run it before queueing a request; it allocates only on failure.
func checkOpFlags(op postOp, f OpFlag, adapter AdapterFlag) error {
	if int(op) >= len(postOpFlags) {
		return errorf(StatusInvalidParameter, "post", "unknown operation %d", op)
	}
	accepted := postOpFlags[op].accepted
	if adapter&AdapterFlagRDMAReadLocalInvalidateSupported == 0 {
		accepted &^= OpFlagRDMAReadLocalInvalidate
	}
	if bad := f &^ accepted; bad != 0 {
		return errorf(StatusInvalidParameter, postOpFlags[op].name, "flags %v not accepted (accepted: %v)", bad, accepted)
	}
	return nil
}

// MRFlag is NDK_MR_FLAG_*: the access rights of NdkRegisterMr (NDKPI.md §6,
// seed 001).
type MRFlag uint32

const (
	MRFlagAllowLocalRead   MRFlag = 0x0 // always granted
	MRFlagAllowLocalWrite  MRFlag = 0x1
	MRFlagAllowRemoteRead  MRFlag = 0x2
	MRFlagAllowRemoteWrite MRFlag = 0x5 // includes MRFlagAllowLocalWrite
	MRFlagRDMAReadSink     MRFlag = 0x8

	// mrFlagsKnown is every bit NdkRegisterMr defines.
	mrFlagsKnown = MRFlagAllowLocalWrite | MRFlagAllowRemoteRead | MRFlagAllowRemoteWrite | MRFlagRDMAReadSink |
		MRFlagAllowRemoteAtomic // ndkxdp extension (atomic.go)
)

var mrFlagNames = []flagName[MRFlag]{
	{MRFlagAllowRemoteWrite, "ALLOW_REMOTE_WRITE"},
	{MRFlagAllowRemoteAtomic &^ MRFlagAllowLocalWrite, "ALLOW_REMOTE_ATOMIC"},
	{MRFlagAllowLocalWrite, "ALLOW_LOCAL_WRITE"},
	{MRFlagAllowRemoteRead, "ALLOW_REMOTE_READ"},
	{MRFlagRDMAReadSink, "RDMA_READ_SINK"},
}

func (f MRFlag) String() string {
	if f == MRFlagAllowLocalRead {
		return "ALLOW_LOCAL_READ"
	}
	return flagString(f, mrFlagNames)
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

// AdapterFlag is NDK_ADAPTER_FLAG_*, reported in AdapterInfo.AdapterFlags
// (NDKPI.md §6).
type AdapterFlag uint32

const (
	AdapterFlagInOrderDMASupported              AdapterFlag = 0x1
	AdapterFlagRDMAReadSinkNotRequired          AdapterFlag = 0x2
	AdapterFlagCQInterruptModerationSupported   AdapterFlag = 0x4
	AdapterFlagMultiEngineSupported             AdapterFlag = 0x8
	AdapterFlagRDMAReadLocalInvalidateSupported AdapterFlag = 0x10 // NDKPI 1.2
	AdapterFlagCQResizeSupported                AdapterFlag = 0x100
	AdapterFlagLoopbackConnectionsSupported     AdapterFlag = 0x10000
)

var adapterFlagNames = []flagName[AdapterFlag]{
	{AdapterFlagInOrderDMASupported, "IN_ORDER_DMA_SUPPORTED"},
	{AdapterFlagRDMAReadSinkNotRequired, "RDMA_READ_SINK_NOT_REQUIRED"},
	{AdapterFlagCQInterruptModerationSupported, "CQ_INTERRUPT_MODERATION_SUPPORTED"},
	{AdapterFlagMultiEngineSupported, "MULTI_ENGINE_SUPPORTED"},
	{AdapterFlagRDMAReadLocalInvalidateSupported, "RDMA_READ_LOCAL_INVALIDATE_SUPPORTED"},
	{AdapterFlagCQResizeSupported, "CQ_RESIZE_SUPPORTED"},
	{AdapterFlagLoopbackConnectionsSupported, "LOOPBACK_CONNECTIONS_SUPPORTED"},
}

func (f AdapterFlag) String() string { return flagString(f, adapterFlagNames) }

// OperationType is NDK_OPERATION_TYPE, the Type of a ResultEx (NDKPI.md §5;
// values from ndkpi.h only).
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
	}
	return fmt.Sprintf("OperationType(%#x)", uint32(t))
}

// RDMATechnology is NDK_RDMA_TECHNOLOGY (NDKPI.md §5, from the Windows PDB
// symbols).
type RDMATechnology uint32

const (
	RDMAUndefined  RDMATechnology = 0
	RDMAIWarp      RDMATechnology = 1
	RDMAInfiniBand RDMATechnology = 2
	RDMARoCE       RDMATechnology = 3
	RDMARoCEv2     RDMATechnology = 4
	rdmaMax        RDMATechnology = 5
)

func (t RDMATechnology) String() string {
	switch t {
	case RDMAUndefined:
		return "Undefined"
	case RDMAIWarp:
		return "iWARP"
	case RDMAInfiniBand:
		return "InfiniBand"
	case RDMARoCE:
		return "RoCE"
	case RDMARoCEv2:
		return "RoCEv2"
	}
	return fmt.Sprintf("RDMATechnology(%d)", uint32(t))
}

// ObjectType is NDK_OBJECT_TYPE (NDKPI.md §2).
type ObjectType uint32

const (
	ObjectTypeUndefined      ObjectType = 0
	ObjectTypeAdapter        ObjectType = 1
	ObjectTypeQP             ObjectType = 2
	ObjectTypeCQ             ObjectType = 3
	ObjectTypeMR             ObjectType = 4
	ObjectTypeMW             ObjectType = 5
	ObjectTypePD             ObjectType = 6
	ObjectTypeSharedEndpoint ObjectType = 7
	ObjectTypeConnector      ObjectType = 8
	ObjectTypeListener       ObjectType = 9
	ObjectTypeSRQ            ObjectType = 10
)

var objectTypeNames = [...]string{
	"Undefined", "Adapter", "QP", "CQ", "MR", "MW", "PD", "SharedEndpoint", "Connector", "Listener", "SRQ",
}

func (t ObjectType) String() string {
	if int(t) < len(objectTypeNames) {
		return objectTypeNames[t]
	}
	return fmt.Sprintf("ObjectType(%d)", uint32(t))
}

// Version is NDK_VERSION.
type Version struct {
	Major, Minor uint16
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

type flagName[F ~uint32] struct {
	flag F
	name string
}

// flagString prints a bit set as NAME|NAME, with any bits no name covers
// in hex; composite names must come before their parts in names.
func flagString[F ~uint32](f F, names []flagName[F]) string {
	if f == 0 {
		return "0"
	}
	var parts []string
	rest := f
	for _, n := range names {
		if rest&n.flag == n.flag {
			parts = append(parts, n.name)
			rest &^= n.flag
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(rest)))
	}
	return strings.Join(parts, "|")
}
