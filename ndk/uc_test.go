package ndk

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
)

// ucSides replaces x's and y's QPs by UC QPs.
func ucSides(t *testing.T, x, y *side) {
	t.Helper()
	for _, s := range []*side{x, y} {
		_ = s.qp.Close()
		var err error
		if s.qp, err = s.pd.CreateQP(QPConfig{ReceiveCQ: s.rcq, InitiatorCQ: s.icq, Context: "uc",
			ReceiveQueueDepth: 64, InitiatorQueueDepth: 64, MaxReceiveRequestSGE: 4, MaxInitiatorRequestSGE: 4, InlineDataSize: 128, UC: true}); err != nil {
			t.Fatal(err)
		}
		if !s.qp.UC() {
			t.Fatal("QPConfig.UC made a QP that is not UC")
		}
	}
}

// TestUCOverPipe: two in-process adapters connect UC QPs through the CM,
// as RC ones, and move Sends both ways and a Write with immediate; Read,
// the atomics and SendAndInvalidate are refused with
// STATUS_NOT_SUPPORTED; a QP cannot be both UC and UD.
func TestUCOverPipe(t *testing.T) {
	x, y := cmPipePair(t, nil, cm.Params{})
	ucSides(t, x, y)
	_, ch := listen(t, y, netip.AddrPortFrom(pipeIPB, 7471), nil)
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Connect(ctx, x.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 7471), 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.err != nil {
		t.Fatal(r.err)
	}
	sendOne(t, x, y, []byte("unacknowledged, and there"))
	sendOne(t, y, x, bytes.Repeat([]byte("back over several packets "), 200))

	src := bytes.Repeat([]byte{0x5A}, 3000)
	dst := make([]byte, 3000)
	smr, err := x.pd.RegisterMR(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	dmr, err := y.pd.RegisterMR(dst, MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := smr.SGE(0, len(src))
	if err := y.qp.Receive("imm", nil); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.WriteWithImmediate("w", []SGE{ss}, dmr.Addr(), dmr.RemoteToken(), 0, 0x1234); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, x.icq); r.Status != StatusSuccess || r.Type != OpWrite {
		t.Fatalf("write: %+v", r)
	}
	if r := waitResult(t, y.rcq); r.Status != StatusSuccess || r.Flags&ResultWithImmediate == 0 || r.Immediate != 0x1234 || r.BytesTransferred != 3000 {
		t.Fatalf("write's receive: %+v", r)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("written bytes differ")
	}

	buf := make([]byte, 8)
	bmr, err := x.pd.RegisterMR(buf, MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	bs, _ := bmr.SGE(0, 8)
	for name, post := range map[string]func() error{
		"read":                func() error { return x.qp.Read("r", []SGE{bs}, dmr.Addr(), dmr.RemoteToken(), 0) },
		"compare and swap":    func() error { return x.qp.CompareAndSwap("c", bs, dmr.Addr(), dmr.RemoteToken(), 0, 1, 0) },
		"fetch and add":       func() error { return x.qp.FetchAndAdd("f", bs, dmr.Addr(), dmr.RemoteToken(), 1, 0) },
		"send and invalidate": func() error { return x.qp.SendAndInvalidate("i", []SGE{bs}, 0, dmr.RemoteToken()) },
	} {
		if err := post(); !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s on a UC QP: %v, want STATUS_NOT_SUPPORTED", name, err)
		}
	}
	if _, err := x.pd.CreateUDQP(QPConfig{ReceiveCQ: x.rcq, InitiatorCQ: x.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4, UC: true}, 0x11111111); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("a UD QP with UC: %v, want STATUS_INVALID_PARAMETER", err)
	}
}
