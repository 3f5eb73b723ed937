package ndk

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// boundWindow registers a 4 KiB MR on y with mrFlags, creates a window and
// binds [off, off+n) of it with bindFlags.
func boundWindow(t *testing.T, y *side, mrFlags MRFlag, off, n uint64, bindFlags OpFlag) ([]byte, *MR, *MW) {
	t.Helper()
	mem := make([]byte, 4096)
	mr, err := y.pd.RegisterMR(mem, mrFlags)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := y.pd.CreateMW()
	if err != nil {
		t.Fatal(err)
	}
	before := mw.RemoteToken()
	if err := y.qp.Bind("bind", mr, mw, mr.Addr()+off, n, bindFlags); err != nil {
		t.Fatal(err)
	}
	if mw.RemoteToken() == before {
		t.Fatal("the window's token did not change when Bind returned")
	}
	expectResult(t, y.icq, StatusSuccess, OpBind, "bind")
	return mem, mr, mw
}

// TestMW_BindGivesRemoteAccessWithinBounds: a peer writes and reads
// through a bound window inside its range; one byte beyond it is a remote
// access error on the wire, and no byte outside the window changes.
func TestMW_BindGivesRemoteAccessWithinBounds(t *testing.T) {
	for _, c := range []struct {
		name    string
		off, n  int // relative to the window
		read    bool
		success bool
	}{
		{"WriteInside", 0, 1024, false, true},
		{"ReadInside", 512, 512, true, true},
		{"WriteOneBytePast", 1, 1024, false, false},
		{"WriteBefore", -1, 8, false, false},
		{"ReadPast", 1000, 100, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, y := pipePair(t, true)
			mem, mr, mw := boundWindow(t, y, MRFlagAllowRemoteWrite|MRFlagAllowRemoteRead, 1024, 1024,
				OpFlagAllowRemoteWrite|OpFlagAllowRemoteRead)
			for i := range mem {
				mem[i] = 0x11
			}
			local := make([]byte, 2048)
			for i := range local {
				local[i] = 0x77
			}
			lmr, _ := x.pd.RegisterMR(local, MRFlagAllowLocalWrite)
			ls, _ := lmr.SGE(0, c.n)
			addr := uint64(int64(mr.Addr()) + 1024 + int64(c.off))
			want, typ := StatusAccessViolation, OpWrite
			if c.read {
				want, typ = StatusRemoteResources, OpRead // NdkRead: beyond the remote region
				if err := x.qp.Read("op", []SGE{ls}, addr, mw.RemoteToken(), 0); err != nil {
					t.Fatal(err)
				}
			} else if err := x.qp.Write("op", []SGE{ls}, addr, mw.RemoteToken(), 0); err != nil {
				t.Fatal(err)
			}
			if c.success {
				want = StatusSuccess
			}
			expectResult(t, x.icq, want, typ, "op")
			for i, b := range mem {
				inside := i >= 1024+c.off && i < 1024+c.off+c.n
				switch {
				case c.success && !c.read && inside && b != 0x77:
					t.Fatalf("byte %d not written", i)
				case (!c.success || c.read || !inside) && b != 0x11:
					t.Fatalf("byte %d changed to %#x", i, b)
				}
			}
			if c.success && c.read && !bytes.Equal(local[:c.n], mem[1024+c.off:1024+c.off+c.n]) {
				t.Fatal("read through the window returned other bytes")
			}
		})
	}
}

// TestMW_RightsWithinTheMRs: a bind may not grant what the MR does not,
// nor reach outside it (STATUS_ACCESS_VIOLATION inline, NdkBind), and a
// peer may use only the rights the window was bound with.
func TestMW_RightsWithinTheMRs(t *testing.T) {
	x, y := pipePair(t, true)
	mem := make([]byte, 4096)
	ro, _ := y.pd.RegisterMR(mem, MRFlagAllowRemoteRead)
	mw, _ := y.pd.CreateMW()
	for name, bind := range map[string]func() error{
		"WriteOnReadOnlyMR": func() error { return y.qp.Bind(nil, ro, mw, ro.Addr(), 64, OpFlagAllowRemoteWrite) },
		"RangePastMR":       func() error { return y.qp.Bind(nil, ro, mw, ro.Addr()+4000, 97, OpFlagAllowRemoteRead) },
		"RangeBeforeMR":     func() error { return y.qp.Bind(nil, ro, mw, ro.Addr()-1, 8, OpFlagAllowRemoteRead) },
	} {
		if err := bind(); !errors.Is(err, ErrAccessViolation) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := y.qp.Bind(nil, ro, mw, ro.Addr(), 64, OpFlagInline); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("Bind with INLINE: %v", err)
	}
	if err := y.qp.Bind("b", ro, mw, ro.Addr(), 64, OpFlagAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	expectResult(t, y.icq, StatusSuccess, OpBind, "b")
	src := make([]byte, 64)
	smr, _ := x.pd.RegisterMR(src, MRFlagAllowLocalWrite)
	ss, _ := smr.SGE(0, 64)
	if err := x.qp.Write("w", []SGE{ss}, ro.Addr(), mw.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, x.icq, StatusAccessViolation, OpWrite, "w")
}

// TestMW_InvalidateAndCloseRevoke: NdkInvalidate of a bound window makes
// its token fail on the wire, a second one completes in error, and a
// rebind gives a working token again; NdkCloseMw revokes it too.
func TestMW_InvalidateAndCloseRevoke(t *testing.T) {
	x, y := pipePair(t, true)
	_, mr, mw := boundWindow(t, y, MRFlagAllowRemoteRead, 0, 4096, OpFlagAllowRemoteRead)
	dst := make([]byte, 64)
	dmr, _ := x.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ds, _ := dmr.SGE(0, 64)
	read := func(ctx string, token uint32, want Status) {
		t.Helper()
		if err := x.qp.Read(ctx, []SGE{ds}, mr.Addr(), token, 0); err != nil {
			t.Fatal(err)
		}
		expectResult(t, x.icq, want, OpRead, ctx)
	}
	read("before", mw.RemoteToken(), StatusSuccess)
	if err := y.qp.Invalidate("inv", mw, 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, y.icq, StatusSuccess, OpInvalidate, "inv")
	if err := y.qp.Bind("rebind", mr, mw, mr.Addr(), 4096, OpFlagAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	expectResult(t, y.icq, StatusSuccess, OpBind, "rebind")
	read("rebound", mw.RemoteToken(), StatusSuccess)
	mw.Close()
	mw.Close() // a second close does nothing
	read("closed", mw.RemoteToken(), StatusRemoteResources)
}

// TestMW_DiesWithItsMR: deregistering the MR a window is bound to revokes
// the window, and the PD's close waits for the window's (and, as for
// every PD, its QP's).
func TestMW_DiesWithItsMR(t *testing.T) {
	x, y := pipePair(t, true)
	_, mr, mw := boundWindow(t, y, MRFlagAllowRemoteRead, 0, 128, OpFlagAllowRemoteRead)
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 64)
	dmr, _ := x.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ds, _ := dmr.SGE(0, 64)
	if err := x.qp.Read("r", []SGE{ds}, mr.Addr(), mw.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, x.icq, StatusRemoteResources, OpRead, "r")
	y.pd.Close()
	select {
	case <-y.pd.Closed():
		t.Fatal("PD closed with a window open")
	default:
	}
	mw.Close()
	_ = y.qp.Close()
	select {
	case <-y.pd.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("PD close did not complete after its window and QP closed")
	}
}

// TestMW_NilObjectsRefused: a missing MR or MW is a clear error, never a
// panic.
func TestMW_NilObjectsRefused(t *testing.T) {
	x, _ := pipePair(t, true)
	mw, _ := x.pd.CreateMW()
	if err := x.qp.Bind(nil, nil, mw, 0, 0, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("Bind without an MR: %v", err)
	}
	if err := x.qp.FastRegister(nil, nil, make([]byte, 8), 0); !errors.Is(err, ErrInvalidDeviceRequest) {
		t.Fatalf("FastRegister without an MR: %v", err)
	}
	var none *MW
	if err := x.qp.Invalidate("inv", none, 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, x.icq, StatusInvalidDeviceRequest, OpInvalidate, "inv")
}

// TestLocalOps_InlineFailureSubmitsDeferredChain: NDKPI.md §8, an inline
// failure of Bind, FastRegister or Invalidate first submits the requests
// posted before it with DEFER: the deferred SEND completes.
func TestLocalOps_InlineFailureSubmitsDeferredChain(t *testing.T) {
	for name, refused := range map[string]func(x *side, mr *MR, mw *MW) error{
		"BindOutsideMR": func(x *side, mr *MR, mw *MW) error {
			return x.qp.Bind(nil, mr, mw, mr.Addr()+1, 64, OpFlagAllowRemoteRead)
		},
		"FastRegisterNotFast": func(x *side, mr *MR, _ *MW) error { return x.qp.FastRegister(nil, mr, make([]byte, 8), 0) },
		"InvalidateBadFlags":  func(x *side, mr *MR, _ *MW) error { return x.qp.Invalidate(nil, mr, OpFlagInline) },
		"BindWithoutMR":       func(x *side, _ *MR, mw *MW) error { return x.qp.Bind(nil, nil, mw, 0, 0, 0) },
		"FastRegisterBadRights": func(x *side, _ *MR, _ *MW) error {
			return x.qp.FastRegister(nil, newFastMR(t, x.pd, 1, false), make([]byte, 8), OpFlagAllowRemoteRead)
		},
	} {
		t.Run(name, func(t *testing.T) {
			x, y := pipePair(t, true)
			mem := make([]byte, 64)
			mr, _ := x.pd.RegisterMR(mem, MRFlagAllowRemoteRead)
			mw, _ := x.pd.CreateMW()
			rbuf := make([]byte, 64)
			rmr, _ := y.pd.RegisterMR(rbuf, MRFlagAllowLocalWrite)
			rs, _ := rmr.SGE(0, 64)
			if err := y.qp.Receive("r", []SGE{rs}); err != nil {
				t.Fatal(err)
			}
			ss, _ := mr.SGE(0, 8)
			if err := x.qp.Send("deferred", []SGE{ss}, OpFlagDefer); err != nil {
				t.Fatal(err)
			}
			if err := refused(x, mr, mw); err == nil {
				t.Fatal("the request was not refused inline")
			}
			expectResult(t, x.icq, StatusSuccess, OpSend, "deferred")
		})
	}
}

// TestMW_BoundToItsQP: a window answers only the peer of the QP that bound
// it (IB type-2 windows, NDKPI.md §9): through another QP of the same PD
// its token is a remote access error.
func TestMW_BoundToItsQP(t *testing.T) {
	s := newSRQSides(t, 2, 8, 64, false)
	mem := make([]byte, 64)
	mr, _ := s.y.pd.RegisterMR(mem, MRFlagAllowRemoteWrite)
	mw, _ := s.y.pd.CreateMW()
	if err := s.yqps[0].Bind("b", mr, mw, mr.Addr(), 64, OpFlagAllowRemoteWrite); err != nil {
		t.Fatal(err)
	}
	expectResult(t, s.y.icq, StatusSuccess, OpBind, "b")
	src := make([]byte, 8)
	smr, _ := s.x.pd.RegisterMR(src, 0)
	ss, _ := smr.SGE(0, 8)
	if err := s.xqps[0].Write("own", []SGE{ss}, mr.Addr(), mw.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, s.x.icq, StatusSuccess, OpWrite, "own")
	if err := s.xqps[1].Write("other", []SGE{ss}, mr.Addr(), mw.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, s.x.icq, StatusAccessViolation, OpWrite, "other")
}

// TestQueryExtensionOnSRQAndMW: NdkQueryExtension on the SRQ and the MW
// answers STATUS_NOT_SUPPORTED, as on every object (extension.go).
func TestQueryExtensionOnSRQAndMW(t *testing.T) {
	x, _ := pipePair(t, false)
	srq, err := x.pd.CreateSRQ(4, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	mw, err := x.pd.CreateMW()
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	for name, q := range map[string]func(GUID, Version) (any, error){"srq": srq.QueryExtension, "mw": mw.QueryExtension} {
		if iface, err := q(GUID{1}, Version{Major: 2}); iface != nil || !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s: QueryExtension = %v, %v; want nil, STATUS_NOT_SUPPORTED", name, iface, err)
		}
	}
}
