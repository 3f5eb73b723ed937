package ndk

import (
	"fmt"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// OpFlag is NDK_OP_FLAG_*: per-request flags of Send, Read, Write, Bind,
// FastRegister, Invalidate and SendAndInvalidate (NDKPI.md §6, values from
// ndkpi.h).
type OpFlag = ndkpi.OpFlag

const (
	OpFlagSilentSuccess           OpFlag = ndkpi.OpFlagSilentSuccess       // no CQ entry on success; failures still complete
	OpFlagReadFence               OpFlag = ndkpi.OpFlagReadFence           // wait for every earlier RDMA read on the QP
	OpFlagSendAndSolicitEvent     OpFlag = ndkpi.OpFlagSendAndSolicitEvent // the peer's SOLICITED arm fires on this receive
	OpFlagAllowRemoteRead         OpFlag = ndkpi.OpFlagAllowRemoteRead
	OpFlagAllowLocalWrite         OpFlag = ndkpi.OpFlagAllowLocalWrite
	OpFlagAllowRemoteWrite        OpFlag = ndkpi.OpFlagAllowRemoteWrite // includes OpFlagAllowLocalWrite
	OpFlagInline                  OpFlag = ndkpi.OpFlagInline
	OpFlagRDMAReadSink            OpFlag = ndkpi.OpFlagRDMAReadSink
	OpFlagRDMAReadLocalInvalidate OpFlag = ndkpi.OpFlagRDMAReadLocalInvalidate // ndkpi.h value; the Read doc page's 0x200 is DEFER (NDKPI.md §10)
	OpFlagDefer                   OpFlag = ndkpi.OpFlagDefer                   // NDKPI 1.2: batch the doorbell
)

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
	postAtomic             // ndkxdp extension (atomic.go)
	postWriteWithImmediate // ndkxdp extension (immediate.go)
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
	// A WRITE with immediate completes a receive at the peer, which
	// SEND_AND_SOLICIT_EVENT makes solicited, as for a SEND.
	postWriteWithImmediate: {"write with immediate", OpFlagSilentSuccess | OpFlagReadFence | OpFlagSendAndSolicitEvent | OpFlagInline | OpFlagDefer},
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

var mrFlagNames = []ndkpi.FlagName[MRFlag]{
	{Flag: MRFlagAllowRemoteWrite, Name: "ALLOW_REMOTE_WRITE"},
	{Flag: MRFlagAllowRemoteAtomic &^ MRFlagAllowLocalWrite, Name: "ALLOW_REMOTE_ATOMIC"},
	{Flag: MRFlagAllowLocalWrite, Name: "ALLOW_LOCAL_WRITE"},
	{Flag: MRFlagAllowRemoteRead, Name: "ALLOW_REMOTE_READ"},
	{Flag: MRFlagRDMAReadSink, Name: "RDMA_READ_SINK"},
}

func (f MRFlag) String() string {
	if f == MRFlagAllowLocalRead {
		return "ALLOW_LOCAL_READ"
	}
	return ndkpi.FlagString(f, mrFlagNames)
}

// CQNotify is NDK_CQ_NOTIFY_*: what an NdkArmCq waits for (NDKPI.md §6, §8).
type CQNotify = ndkpi.CQNotify

const (
	CQNotifyErrors    CQNotify = ndkpi.CQNotifyErrors    // CQ errors only: overrun, fatal failure
	CQNotifyAny       CQNotify = ndkpi.CQNotifyAny       // the next completion
	CQNotifySolicited CQNotify = ndkpi.CQNotifySolicited // a receive of a solicited send, or any error completion
)

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

var adapterFlagNames = []ndkpi.FlagName[AdapterFlag]{
	{Flag: AdapterFlagInOrderDMASupported, Name: "IN_ORDER_DMA_SUPPORTED"},
	{Flag: AdapterFlagRDMAReadSinkNotRequired, Name: "RDMA_READ_SINK_NOT_REQUIRED"},
	{Flag: AdapterFlagCQInterruptModerationSupported, Name: "CQ_INTERRUPT_MODERATION_SUPPORTED"},
	{Flag: AdapterFlagMultiEngineSupported, Name: "MULTI_ENGINE_SUPPORTED"},
	{Flag: AdapterFlagRDMAReadLocalInvalidateSupported, Name: "RDMA_READ_LOCAL_INVALIDATE_SUPPORTED"},
	{Flag: AdapterFlagCQResizeSupported, Name: "CQ_RESIZE_SUPPORTED"},
	{Flag: AdapterFlagLoopbackConnectionsSupported, Name: "LOOPBACK_CONNECTIONS_SUPPORTED"},
}

func (f AdapterFlag) String() string { return ndkpi.FlagString(f, adapterFlagNames) }

// OperationType is NDK_OPERATION_TYPE, the Type of a ResultEx (NDKPI.md §5;
// values from ndkpi.h only; atomic.go adds the extension's two).
type OperationType = ndkpi.OperationType

const (
	OpReceive              OperationType = ndkpi.OpReceive
	OpReceiveAndInvalidate OperationType = ndkpi.OpReceiveAndInvalidate // a receive whose send carried an invalidate token
	OpSend                 OperationType = ndkpi.OpSend                 // also NdkSendAndInvalidate's initiator completion (seed 000/004)
	OpFastRegister         OperationType = ndkpi.OpFastRegister
	OpBind                 OperationType = ndkpi.OpBind
	OpInvalidate           OperationType = ndkpi.OpInvalidate
	OpRead                 OperationType = ndkpi.OpRead
	OpWrite                OperationType = ndkpi.OpWrite
)

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
