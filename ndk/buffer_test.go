package ndk

import (
	"bytes"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestAllocBufferTransmitsInPlace runs WRITE and SEND between two adapters
// on a 9000-byte-MTU veth pair (multi-buffer sockets) from an AllocBuffer
// buffer and from Go memory: both arrive intact, the buffer's payload
// leaves referenced in place (the port counts every byte of it) and the
// Go memory's is copied.
func TestAllocBufferTransmitsInPlace(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 9000, StaticNeighbours: true})
	open := func(h *harness.Host) *side {
		var a *Adapter
		if err := h.Do(func() error {
			var err error
			a, err = Open(h.Link, Options{})
			return err
		}); err != nil {
			t.Fatalf("open %s: %v", h.Name, err)
		}
		t.Cleanup(a.Close)
		return newSide(t, a)
	}
	x, y := open(p.A), open(p.B)
	if err := x.qp.ConnectOOB(y.qp.LocalEndpoint(), ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.ConnectOOB(x.qp.LocalEndpoint(), ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	referenced := func() uint64 {
		return x.a.provider().(*inproc.Provider).Ports()[0].(*port.XSK).Stats().TxRefBytes
	}

	const n = 64<<10 + 100 // 16 full 4096-byte packets and a short one
	buf, err := x.a.AllocBuffer(x.pd, n, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	heap := make([]byte, n)
	heapMR, err := x.pd.RegisterMR(heap, 0)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, n)
	dstMR, err := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite|MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i, src := range []*MR{buf.MR, heapMR} {
		b := src.Bytes()
		for j := range b {
			b[j] = byte(j*13 + i)
		}
		sge, _ := src.SGE(0, n)
		before := referenced()
		if err := x.qp.Write(nil, []SGE{sge}, dstMR.Addr(), dstMR.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, x.icq); r.Status != StatusSuccess {
			t.Fatalf("write %d: %v", i, r.Status)
		}
		y.a.Stats() // orders our reads with the engine that placed the bytes
		if !bytes.Equal(dst, b) {
			t.Fatalf("write %d: destination differs from the source", i)
		}
		// SEND the first 5000 bytes: one full packet and one short one.
		rsge, _ := dstMR.SGE(0, n)
		if err := y.qp.Receive(nil, []SGE{rsge}); err != nil {
			t.Fatal(err)
		}
		clear(dst)
		ssge, _ := src.SGE(0, 5000)
		if err := x.qp.Send(nil, []SGE{ssge}, 0); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, y.rcq); r.Status != StatusSuccess || r.BytesTransferred != 5000 {
			t.Fatalf("send %d: %+v", i, r)
		}
		if r := waitResult(t, x.icq); r.Status != StatusSuccess {
			t.Fatalf("send %d: %v", i, r.Status)
		}
		if !bytes.Equal(dst[:5000], b[:5000]) {
			t.Fatalf("send %d: received bytes differ", i)
		}
		// Our reads happen before the peer engine's next placement, a
		// causality through the kernel the race detector cannot see.
		y.a.Stats()
		got := referenced() - before
		// The full packets go in place; the last ones (100 and 904
		// bytes) are under port.MinTxReference and copied.
		if want := uint64(16*4096 + 4096); i == 0 && got != want {
			t.Fatalf("AllocBuffer source: %d payload bytes sent in place, want %d", got, want)
		}
		if i == 1 && got != 0 {
			t.Fatalf("Go memory source: %d payload bytes sent in place, want 0", got)
		}
	}
}
