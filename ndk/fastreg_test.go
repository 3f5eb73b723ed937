package ndk

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"
)

// newFastMR creates and initializes a fast-register MR of pages pages.
func newFastMR(t testing.TB, pd *PD, pages int, remote bool) *MR {
	t.Helper()
	mr, err := pd.CreateMR(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.InitializeFastRegister(pages, remote); err != nil {
		t.Fatal(err)
	}
	return mr
}

// expectResult waits for the next completion on c and checks its status
// and type.
func expectResult(t testing.TB, c *CQ, status Status, typ OperationType, ctx any) ResultEx {
	t.Helper()
	r := waitResult(t, c)
	if r.Status != status || r.Type != typ || r.RequestContext != ctx {
		t.Fatalf("completion %+v (%v), want status %v type %v context %v", r, r.Status, status, typ, ctx)
	}
	return r
}

// TestFastRegisterMr_NotRegistrable: NdkRegisterMr is only for an MR
// created with FastRegister=FALSE (seed 001), and the fast-register calls
// only for one created with TRUE.
func TestFastRegisterMr_NotRegistrable(t *testing.T) {
	x, _ := pipePair(t, true)
	fast, err := x.pd.CreateMR(true)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if err := fast.Register(buf, MRFlagAllowLocalWrite); !errors.Is(err, ErrInvalidDeviceRequest) {
		t.Fatalf("Register on a fast-register MR: %v", err)
	}
	plain, _ := x.pd.CreateMR(false)
	if err := plain.InitializeFastRegister(1, false); !errors.Is(err, ErrInvalidDeviceRequest) {
		t.Fatalf("InitializeFastRegister on a FastRegister=FALSE MR: %v", err)
	}
	if err := plain.Register(buf, MRFlagAllowLocalWrite); err != nil {
		t.Fatalf("Register on a FastRegister=FALSE MR: %v", err)
	}
	if err := plain.Register(buf, MRFlagAllowLocalWrite); !errors.Is(err, ErrInvalidDeviceRequest) {
		t.Fatalf("second Register: %v", err)
	}
	if err := x.qp.FastRegister(nil, plain, buf, 0); !errors.Is(err, ErrInvalidDeviceRequest) {
		t.Fatalf("FastRegister of a registered MR: %v", err)
	}
	if err := x.qp.FastRegister(nil, fast, buf, 0); !errors.Is(err, ErrInvalidDeviceRequest) {
		t.Fatalf("FastRegister before InitializeFastRegister: %v", err)
	}
	for _, pages := range []int{0, -1, int(x.a.Info().MaxRegistrationSize/PageSize) + 1} {
		if err := fast.InitializeFastRegister(pages, false); !errors.Is(err, ErrImplementationLimit) {
			t.Fatalf("InitializeFastRegister(%d): %v", pages, err)
		}
	}
	if err := plain.Deregister(); err != nil {
		t.Fatal(err)
	}
}

// TestFastRegister_Rules: remote rights need an MR initialized with
// remote access (STATUS_ACCESS_VIOLATION, NdkFastRegister), the memory
// must fit the pages (Length <= pages*PAGE_SIZE - FBO), a registered MR
// is invalidated before it is registered again, and the tokens change
// with each registration.
func TestFastRegister_Rules(t *testing.T) {
	x, _ := pipePair(t, true)
	local := newFastMR(t, x.pd, 2, false)
	page := make([]byte, 4*PageSize)
	aligned := page[PageSize-int(addrOf(page)%PageSize):][:2*PageSize] // FBO 0
	if err := x.qp.FastRegister(nil, local, aligned, OpFlagAllowRemoteRead); !errors.Is(err, ErrAccessViolation) {
		t.Fatalf("remote read on an MR without remote access: %v", err)
	}
	fbo1 := page[PageSize-int(addrOf(page)%PageSize)+1:][:2*PageSize]
	if err := x.qp.FastRegister(nil, local, fbo1, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("FBO 1 + 2 pages: %v", err)
	}
	if err := x.qp.FastRegister(nil, local, append(aligned[:2*PageSize:2*PageSize], 0), 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("2 pages + 1 byte: %v", err)
	}
	before := local.LocalToken()
	if err := x.qp.FastRegister("fr", local, aligned, OpFlagAllowLocalWrite); err != nil {
		t.Fatal(err)
	}
	if local.LocalToken() == before || local.Addr() != addrOf(aligned) || local.Len() != len(aligned) {
		t.Fatalf("after FastRegister: token %#x (was %#x), addr %#x, len %d", local.LocalToken(), before, local.Addr(), local.Len())
	}
	expectResult(t, x.icq, StatusSuccess, OpFastRegister, "fr")
	if err := x.qp.FastRegister(nil, local, aligned, 0); !errors.Is(err, ErrAccessViolation) {
		t.Fatalf("FastRegister of a registered MR: %v", err)
	}
	if err := x.qp.Invalidate("inv", local, 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, x.icq, StatusSuccess, OpInvalidate, "inv")
	if err := x.qp.FastRegister("again", local, aligned[:100], OpFlagAllowLocalWrite|OpFlagSilentSuccess); err != nil {
		t.Fatalf("FastRegister after Invalidate: %v", err)
	}
	if err := x.qp.Invalidate(nil, nil, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("Invalidate(nil): %v", err)
	}
}

// TestFastRegister_SendAndInvalidateInOrder: FastRegister, a SEND from
// the new registration and an Invalidate complete in posting order with
// their types, the SEND carries the bytes, and after the Invalidate the
// old token is refused.
func TestFastRegister_SendAndInvalidateInOrder(t *testing.T) {
	x, y := pipePair(t, true)
	mr := newFastMR(t, x.pd, 1, false)
	src := []byte("fast-registered bytes")
	dst := make([]byte, 64)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ds, _ := dmr.SGE(0, 64)
	if err := y.qp.Receive("r", []SGE{ds}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.FastRegister("fr", mr, src, OpFlagDefer); err != nil {
		t.Fatal(err)
	}
	ss, _ := mr.SGE(0, len(src))
	if err := x.qp.Send("send", []SGE{ss}, OpFlagDefer); err != nil {
		t.Fatalf("SEND with the token FastRegister just returned: %v", err)
	}
	if err := x.qp.Invalidate("inv", mr, 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, x.icq, StatusSuccess, OpFastRegister, "fr")
	expectResult(t, x.icq, StatusSuccess, OpSend, "send")
	expectResult(t, x.icq, StatusSuccess, OpInvalidate, "inv")
	if r := expectResult(t, y.rcq, StatusSuccess, OpReceive, "r"); !bytes.Equal(dst[:r.BytesTransferred], src) {
		t.Fatalf("received %q", dst[:r.BytesTransferred])
	}
	if err := x.qp.Send(nil, []SGE{ss}, 0); !errors.Is(err, ErrAccessViolation) {
		t.Fatalf("SEND with an invalidated token: %v", err)
	}
}

// TestFastRegister_ReceiveOnAnyQPUsesFreshToken: a receive posted after a
// FastRegister on another QP of the PD, into the memory it registers,
// takes the fresh token (the registration is in force when FastRegister
// returns, deferred or not), on an SRQ and on a QP's own receive queue,
// and a SEND lands in it. The daemon's tests show the same through its
// rings (test/daemon TestReceivesFollowTheirFastRegisters).
func TestFastRegister_ReceiveOnAnyQPUsesFreshToken(t *testing.T) {
	for _, c := range []struct {
		name  string
		srq   bool
		flags OpFlag
	}{{"SRQ", true, 0}, {"SRQ, deferred", true, OpFlagDefer}, {"receive queue", false, 0}, {"receive queue, deferred", false, OpFlagDefer}} {
		t.Run(c.name, func(t *testing.T) {
			s := newSRQSides(t, 2, 16, 64, c.srq)
			mr := newFastMR(t, s.y.pd, 1, false)
			buf := make([]byte, 64)
			src := make([]byte, 64)
			smr, err := s.x.pd.RegisterMR(src, MRFlagAllowLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 3 {
				if err := s.yqps[1].FastRegister(nil, mr, buf, OpFlagAllowLocalWrite|OpFlagSilentSuccess|c.flags); err != nil {
					t.Fatal(err)
				}
				rs, _ := mr.SGE(0, len(buf))
				post := s.yqps[0].Receive
				if c.srq {
					post = s.srq.Receive
				}
				if err := post(round, []SGE{rs}); err != nil {
					t.Fatalf("round %d: receive with the fresh token: %v", round, err)
				}
				msg := []byte{byte(round), 'f', 'r'}
				ms, _ := smr.SGE(0, len(msg))
				copy(src, msg)
				if err := s.xqps[0].Send(nil, []SGE{ms}, 0); err != nil {
					t.Fatal(err)
				}
				if r := expectResult(t, s.y.rcq, StatusSuccess, OpReceive, round); !bytes.Equal(buf[:r.BytesTransferred], msg) {
					t.Fatalf("round %d: received %q, want %q", round, buf[:r.BytesTransferred], msg)
				}
				waitResult(t, s.x.icq)
				if err := s.yqps[1].Invalidate(nil, mr, OpFlagSilentSuccess); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestFastRegister_RemoteWriteThroughNewToken: a peer writes through the
// remote token a FastRegister returned, within the registration; after
// NdkInvalidate the same write fails on the wire.
func TestFastRegister_RemoteWriteThroughNewToken(t *testing.T) {
	x, y := pipePair(t, true)
	target := make([]byte, 256)
	mr := newFastMR(t, y.pd, 1, true)
	if err := y.qp.FastRegister(nil, mr, target, OpFlagAllowRemoteWrite|OpFlagSilentSuccess); err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte{0xAB}, 256)
	smr, _ := x.pd.RegisterMR(src, 0)
	ss, _ := smr.SGE(0, 256)
	if err := x.qp.Write("w", []SGE{ss}, mr.Addr(), mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, x.icq, StatusSuccess, OpWrite, "w")
	if !bytes.Equal(target, src) {
		t.Fatal("write through the fast-registered token did not land")
	}
	old := mr.RemoteToken()
	if err := y.qp.Invalidate("inv", mr, 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, y.icq, StatusSuccess, OpInvalidate, "inv")
	if err := x.qp.Write("w2", []SGE{ss}, mr.Addr(), old, 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, x.icq, StatusAccessViolation, OpWrite, "w2")
}

// TestSeedCompletion_LaterInvalidateFailsEndToEnd is seed 002's rule with
// NdkInvalidate itself: a peer's SendAndInvalidate invalidates a
// fast-registered MR (and a bound window); the ReceiveAndInvalidate
// completion is retrievable, and a later NdkInvalidate of that token fails
// (STATUS_INVALID_DEVICE_REQUEST), ending the QP.
func TestSeedCompletion_LaterInvalidateFailsEndToEnd(t *testing.T) {
	for _, kind := range []string{"FastRegisteredMR", "BoundMW"} {
		t.Run(kind, func(t *testing.T) {
			x, y := pipePair(t, true)
			mem := make([]byte, 512)
			var obj Invalidatable
			var token uint32
			if kind == "FastRegisteredMR" {
				mr := newFastMR(t, y.pd, 1, true)
				if err := y.qp.FastRegister(nil, mr, mem, OpFlagAllowRemoteWrite|OpFlagSilentSuccess); err != nil {
					t.Fatal(err)
				}
				obj, token = mr, mr.RemoteToken()
			} else {
				mr, _ := y.pd.RegisterMR(mem, MRFlagAllowRemoteWrite)
				mw, _ := y.pd.CreateMW()
				if err := y.qp.Bind(nil, mr, mw, mr.Addr(), 512, OpFlagAllowRemoteWrite|OpFlagSilentSuccess); err != nil {
					t.Fatal(err)
				}
				obj, token = mw, mw.RemoteToken()
			}
			rbuf := make([]byte, 64)
			rmr, _ := y.pd.RegisterMR(rbuf, MRFlagAllowLocalWrite)
			rs, _ := rmr.SGE(0, 64)
			if err := y.qp.Receive("r", []SGE{rs}); err != nil {
				t.Fatal(err)
			}
			if err := x.qp.SendAndInvalidate("si", nil, 0, token); err != nil {
				t.Fatal(err)
			}
			expectResult(t, x.icq, StatusSuccess, OpSend, "si")
			var plain [1]Result
			for deadline := time.Now().Add(5 * time.Second); y.rcq.GetResults(plain[:]) == 0; runtime.Gosched() {
				if time.Now().After(deadline) {
					t.Fatal("no receive completion")
				}
			}
			if plain[0].Status != StatusSuccess || plain[0].RequestContext != "r" {
				t.Fatalf("ReceiveAndInvalidate through GetResults: %+v", plain[0])
			}
			if err := y.qp.Invalidate("later", obj, 0); err != nil {
				t.Fatalf("post: %v", err)
			}
			r := expectResult(t, y.icq, StatusInvalidDeviceRequest, OpInvalidate, "later")
			if r.ProviderErrorCode == 0 {
				t.Error("no provider error code on the failed Invalidate")
			}
			if y.qp.Connected() {
				t.Fatal("QP still connected after an error completion")
			}
		})
	}
}

// TestInvalidate_NeverOnRegisterMr: NdkInvalidate "is never used on an MR
// registered with NdkRegisterMr"; ndkxdp completes it with
// STATUS_INVALID_DEVICE_REQUEST and leaves the MR valid.
func TestInvalidate_NeverOnRegisterMr(t *testing.T) {
	x, _ := pipePair(t, true)
	buf := make([]byte, 64)
	mr, _ := x.pd.RegisterMR(buf, 0)
	if err := x.qp.Invalidate("inv", mr, 0); err != nil {
		t.Fatal(err)
	}
	expectResult(t, x.icq, StatusInvalidDeviceRequest, OpInvalidate, "inv")
	if _, f := x.a.regions.CheckLocal(x.pd.id, mr.LocalToken(), mr.Addr(), 64, 0); f != 0 {
		t.Fatalf("registered MR after a refused Invalidate: %v", f)
	}
}

// TestFastRegisterSendInvalidateAllocateNothing: the chain a storage
// consumer posts per I/O (FastRegister, SEND, Invalidate) and polling its
// completions allocate nothing.
func TestFastRegisterSendInvalidateAllocateNothing(t *testing.T) {
	x, y := pipePair(t, true)
	mr := newFastMR(t, x.pd, 1, false)
	src := make([]byte, 64)
	dst := make([]byte, 64)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ds, _ := dmr.SGE(0, 64)
	sgl, rsgl := make([]SGE, 1), []SGE{ds}
	var rs [4]ResultEx
	ctx := new(int)
	round := func() {
		if err := y.qp.Receive(ctx, rsgl); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.FastRegister(ctx, mr, src, OpFlagDefer|OpFlagSilentSuccess); err != nil {
			t.Fatal(err)
		}
		sgl[0] = SGE{Addr: mr.Addr(), Length: 64, Token: mr.LocalToken()}
		if err := x.qp.Send(ctx, sgl, OpFlagDefer); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.Invalidate(ctx, mr, 0); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for got := 0; got < 2 && time.Now().Before(deadline); {
			got += x.icq.GetResultsEx(rs[:])
		}
		for y.rcq.GetResultsEx(rs[:]) == 0 && time.Now().Before(deadline) {
		}
		if time.Now().After(deadline) {
			t.Fatal("completions missing after 5s")
		}
	}
	round()
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("FastRegister + Send + Invalidate allocate %v per round", n)
	}
}

// TestLogicalAddressesNotSupported: NdkGetPrivilegedMemoryRegionToken and
// NdkBuildLAM answer STATUS_NOT_SUPPORTED (lam.go says why).
func TestLogicalAddressesNotSupported(t *testing.T) {
	x, _ := pipePair(t, false)
	if tok, err := x.pd.PrivilegedMemoryRegionToken(); !errors.Is(err, ErrNotSupported) || tok != 0 {
		t.Fatalf("privileged token: %#x, %v", tok, err)
	}
	if lam, fbo, err := x.a.BuildLAM(make([]byte, 4096), 4096); !errors.Is(err, ErrNotSupported) || lam != nil || fbo != 0 {
		t.Fatalf("BuildLAM: %v, %d, %v", lam, fbo, err)
	}
	x.a.ReleaseLAM(nil)
}

// TestReadLocalInvalidate: NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE (NDKPI
// 1.2, advertised by RDMA_READ_LOCAL_INVALIDATE_SUPPORTED): on success the
// first SGE's local token is invalidated; a sink that cannot be
// invalidated fails the READ with STATUS_INVALID_DEVICE_REQUEST.
func TestReadLocalInvalidate(t *testing.T) {
	for _, fast := range []bool{true, false} {
		name := map[bool]string{true: "FastRegisteredSink", false: "RegisterMrSink"}[fast]
		t.Run(name, func(t *testing.T) {
			x, y := pipePair(t, true)
			if x.a.Info().AdapterFlags&AdapterFlagRDMAReadLocalInvalidateSupported == 0 {
				t.Fatal("adapter does not advertise RDMA_READ_LOCAL_INVALIDATE_SUPPORTED")
			}
			src := []byte("read, then invalidate the sink")
			smr, _ := y.pd.RegisterMR(src, MRFlagAllowRemoteRead)
			sink := make([]byte, len(src))
			var mr *MR
			if fast {
				mr = newFastMR(t, x.pd, 1, false)
				if err := x.qp.FastRegister(nil, mr, sink, OpFlagAllowLocalWrite|OpFlagSilentSuccess); err != nil {
					t.Fatal(err)
				}
			} else {
				mr, _ = x.pd.RegisterMR(sink, MRFlagAllowLocalWrite)
			}
			ds, _ := mr.SGE(0, len(sink))
			if err := x.qp.Read("r", []SGE{ds}, smr.Addr(), smr.RemoteToken(), OpFlagRDMAReadLocalInvalidate); err != nil {
				t.Fatal(err)
			}
			if !fast {
				expectResult(t, x.icq, StatusInvalidDeviceRequest, OpRead, "r")
				return
			}
			expectResult(t, x.icq, StatusSuccess, OpRead, "r")
			if !bytes.Equal(sink, src) {
				t.Fatalf("sink %q", sink)
			}
			if err := x.qp.Send(nil, []SGE{ds}, 0); !errors.Is(err, ErrAccessViolation) {
				t.Fatalf("SEND from the invalidated sink: %v", err)
			}
			if err := x.qp.Invalidate("inv", mr, 0); err != nil {
				t.Fatal(err)
			}
			expectResult(t, x.icq, StatusInvalidDeviceRequest, OpInvalidate, "inv")
		})
	}
	x, _ := pipePair(t, true)
	if err := x.qp.Read(nil, nil, 0, 0, OpFlagRDMAReadLocalInvalidate); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("READ_LOCAL_INVALIDATE without an SGE: %v", err)
	}
}
