package ndk

import (
	"errors"
	"math"
	"testing"
	"unsafe"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
)

func newTestPD(t *testing.T, tune func(*adapterConfig)) (*Adapter, *PD) {
	t.Helper()
	a := newTestAdapter(t, tune)
	pd, err := a.CreatePD()
	if err != nil {
		t.Fatal(err)
	}
	return a, pd
}

// Seed 001 (NdkRegisterMr): "NdkRegisterMr does not support zero-based
// virtual addresses." A nil slice describes address 0; registerAt presents
// a request for address 0 with real memory behind it.
func TestSeedRegisterMr_RejectsZeroBasedAddress(t *testing.T) {
	_, pd := newTestPD(t, nil)
	if _, err := pd.RegisterMR(nil, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("nil buffer: %v, want STATUS_INVALID_PARAMETER", err)
	}
	if _, err := pd.registerAt(0, make([]byte, 4096), MRFlagAllowLocalWrite); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("virtual address 0: %v, want STATUS_INVALID_PARAMETER", err)
	}
}

func TestSeedRegisterMr_RejectsZeroLength(t *testing.T) {
	_, pd := newTestPD(t, nil)
	backing := make([]byte, 16)
	if _, err := pd.RegisterMR(backing[:0], 0); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("empty slice of real memory: %v, want STATUS_INVALID_PARAMETER", err)
	}
	if _, err := pd.registerAt(0x1000, nil, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("zero length at a non-zero address: %v, want STATUS_INVALID_PARAMETER", err)
	}
}

func TestSeedRegisterMr_RejectsLengthOverMaxRegistrationSize(t *testing.T) {
	_, pd := newTestPD(t, func(c *adapterConfig) { c.info.MaxRegistrationSize = 1 << 16 })
	if _, err := pd.RegisterMR(make([]byte, 1<<16+1), 0); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("length MaxRegistrationSize+1: %v, want STATUS_INVALID_PARAMETER", err)
	}
	if _, err := pd.RegisterMR(make([]byte, 1<<16), 0); err != nil {
		t.Errorf("length MaxRegistrationSize: %v", err)
	}
}

func TestSeedRegisterMr_RejectsUnknownFlags(t *testing.T) {
	_, pd := newTestPD(t, nil)
	for _, f := range []MRFlag{0x10, 0x20, 0x100, 0x80000000, MRFlagAllowRemoteWrite | 0x40,
		0x4, 0x4 | MRFlagAllowRemoteRead} { // 0x4 alone is remote write without local write
		if _, err := pd.RegisterMR(make([]byte, 64), f); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("flags %#x: %v, want STATUS_INVALID_PARAMETER", uint32(f), err)
		}
	}
}

// Seed 001: a buffer may be registered for several purposes, so
// RDMA_READ_SINK may come with other flags; with
// RDMA_READ_SINK_NOT_REQUIRED set the provider must not fail a request
// because RDMA_READ_SINK is present.
func TestSeedRegisterMr_AcceptsEveryDocumentedFlagCombination(t *testing.T) {
	_, pd := newTestPD(t, nil)
	bits := []MRFlag{MRFlagAllowLocalWrite, MRFlagAllowRemoteRead, MRFlagAllowRemoteWrite, MRFlagRDMAReadSink}
	for mask := range 1 << len(bits) {
		var f MRFlag
		for i, b := range bits {
			if mask&(1<<i) != 0 {
				f |= b
			}
		}
		mr, err := pd.RegisterMR(make([]byte, 64), f)
		if err != nil {
			t.Errorf("flags %v: %v", f, err)
			continue
		}
		if mr.Flags() != f {
			t.Errorf("flags %v registered as %v", f, mr.Flags())
		}
	}
}

// Seed 001: the base virtual address is the MDL's; here, the slice's. The
// provider uses it as an index (memreg.TestAddressIsAnIndexOnly), and the
// SGE it yields reaches the registered bytes.
func TestSeedRegisterMr_AddressIsTheBuffers(t *testing.T) {
	a, pd := newTestPD(t, nil)
	buf := make([]byte, 256)
	mr, err := pd.RegisterMR(buf, MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr() != uint64(uintptr(unsafe.Pointer(&buf[0]))) || mr.Len() != len(buf) {
		t.Fatalf("MR at %#x+%d, buffer at %p+%d", mr.Addr(), mr.Len(), &buf[0], len(buf))
	}
	sge, err := mr.SGE(16, 4)
	if err != nil {
		t.Fatal(err)
	}
	dst, f := a.regions.CheckLocal(pd.id, sge.Token, sge.Addr, sge.Length, memreg.AccessLocalWrite)
	if f != memreg.OK {
		t.Fatal(f)
	}
	copy(dst, "ndkx")
	if string(buf[16:20]) != "ndkx" {
		t.Fatalf("SGE reached other bytes: %q", buf[:24])
	}
}

func TestSeedRegisterMr_InsufficientResourcesWhenTableFull(t *testing.T) {
	_, pd := newTestPD(t, func(c *adapterConfig) { c.regions = 2 })
	for range 2 {
		if _, err := pd.RegisterMR(make([]byte, 8), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pd.RegisterMR(make([]byte, 8), 0); !errors.Is(err, ErrInsufficientResources) {
		t.Fatalf("third registration: %v, want STATUS_INSUFFICIENT_RESOURCES", err)
	}
}

// Seed 001 points to NdkDeregisterMr to undo a registration: the tokens
// fail at once, and a second deregistration is refused.
func TestSeedRegisterMr_DeregisterRevokesTokens(t *testing.T) {
	a, pd := newTestPD(t, nil)
	mr, _ := pd.RegisterMR(make([]byte, 64), MRFlagAllowRemoteWrite|MRFlagAllowRemoteRead)
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, f := a.regions.CheckLocal(pd.id, mr.LocalToken(), mr.Addr(), 1, 0); f != memreg.FaultToken {
		t.Errorf("local token after deregister: %v", f)
	}
	if _, f := a.regions.CheckRemote(pd.id, mr.RemoteToken(), mr.Addr(), 1, memreg.AccessRemoteRead); f != memreg.FaultToken {
		t.Errorf("remote token after deregister: %v", f)
	}
	if err := mr.Deregister(); !errors.Is(err, ErrInvalidHandle) {
		t.Errorf("second Deregister: %v", err)
	}
}

// TestMRRightsFollowFlags: what a token allows is what its flags say;
// ALLOW_REMOTE_WRITE (0x5) includes local write.
func TestMRRightsFollowFlags(t *testing.T) {
	a, pd := newTestPD(t, nil)
	for _, tc := range []struct {
		flags                                    MRFlag
		localWrite, readSink, remoteRd, remoteWr bool
	}{
		{MRFlagAllowLocalRead, false, false, false, false},
		{MRFlagAllowLocalWrite, true, true, false, false},
		{MRFlagAllowRemoteRead, false, false, true, false},
		{MRFlagAllowRemoteWrite, true, true, false, true},
		{MRFlagRDMAReadSink, false, true, false, false},
		{MRFlagAllowRemoteWrite | MRFlagAllowRemoteRead, true, true, true, true},
	} {
		mr, err := pd.RegisterMR(make([]byte, 32), tc.flags)
		if err != nil {
			t.Fatal(err)
		}
		ok := func(f memreg.Fault) bool { return f == memreg.OK }
		_, fr := a.regions.CheckLocal(pd.id, mr.LocalToken(), mr.Addr(), 32, 0)
		_, fw := a.regions.CheckLocal(pd.id, mr.LocalToken(), mr.Addr(), 32, memreg.AccessLocalWrite)
		_, fs := a.regions.CheckLocal(pd.id, mr.LocalToken(), mr.Addr(), 32, memreg.AccessReadSink)
		_, frr := a.regions.CheckRemote(pd.id, mr.RemoteToken(), mr.Addr(), 32, memreg.AccessRemoteRead)
		_, frw := a.regions.CheckRemote(pd.id, mr.RemoteToken(), mr.Addr(), 32, memreg.AccessRemoteWrite)
		if !ok(fr) || ok(fw) != tc.localWrite || ok(fs) != tc.readSink || ok(frr) != tc.remoteRd || ok(frw) != tc.remoteWr {
			t.Errorf("flags %v: read %v write %v sink %v remote read %v remote write %v", tc.flags, fr, fw, fs, frr, frw)
		}
	}
}

func TestMRTokensAreDistinct(t *testing.T) {
	_, pd := newTestPD(t, nil)
	seen := map[uint32]bool{}
	for range 64 {
		mr, err := pd.RegisterMR(make([]byte, 8), MRFlagAllowRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		if mr.LocalToken() == mr.RemoteToken() {
			t.Fatalf("local and remote token both %#x", mr.LocalToken())
		}
		for _, tok := range []uint32{mr.LocalToken(), mr.RemoteToken()} {
			if seen[tok] {
				t.Fatalf("token %#x handed out twice", tok)
			}
			seen[tok] = true
		}
	}
}

func TestMRSGE(t *testing.T) {
	_, pd := newTestPD(t, nil)
	mr, _ := pd.RegisterMR(make([]byte, 100), 0)
	for _, tc := range []struct {
		off, n int
		ok     bool
	}{
		{0, 100, true}, {99, 1, true}, {100, 0, true}, {0, 0, true},
		{-1, 1, false}, {0, -1, false}, {1, 100, false}, {101, 0, false}, {50, math.MaxInt, false},
	} {
		sge, err := mr.SGE(tc.off, tc.n)
		if tc.ok != (err == nil) {
			t.Errorf("SGE(%d, %d): %v", tc.off, tc.n, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidParameter) {
				t.Errorf("SGE(%d, %d): %v, want STATUS_INVALID_PARAMETER", tc.off, tc.n, err)
			}
			continue
		}
		if sge.Addr != mr.Addr()+uint64(tc.off) || sge.Length != uint32(tc.n) || sge.Token != mr.LocalToken() {
			t.Errorf("SGE(%d, %d) = %+v", tc.off, tc.n, sge)
		}
	}
}
