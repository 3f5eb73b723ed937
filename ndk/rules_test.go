package ndk

import (
	"errors"
	"testing"
)

// TestRefusedPostSubmitsDeferred: NDKPI.md §8, a request posted with
// DEFER waits for the next post without DEFER, and a post that fails
// inline must still submit the deferred ones. A Send refused for an
// undocumented flag, by the ndk layer before the engine sees it, rings
// for the deferred Send, which then completes.
func TestRefusedPostSubmitsDeferred(t *testing.T) {
	x, y := pipePair(t, true)
	dst := make([]byte, 16)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ds, _ := dmr.SGE(0, 16)
	if err := y.qp.Receive("r", []SGE{ds}); err != nil {
		t.Fatal(err)
	}
	src := []byte("deferred")
	smr, _ := x.pd.RegisterMR(src, 0)
	ss, _ := smr.SGE(0, len(src))
	if err := x.qp.Send("deferred", []SGE{ss}, OpFlagDefer); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.Send("refused", []SGE{ss}, OpFlagAllowRemoteRead); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("send with an undocumented flag: %v", err)
	}
	if r := waitResult(t, x.icq); r.Status != StatusSuccess || r.RequestContext != "deferred" {
		t.Fatalf("deferred send completed %+v", r)
	}
	if r := waitResult(t, y.rcq); r.Status != StatusSuccess || string(dst[:r.BytesTransferred]) != "deferred" {
		t.Fatalf("receive %+v, %q", r, dst)
	}
}

// TestInlineMayExceedSGELimit: seeds 003 and 004, an INLINE request may
// carry more SGEs than MaxInitiatorRequestSGE. Seventeen one-byte inline
// SGEs on a QP whose limit is 16 (above the engine's 16 per WQE) are
// sent as one message.
func TestInlineMayExceedSGELimit(t *testing.T) {
	x, y := pipePair(t, false)
	// A QP with the adapter's whole SGE limit, and 32 bytes inline.
	icq, _ := x.a.CreateCQ(64, nil)
	rcq, _ := x.a.CreateCQ(64, nil)
	qp, err := x.pd.CreateQP(QPConfig{ReceiveCQ: rcq, InitiatorCQ: icq,
		ReceiveQueueDepth: 8, InitiatorQueueDepth: 8, MaxReceiveRequestSGE: 1,
		MaxInitiatorRequestSGE: 16, InlineDataSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.ConnectOOB(y.qp.LocalEndpoint(), ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.ConnectOOB(qp.LocalEndpoint(), ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 32)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	ds, _ := dmr.SGE(0, 32)
	if err := y.qp.Receive("r", []SGE{ds}); err != nil {
		t.Fatal(err)
	}
	const want = "seventeen pieces!"
	src := []byte(want)
	smr, _ := x.pd.RegisterMR(src, 0)
	sgl := make([]SGE, len(src))
	for i := range sgl {
		sgl[i], _ = smr.SGE(i, 1)
	}
	if err := qp.Send("inline", sgl, OpFlagInline); err != nil {
		t.Fatalf("17 inline SGEs: %v", err)
	}
	if err := qp.Send("not inline", sgl, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("17 SGEs without INLINE: %v", err)
	}
	if r := waitResult(t, icq); r.Status != StatusSuccess || r.RequestContext != "inline" {
		t.Fatalf("inline send completed %+v", r)
	}
	if r := waitResult(t, y.rcq); r.Status != StatusSuccess || string(dst[:r.BytesTransferred]) != want {
		t.Fatalf("receive %+v, %q", r, dst[:r.BytesTransferred])
	}
}

// TestMaxTransferLengthEnforced: AdapterInfo.MaxTransferLength bounds one
// request (NDKPI.md §4); a WRITE, READ or SEND over it, or a receive
// buffer over it, is refused with STATUS_INVALID_PARAMETER before any
// token is looked at.
func TestMaxTransferLengthEnforced(t *testing.T) {
	x, _ := pipePair(t, true)
	max := x.a.Info().MaxTransferLength
	if max == 0 || max >= 1<<31 {
		t.Fatalf("MaxTransferLength %d leaves no room to exceed it in 32 bits", max)
	}
	// Two SGEs whose sum is one byte over; their tokens are not valid, so
	// only the length check can refuse them as an invalid parameter.
	over := []SGE{{Length: max / 2, Token: 1}, {Length: max/2 + max%2 + 1, Token: 1}}
	for name, post := range map[string]func() error{
		"send":    func() error { return x.qp.Send(nil, over, 0) },
		"write":   func() error { return x.qp.Write(nil, over, 0x1000, 1, 0) },
		"read":    func() error { return x.qp.Read(nil, over[:1], 0x1000, 1, 0) },
		"receive": func() error { return x.qp.Receive(nil, over) },
	} {
		err := post()
		if name == "read" {
			// One SGE of max/2 is within the limit: the bad token fails.
			if !errors.Is(err, ErrAccessViolation) {
				t.Fatalf("read within MaxTransferLength: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidParameter) {
			t.Fatalf("%s of %d bytes (MaxTransferLength %d): %v", name, uint64(over[0].Length)+uint64(over[1].Length), max, err)
		}
	}
	// Exactly the limit passes the length check (and fails on the token).
	at := []SGE{{Length: max / 2, Token: 1}, {Length: max - max/2, Token: 1}}
	if err := x.qp.Write(nil, at, 0x1000, 1, 0); !errors.Is(err, ErrAccessViolation) {
		t.Fatalf("write of exactly MaxTransferLength: %v", err)
	}
}
