package daemon_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestUCThroughDaemon: ndk.QPConfig.UC through a daemon, as in process
// (ndk's TestUCOverPipe): a client's UC QP connects through the CM to a
// UC QP of B, SENDs both ways and a WRITE with immediate land, Read, the
// atomics and SendAndInvalidate fail with STATUS_NOT_SUPPORTED and a UD QP
// that is also UC is refused.
func TestUCThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	_ = c.qp.Close()
	var err error
	if c.qp, err = c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 64, InitiatorQueueDepth: 64,
		MaxReceiveRequestSGE: 2, MaxInitiatorRequestSGE: 2, UC: true}); err != nil {
		t.Fatal(err)
	}
	if !c.qp.UC() {
		t.Fatal("QPConfig.UC through the daemon made a QP that is not UC")
	}
	pr := bd.connectQP(t, c, 7050, nil, true)
	b := bd.b

	// B -> client SEND.
	rs, _ := c.mr.SGE(0, 512)
	if err := c.qp.Receive("r0", []ndk.SGE{rs}); err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("uc!"), 100)
	copy(pr.mem, msg)
	bs, _ := pr.mr.SGE(0, len(msg))
	if err := pr.qp.Send("s0", []ndk.SGE{bs}, 0); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c.rcq, "client receive"); r.Status != ndk.StatusSuccess || r.RequestContext != "r0" || int(r.BytesTransferred) != len(msg) {
		t.Fatalf("client receive %+v", r)
	}
	if !bytes.Equal(c.mem[:len(msg)], msg) {
		t.Fatal("received bytes differ")
	}
	wait(t, b.ICQ, "peer send")

	// client -> B WRITE with immediate: B's receive proves the placement
	// (the client's completion only says the packets left).
	for i := range 3000 {
		c.mem[4096+i] = byte(i * 5)
	}
	if err := pr.qp.Receive("imm", nil); err != nil {
		t.Fatal(err)
	}
	ws, _ := c.mr.SGE(4096, 3000)
	if err := c.qp.WriteWithImmediate("w", []ndk.SGE{ws}, pr.mr.Addr()+64, pr.mr.RemoteToken(), 0, 0xC0FFEE); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c.icq, "write"); r.Status != ndk.StatusSuccess || r.Type != ndk.OpWrite {
		t.Fatalf("write completion %+v", r)
	}
	if r := wait(t, b.RCQ, "peer's write receive"); r.Status != ndk.StatusSuccess || r.Immediate != 0xC0FFEE || r.BytesTransferred != 3000 {
		t.Fatalf("peer's receive %+v", r)
	}
	pr.settle()
	if !bytes.Equal(pr.mem[64:64+3000], c.mem[4096:4096+3000]) {
		t.Fatal("written bytes differ at the peer")
	}

	one, _ := c.mr.SGE(8192, 8)
	for name, post := range map[string]func() error{
		"read":                func() error { return c.qp.Read("r", []ndk.SGE{one}, pr.mr.Addr(), pr.mr.RemoteToken(), 0) },
		"compare and swap":    func() error { return c.qp.CompareAndSwap("c", one, pr.mr.Addr(), pr.mr.RemoteToken(), 0, 1, 0) },
		"fetch and add":       func() error { return c.qp.FetchAndAdd("f", one, pr.mr.Addr(), pr.mr.RemoteToken(), 1, 0) },
		"send and invalidate": func() error { return c.qp.SendAndInvalidate("i", []ndk.SGE{one}, 0, pr.mr.RemoteToken()) },
	} {
		if err := post(); !errors.Is(err, ndk.ErrNotSupported) {
			t.Errorf("%s on a UC QP through the daemon: %v, want STATUS_NOT_SUPPORTED", name, err)
		}
	}
	if _, err := c.pd.CreateUDQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4, UC: true}, 0x11111111); !errors.Is(err, ndk.ErrInvalidParameter) {
		t.Fatalf("a UD QP with UC through the daemon: %v, want STATUS_INVALID_PARAMETER", err)
	}
}
