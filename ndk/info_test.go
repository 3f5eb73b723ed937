package ndk

import (
	"errors"
	"testing"
)

// TestProviderInfo pins ndkxdp's reported limits and checks the
// constraints that tie them to the wire and to NDKPI.
func TestProviderInfo(t *testing.T) {
	info := providerInfo()
	want := AdapterInfo{
		Version:                Version{2, 1},
		VendorID:               0,
		DeviceID:               0,
		MaxRegistrationSize:    1 << 40,
		MaxWindowSize:          1 << 40,
		FRMRPageCount:          256,
		MaxInitiatorRequestSGE: 16,
		MaxReceiveRequestSGE:   16,
		MaxReadRequestSGE:      16,
		MaxTransferLength:      1 << 30,
		MaxInlineDataSize:      256,
		MaxInboundReadLimit:    16,
		MaxOutboundReadLimit:   16,
		MaxReceiveQueueDepth:   4096,
		MaxInitiatorQueueDepth: 4096,
		MaxSRQDepth:            4096,
		MaxCQDepth:             65536,
		LargeRequestThreshold:  65536,
		MaxCallerData:          56,
		MaxCalleeData:          196,
		AdapterFlags: AdapterFlagInOrderDMASupported | AdapterFlagRDMAReadSinkNotRequired |
			AdapterFlagCQInterruptModerationSupported | AdapterFlagCQResizeSupported |
			AdapterFlagRDMAReadLocalInvalidateSupported,
		RDMATechnology: RDMARoCEv2,
	}
	if info != want {
		t.Fatalf("providerInfo() =\n%+v\nwant\n%+v", info, want)
	}
	switch {
	case info.FRMRPageCount < 16:
		t.Error("FRMRPageCount below NDKPI's minimum of 16")
	case uint64(info.MaxTransferLength) > 1<<31-1:
		t.Error("MaxTransferLength does not fit the RETH's 32-bit DMA length with room for signed use")
	case info.MaxInboundReadLimit > 255 || info.MaxOutboundReadLimit > 255:
		t.Error("read limits do not fit the CM's one-byte fields")
	case info.MaxCallerData > 92-36:
		t.Error("MaxCallerData exceeds a CM REQ's private data minus the rdma_cm header")
	case info.MaxCalleeData > 196:
		t.Error("MaxCalleeData exceeds a CM REP's private data")
	case info.MaxCQDepth < info.MaxReceiveQueueDepth+info.MaxInitiatorQueueDepth:
		t.Error("one QP at full depth does not fit one CQ")
	case info.AdapterFlags&AdapterFlagLoopbackConnectionsSupported != 0:
		t.Error("LOOPBACK reported but not supported")
	}
}

func TestNegotiateVersion(t *testing.T) {
	for _, tc := range []struct {
		req, want Version
		ok        bool
	}{
		{Version{1, 1}, Version{1, 2}, true},
		{Version{1, 2}, Version{1, 2}, true},
		{Version{1, 0}, Version{1, 2}, true},
		{Version{2, 0}, Version{2, 1}, true},
		{Version{2, 1}, Version{2, 1}, true},
		{Version{1, 3}, Version{}, false},
		{Version{2, 2}, Version{}, false},
		{Version{3, 0}, Version{}, false},
		{Version{0, 9}, Version{}, false},
	} {
		got, err := negotiateVersion(tc.req)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("negotiate %v: %v, %v; want %v", tc.req, got, err, tc.want)
		}
		if !tc.ok && !errors.Is(err, ErrNDISBadVersion) {
			t.Errorf("negotiate %v: %v, want NDIS_STATUS_BAD_VERSION", tc.req, err)
		}
	}
}

func TestAdapterReportsNegotiatedVersion(t *testing.T) {
	cfg := defaultConfig()
	cfg.version = Version{1, 1}
	a, err := newAdapter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if v := a.Info().Version; v != (Version{1, 2}) {
		t.Fatalf("adapter opened for 1.1 reports %v, want 1.2", v)
	}
	cfg.version = Version{3, 0}
	if _, err := newAdapter(cfg); !errors.Is(err, ErrNDISBadVersion) {
		t.Fatalf("open for 3.0: %v", err)
	}
}
