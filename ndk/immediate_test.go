package ndk

import (
	"errors"
	"runtime"
	"testing"
)

// TestImmediateExtension runs the extension over the pipe: a SEND and a
// WRITE with immediate, the peer's ResultEx (type, flag, immediate,
// bytes), a plain receive without the flag, and the names.
func TestImmediateExtension(t *testing.T) {
	x, y := pipePair(t, true)
	src := make([]byte, 64)
	for i := range src {
		src[i] = byte(i + 1)
	}
	dst, rbuf := make([]byte, 64), make([]byte, 64)
	smr, _ := x.pd.RegisterMR(src, 0)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowRemoteWrite)
	rmr, _ := y.pd.RegisterMR(rbuf, MRFlagAllowLocalWrite)
	s, _ := smr.SGE(0, 64)
	r, _ := rmr.SGE(0, 64)
	for _, ctx := range []string{"r1", "r2", "r3"} {
		if err := y.qp.Receive(ctx, []SGE{r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.qp.SendWithImmediate("s", []SGE{s}, 0, 0xDEADBEEF); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.WriteWithImmediate("w", []SGE{s}, dmr.Addr(), dmr.RemoteToken(), OpFlagSendAndSolicitEvent, 17); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.Send("p", []SGE{s}, 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		ctx string
		typ OperationType
	}{{"s", OpSend}, {"w", OpWrite}, {"p", OpSend}} {
		c := waitResult(t, x.icq)
		if c.Status != StatusSuccess || c.Type != want.typ || c.RequestContext != want.ctx || c.Flags != 0 {
			t.Fatalf("initiator completion %+v, want %v for %s", c, want.typ, want.ctx)
		}
	}
	for _, want := range []ResultEx{
		{Result: Result{BytesTransferred: 64, RequestContext: "r1"}, Type: OpReceive, Flags: ResultWithImmediate, Immediate: 0xDEADBEEF},
		{Result: Result{BytesTransferred: 64, RequestContext: "r2"}, Type: OpReceiveWriteWithImmediate, Flags: ResultWithImmediate, Immediate: 17},
		{Result: Result{BytesTransferred: 64, RequestContext: "r3"}, Type: OpReceive},
	} {
		c := waitResult(t, y.rcq)
		if c.Status != StatusSuccess || c.Type != want.Type || c.RequestContext != want.RequestContext ||
			c.BytesTransferred != want.BytesTransferred || c.Flags != want.Flags || c.Immediate != want.Immediate {
			t.Fatalf("receive %+v, want %+v", c, want)
		}
	}
	if string(dst) != string(src) {
		t.Fatal("the WRITE's bytes did not land")
	}
	if OpReceiveWriteWithImmediate.String() != "ReceiveWriteWithImmediate" {
		t.Fatalf("name %q", OpReceiveWriteWithImmediate)
	}
}

// TestImmediateExtensionRefusals: the flags each method accepts.
func TestImmediateExtensionRefusals(t *testing.T) {
	x, _ := pipePair(t, true)
	if err := x.qp.SendWithImmediate(nil, nil, OpFlagRDMAReadLocalInvalidate, 1); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("send with RDMA_READ_LOCAL_INVALIDATE: %v", err)
	}
	if err := x.qp.WriteWithImmediate(nil, nil, 0, 0, OpFlagAllowRemoteRead, 1); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("write with ALLOW_REMOTE_READ: %v", err)
	}
}

// TestImmediateExtensionAllocatesNothing: posting a WRITE with immediate
// and polling both completions allocates nothing.
func TestImmediateExtensionAllocatesNothing(t *testing.T) {
	x, y := pipePair(t, true)
	src, dst, rbuf := make([]byte, 8), make([]byte, 8), make([]byte, 8)
	smr, _ := x.pd.RegisterMR(src, 0)
	dmr, _ := y.pd.RegisterMR(dst, MRFlagAllowRemoteWrite)
	rmr, _ := y.pd.RegisterMR(rbuf, MRFlagAllowLocalWrite)
	s, _ := smr.SGE(0, 8)
	r, _ := rmr.SGE(0, 8)
	sgl, rgl := []SGE{s}, []SGE{r}
	var out [1]ResultEx
	var imm uint32
	round := func() {
		imm++
		if err := y.qp.Receive(nil, rgl); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.WriteWithImmediate(nil, sgl, dmr.Addr(), dmr.RemoteToken(), 0, imm); err != nil {
			t.Fatal(err)
		}
		for x.icq.GetResultsEx(out[:]) == 0 {
			runtime.Gosched()
		}
		for y.rcq.GetResultsEx(out[:]) == 0 {
			runtime.Gosched()
		}
		if out[0].Immediate != imm {
			t.Fatalf("immediate %d, want %d", out[0].Immediate, imm)
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per WRITE with immediate, want 0", n)
	}
}
