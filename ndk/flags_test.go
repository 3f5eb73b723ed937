package ndk

import (
	"errors"
	"testing"
)

// The tests below pin every numeric value to NDKPI.md §2, §5 and §6.

func TestOpFlagValues(t *testing.T) {
	for _, tc := range []struct {
		f    OpFlag
		want uint32
		name string
	}{
		{OpFlagSilentSuccess, 0x001, "SILENT_SUCCESS"},
		{OpFlagReadFence, 0x002, "READ_FENCE"},
		{OpFlagSendAndSolicitEvent, 0x004, "SEND_AND_SOLICIT_EVENT"},
		{OpFlagAllowRemoteRead, 0x008, "ALLOW_REMOTE_READ"},
		{OpFlagAllowLocalWrite, 0x010, "ALLOW_LOCAL_WRITE"},
		{OpFlagAllowRemoteWrite, 0x030, "ALLOW_REMOTE_WRITE"},
		{OpFlagInline, 0x040, "INLINE"},
		{OpFlagRDMAReadSink, 0x080, "RDMA_READ_SINK"},
		{OpFlagRDMAReadLocalInvalidate, 0x100, "RDMA_READ_LOCAL_INVALIDATE"},
		{OpFlagDefer, 0x200, "DEFER"},
	} {
		if uint32(tc.f) != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, uint32(tc.f), tc.want)
		}
		if tc.f.String() != tc.name {
			t.Errorf("%#x prints %q, want %q", tc.want, tc.f.String(), tc.name)
		}
	}
	if OpFlagAllowRemoteWrite&OpFlagAllowLocalWrite != OpFlagAllowLocalWrite {
		t.Error("ALLOW_REMOTE_WRITE does not include ALLOW_LOCAL_WRITE")
	}
	if got := (OpFlagSilentSuccess | OpFlagDefer | 0x4000).String(); got != "SILENT_SUCCESS|DEFER|0x4000" {
		t.Errorf("combined flags print %q", got)
	}
	if got := OpFlag(0).String(); got != "0" {
		t.Errorf("no flags print %q", got)
	}
}

func TestMRFlagValues(t *testing.T) {
	for _, tc := range []struct {
		f    MRFlag
		want uint32
		name string
	}{
		{MRFlagAllowLocalRead, 0x0, "ALLOW_LOCAL_READ"},
		{MRFlagAllowLocalWrite, 0x1, "ALLOW_LOCAL_WRITE"},
		{MRFlagAllowRemoteRead, 0x2, "ALLOW_REMOTE_READ"},
		{MRFlagAllowRemoteWrite, 0x5, "ALLOW_REMOTE_WRITE"},
		{MRFlagRDMAReadSink, 0x8, "RDMA_READ_SINK"},
	} {
		if uint32(tc.f) != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, uint32(tc.f), tc.want)
		}
		if tc.f.String() != tc.name {
			t.Errorf("%#x prints %q, want %q", tc.want, tc.f.String(), tc.name)
		}
	}
	if got := (MRFlagAllowRemoteWrite | MRFlagAllowRemoteRead).String(); got != "ALLOW_REMOTE_WRITE|ALLOW_REMOTE_READ" {
		t.Errorf("0x7 prints %q", got)
	}
}

func TestCQNotifyValues(t *testing.T) {
	for _, tc := range []struct {
		n    CQNotify
		want uint32
		name string
	}{
		{CQNotifyErrors, 0, "ERRORS"},
		{CQNotifyAny, 1, "ANY"},
		{CQNotifySolicited, 2, "SOLICITED"},
	} {
		if uint32(tc.n) != tc.want || tc.n.String() != tc.name {
			t.Errorf("%s = %d (%q), want %d", tc.name, uint32(tc.n), tc.n.String(), tc.want)
		}
	}
}

func TestAdapterFlagValues(t *testing.T) {
	for _, tc := range []struct {
		f    AdapterFlag
		want uint32
		name string
	}{
		{AdapterFlagInOrderDMASupported, 0x1, "IN_ORDER_DMA_SUPPORTED"},
		{AdapterFlagRDMAReadSinkNotRequired, 0x2, "RDMA_READ_SINK_NOT_REQUIRED"},
		{AdapterFlagCQInterruptModerationSupported, 0x4, "CQ_INTERRUPT_MODERATION_SUPPORTED"},
		{AdapterFlagMultiEngineSupported, 0x8, "MULTI_ENGINE_SUPPORTED"},
		{AdapterFlagRDMAReadLocalInvalidateSupported, 0x10, "RDMA_READ_LOCAL_INVALIDATE_SUPPORTED"},
		{AdapterFlagCQResizeSupported, 0x100, "CQ_RESIZE_SUPPORTED"},
		{AdapterFlagLoopbackConnectionsSupported, 0x10000, "LOOPBACK_CONNECTIONS_SUPPORTED"},
	} {
		if uint32(tc.f) != tc.want || tc.f.String() != tc.name {
			t.Errorf("%s = %#x (%q), want %#x", tc.name, uint32(tc.f), tc.f.String(), tc.want)
		}
	}
}

func TestOperationTypeValues(t *testing.T) {
	for _, tc := range []struct {
		op   OperationType
		want uint32
		name string
	}{
		{OpReceive, 1, "Receive"},
		{OpReceiveAndInvalidate, 0x8001, "ReceiveAndInvalidate"},
		{OpSend, 2, "Send"},
		{OpFastRegister, 4, "FastRegister"},
		{OpBind, 8, "Bind"},
		{OpInvalidate, 16, "Invalidate"},
		{OpRead, 32, "Read"},
		{OpWrite, 64, "Write"},
	} {
		if uint32(tc.op) != tc.want || tc.op.String() != tc.name {
			t.Errorf("%s = %#x (%q), want %#x", tc.name, uint32(tc.op), tc.op.String(), tc.want)
		}
	}
	if got := OperationType(3).String(); got != "OperationType(0x3)" {
		t.Errorf("unknown type prints %q", got)
	}
}

func TestRdmaTechnologyValues(t *testing.T) {
	for _, tc := range []struct {
		r    RDMATechnology
		want uint32
		name string
	}{
		{RDMAUndefined, 0, "Undefined"},
		{RDMAIWarp, 1, "iWARP"},
		{RDMAInfiniBand, 2, "InfiniBand"},
		{RDMARoCE, 3, "RoCE"},
		{RDMARoCEv2, 4, "RoCEv2"},
	} {
		if uint32(tc.r) != tc.want || tc.r.String() != tc.name {
			t.Errorf("%s = %d (%q), want %d", tc.name, uint32(tc.r), tc.r.String(), tc.want)
		}
	}
	if uint32(rdmaMax) != 5 {
		t.Errorf("NdkMaxTechnology = %d, want 5", rdmaMax)
	}
}

func TestObjectTypeValues(t *testing.T) {
	for _, tc := range []struct {
		o    ObjectType
		want uint32
		name string
	}{
		{ObjectTypeUndefined, 0, "Undefined"},
		{ObjectTypeAdapter, 1, "Adapter"},
		{ObjectTypeQP, 2, "QP"},
		{ObjectTypeCQ, 3, "CQ"},
		{ObjectTypeMR, 4, "MR"},
		{ObjectTypeMW, 5, "MW"},
		{ObjectTypePD, 6, "PD"},
		{ObjectTypeSharedEndpoint, 7, "SharedEndpoint"},
		{ObjectTypeConnector, 8, "Connector"},
		{ObjectTypeListener, 9, "Listener"},
		{ObjectTypeSRQ, 10, "SRQ"},
	} {
		if uint32(tc.o) != tc.want || tc.o.String() != tc.name {
			t.Errorf("%s = %d (%q), want %d", tc.name, uint32(tc.o), tc.o.String(), tc.want)
		}
	}
	if got := ObjectType(11).String(); got != "ObjectType(11)" {
		t.Errorf("NdkObjectTypeMax prints %q", got)
	}
}

func TestVersionString(t *testing.T) {
	if got := (Version{Major: 2, Minor: 1}).String(); got != "2.1" {
		t.Errorf("Version{2,1} prints %q", got)
	}
}

// TestSeedSend_AcceptedFlags and TestSeedSendAndInvalidate_AcceptedFlags:
// seeds 003 and 000/004 list SILENT_SUCCESS, READ_FENCE,
// SEND_AND_SOLICIT_EVENT, INLINE and DEFER as the supported flags; every
// other bit is refused with STATUS_INVALID_PARAMETER.
func TestSeedSend_AcceptedFlags(t *testing.T) { testSendFlags(t, postSend) }

func TestSeedSendAndInvalidate_AcceptedFlags(t *testing.T) {
	testSendFlags(t, postSendAndInvalidate)
}

func testSendFlags(t *testing.T, op postOp) {
	t.Helper()
	documented := []OpFlag{OpFlagSilentSuccess, OpFlagReadFence, OpFlagSendAndSolicitEvent, OpFlagInline, OpFlagDefer}
	all := OpFlag(0)
	for _, f := range documented {
		if err := checkOpFlags(op, f, providerInfo().AdapterFlags); err != nil {
			t.Errorf("%v refused: %v", f, err)
		}
		all |= f
	}
	if err := checkOpFlags(op, all, providerInfo().AdapterFlags); err != nil {
		t.Errorf("all documented flags together refused: %v", err)
	}
	for bit := OpFlag(1); bit != 0; bit <<= 1 {
		if all&bit != 0 {
			continue
		}
		if err := checkOpFlags(op, bit, providerInfo().AdapterFlags); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("flag %v: %v, want STATUS_INVALID_PARAMETER", bit, err)
		}
	}
}

func TestOpFlagsPerOperation(t *testing.T) {
	info := providerInfo()
	for _, tc := range []struct {
		op  postOp
		ok  OpFlag
		bad OpFlag
	}{
		{postWrite, OpFlagInline | OpFlagReadFence, OpFlagSendAndSolicitEvent},
		{postRead, OpFlagReadFence | OpFlagDefer, OpFlagInline},
		{postBind, OpFlagAllowRemoteRead | OpFlagAllowRemoteWrite, OpFlagRDMAReadSink},
		{postFastRegister, OpFlagAllowLocalWrite | OpFlagRDMAReadSink, OpFlagInline},
		{postInvalidate, OpFlagSilentSuccess | OpFlagDefer, OpFlagAllowRemoteRead},
	} {
		if err := checkOpFlags(tc.op, tc.ok, info.AdapterFlags); err != nil {
			t.Errorf("%s with %v: %v", postOpFlags[tc.op].name, tc.ok, err)
		}
		if err := checkOpFlags(tc.op, tc.bad, info.AdapterFlags); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("%s with %v: %v, want STATUS_INVALID_PARAMETER", postOpFlags[tc.op].name, tc.bad, err)
		}
	}
	// RDMA_READ_LOCAL_INVALIDATE needs the adapter capability (NDKPI.md §6).
	if err := checkOpFlags(postRead, OpFlagRDMAReadLocalInvalidate, info.AdapterFlags&^AdapterFlagRDMAReadLocalInvalidateSupported); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("read-local-invalidate without capability: %v", err)
	}
	if err := checkOpFlags(postRead, OpFlagRDMAReadLocalInvalidate, AdapterFlagRDMAReadLocalInvalidateSupported); err != nil {
		t.Errorf("read-local-invalidate with capability: %v", err)
	}
	if err := checkOpFlags(postOp(200), 0, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("unknown operation: %v", err)
	}
}
