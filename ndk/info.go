package ndk

// AdapterInfo is NDK_ADAPTER_INFO (NDKPI.md §5), field for field in header
// order. SIZE_T fields are uint64, ULONG fields uint32.
type AdapterInfo struct {
	Version                Version
	VendorID               uint32 // IEEE OUI of the vendor
	DeviceID               uint32
	MaxRegistrationSize    uint64 // bytes in one NdkRegisterMr
	MaxWindowSize          uint64 // bytes in one memory window
	FRMRPageCount          uint32 // fast-register MR size, in pages, with the most FRMRs; at least 16
	MaxInitiatorRequestSGE uint32
	MaxReceiveRequestSGE   uint32
	MaxReadRequestSGE      uint32 // overrides MaxInitiatorRequestSGE for reads
	MaxTransferLength      uint32 // bytes in one send, receive, read or write
	MaxInlineDataSize      uint32
	MaxInboundReadLimit    uint32 // reads a peer may have in flight towards one QP
	MaxOutboundReadLimit   uint32 // reads one QP may have in flight
	MaxReceiveQueueDepth   uint32
	MaxInitiatorQueueDepth uint32
	MaxSRQDepth            uint32 // 0: no SRQ support
	MaxCQDepth             uint32
	LargeRequestThreshold  uint32 // above this, read/write beats send/receive
	MaxCallerData          uint32 // private data bytes in a connect
	MaxCalleeData          uint32 // private data bytes in an accept or reject
	AdapterFlags           AdapterFlag
	RDMATechnology         RDMATechnology
}

// providerVersion is the NDKPI version ndkxdp reports: 2.1, the header whose
// NDK_RESULT_EX has ProviderErrorCode, which ResultEx carries. A consumer
// that asks for major version 1 gets 1.2 (NdkSendAndInvalidate,
// NdkGetCqResultsEx, DEFER: NDKPI.md §1). The 2.1 connector calls are
// Connector.AcceptEx, CompleteConnectEx and DisconnectEx (connector_ex.go).
var providerVersion = Version{Major: 2, Minor: 1}

// providerInfo returns the limits of an ndkxdp adapter. Every create and
// post checks against the AdapterInfo of its adapter, which starts as this.
func providerInfo() AdapterInfo {
	return AdapterInfo{
		Version: providerVersion,
		// ndkxdp has no IEEE OUI; Linux rxe reports 0 too (rxe_param.h
		// RXE_VENDOR_ID).
		VendorID: 0,
		DeviceID: 0,
		// Regions are Go memory the caller keeps alive; 1 TiB bounds the
		// offset arithmetic far from 2^64 without limiting real use.
		MaxRegistrationSize: 1 << 40,
		// A window is a range of an MR (mw.go), so it is bounded as one.
		MaxWindowSize: 1 << 40,
		// A fast-register MR of any size costs one token slot, so the count
		// of FRMRs does not depend on their size; 256 pages (1 MiB) covers
		// the usual I/O sizes of storage consumers.
		FRMRPageCount: 256,
		// 16 SGEs cover scatter/gather consumers (SMB Direct posts fewer)
		// and keep a WQE small enough to copy into the send ring.
		MaxInitiatorRequestSGE: 16,
		MaxReceiveRequestSGE:   uint32(len(sglCopy{})),
		MaxReadRequestSGE:      16,
		// The RETH DMA length is 32 bits (ROCEV2.md); 1 GiB keeps one
		// request's segmentation and retransmission state bounded.
		MaxTransferLength: 1 << 30,
		// Inline data is copied into the WQE at post time.
		MaxInlineDataSize: 256,
		// Read limits travel in one byte of the CM REQ/REP (responder
		// resources, initiator depth); 16 matches common RoCE NICs.
		MaxInboundReadLimit:    16,
		MaxOutboundReadLimit:   16,
		MaxReceiveQueueDepth:   4096,
		MaxInitiatorQueueDepth: 4096,
		// An SRQ's ring is allocated at its depth (rounded to a power of
		// two) and shared lock-free by engines; 4096 matches the QPs'.
		MaxSRQDepth: 4096,
		// Big enough for 8 QPs at full depth on one CQ.
		MaxCQDepth: 1 << 16,
		// Under 64 KiB a SEND's single round trip and no token exchange win;
		// above it, one-sided placement saves the receiver's bounce through
		// posted buffers.
		LargeRequestThreshold: 64 << 10,
		// IB CM REQ private data is 92 bytes, of which rdma_cm's header
		// takes 36; a REP carries 196 (NDKPI.md §9). A REJ carries only 148,
		// which the connector enforces for NdkReject.
		MaxCallerData: 56,
		MaxCalleeData: 196,
		// A software engine places bytes in order and needs no special
		// rights on read sinks; CQs coalesce notifications and resize
		// (cq_control.go); a READ may invalidate its sink (rc's
		// readLocalInvalidate). No LOOPBACK (no loopback path yet).
		AdapterFlags: AdapterFlagInOrderDMASupported | AdapterFlagRDMAReadSinkNotRequired |
			AdapterFlagCQInterruptModerationSupported | AdapterFlagCQResizeSupported |
			AdapterFlagRDMAReadLocalInvalidateSupported,
		RDMATechnology: RDMARoCEv2,
	}
}

// negotiateVersion answers an adapter open for version req (NDKPI.md §1):
// an unsupported major, or a minor above ndkxdp's highest for that major,
// fails with NDIS_STATUS_BAD_VERSION; otherwise the adapter reports its
// highest minor of that major.
func negotiateVersion(req Version) (Version, error) {
	highest := map[uint16]uint16{1: 2, providerVersion.Major: providerVersion.Minor}
	minor, ok := highest[req.Major]
	if !ok || req.Minor > minor {
		return Version{}, errorf(StatusNDISBadVersion, "open adapter", "NDK version %v not supported (1.0-1.2 and 2.0-%v are)", req, providerVersion)
	}
	return Version{Major: req.Major, Minor: minor}, nil
}
