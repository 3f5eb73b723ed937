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
	x, y := vethSide(t, p.A), vethSide(t, p.B)
	connectSides(t, x, y)
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

// TestBufferPoolHeadroom checks AllocBuffer's layout with the ports'
// TxSlots: a small allocation starts port.TxHeadroom bytes into its page,
// its slice ends at its length (no room reachable), its slot is marked
// with its length until freed; a large one stays page-aligned and
// unmarked; freed memory coalesces.
func TestBufferPoolHeadroom(t *testing.T) {
	mem := make([]byte, 8*port.TxSlotSize)
	slots, err := port.NewTxSlots(len(mem))
	if err != nil {
		t.Fatal(err)
	}
	p := newBufferPool(mem, slots)
	at := func(b []byte) int { return int(addrOf(b) - addrOf(mem)) }
	small, ok := p.alloc(port.MaxTxSlotted)
	if !ok || at(small) != port.TxHeadroom || len(small) != port.MaxTxSlotted || cap(small) != port.MaxTxSlotted {
		t.Fatalf("small allocation at %d, len %d cap %d", at(small), len(small), cap(small))
	}
	if i, ok := slots.Whole(port.TxHeadroom, port.MaxTxSlotted); !ok || i != 0 {
		t.Fatal("slot 0 does not record the small allocation")
	}
	big, ok := p.alloc(port.MaxTxSlotted + 1)
	if !ok || at(big) != port.TxSlotSize || cap(big) != port.MaxTxSlotted+1 {
		t.Fatalf("big allocation at %d cap %d, want page-aligned at %d", at(big), cap(big), port.TxSlotSize)
	}
	if _, ok := slots.Whole(port.TxSlotSize+port.TxHeadroom, port.MaxTxSlotted+1); ok {
		t.Fatal("a big allocation is marked")
	}
	tiny, ok := p.alloc(1)
	if !ok || at(tiny) != 2*port.TxSlotSize+port.TxHeadroom {
		t.Fatalf("tiny allocation at %d", at(tiny))
	}
	p.release(small)
	if _, ok := slots.Whole(port.TxHeadroom, port.MaxTxSlotted); ok {
		t.Fatal("a freed allocation is still marked")
	}
	p.release(big)
	p.release(tiny)
	if len(p.free) != 1 || p.free[0] != (span{0, len(mem)}) {
		t.Fatalf("free list %v after freeing everything", p.free)
	}
	// Without slots (a daemon's arena) nothing moves.
	q := newBufferPool(mem, nil)
	if b, _ := q.alloc(100); at(b) != 0 || cap(b) != 100 {
		t.Fatalf("allocation without slots at %d", at(b))
	}
}

// TestAllocBufferSlotted runs SENDs and WRITEs of whole AllocBuffer
// buffers that fit one packet between two adapters on a 1500-byte-MTU
// veth pair, whose sockets have no multi-buffer: each packet leaves as one
// descriptor around the buffer (the port counts every payload byte in
// place) and arrives intact (the receiving engine verified its ICRC); a
// part of a buffer, and Go memory, are copied.
func TestAllocBufferSlotted(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{StaticNeighbours: true})
	x, y := vethSide(t, p.A), vethSide(t, p.B)
	connectSides(t, x, y)
	xsk := x.a.provider().(*inproc.Provider).Ports()[0].(*port.XSK)
	if xsk.Socket().MultiBuffer() {
		t.Fatal("a 1500-byte MTU socket has multi-buffer: the test would not show the one-descriptor path")
	}
	stats := func() port.XSKStats {
		x.a.Stats() // the engine publishes its port's counts per batch
		return xsk.Stats()
	}
	pmtu := x.a.provider().PathMTU().Bytes()
	sizes := []int{1, 100, pmtu}
	dst := make([]byte, pmtu)
	dstMR, err := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite|MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	var whole uint64
	before := stats()
	for k, n := range sizes {
		buf, err := x.a.AllocBuffer(x.pd, n, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		for j := range b {
			b[j] = byte(j*7 + k)
		}
		sge, _ := buf.SGE(0, n)
		clear(dst)
		if err := x.qp.Write(nil, []SGE{sge}, dstMR.Addr(), dstMR.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, x.icq); r.Status != StatusSuccess {
			t.Fatalf("write %d B: %v", n, r.Status)
		}
		y.a.Stats()
		if !bytes.Equal(dst[:n], b) {
			t.Fatalf("write %d B: destination differs", n)
		}
		// Our reads happen before the peer engine's next placement, a
		// causality through the kernel the race detector cannot see.
		y.a.Stats()
		rsge, _ := dstMR.SGE(0, pmtu)
		for _, part := range []bool{false, true} {
			if part && n < 2 {
				continue
			}
			if err := y.qp.Receive(nil, []SGE{rsge}); err != nil {
				t.Fatal(err)
			}
			clear(dst)
			m := n
			if part {
				m = n - 1 // not the whole allocation: copied
			} else {
				whole += uint64(n)
			}
			ssge, _ := buf.SGE(0, m)
			if err := x.qp.Send(nil, []SGE{ssge}, 0); err != nil {
				t.Fatal(err)
			}
			if r := waitResult(t, y.rcq); r.Status != StatusSuccess || r.BytesTransferred != uint32(m) {
				t.Fatalf("send %d of %d B: %+v", m, n, r)
			}
			if r := waitResult(t, x.icq); r.Status != StatusSuccess {
				t.Fatalf("send %d of %d B: %v", m, n, r.Status)
			}
			y.a.Stats()
			if !bytes.Equal(dst[:m], b[:m]) {
				t.Fatalf("send %d of %d B: received bytes differ", m, n)
			}
			y.a.Stats()
		}
		whole += uint64(n) // the WRITE
		if err := buf.Free(); err != nil {
			t.Fatal(err)
		}
	}
	// Go memory of the same sizes: copied.
	heap := make([]byte, pmtu)
	heapMR, err := x.pd.RegisterMR(heap, 0)
	if err != nil {
		t.Fatal(err)
	}
	sge, _ := heapMR.SGE(0, pmtu)
	if err := x.qp.Write(nil, []SGE{sge}, dstMR.Addr(), dstMR.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, x.icq); r.Status != StatusSuccess {
		t.Fatalf("heap write: %v", r.Status)
	}
	st := stats()
	if got := st.TxRefBytes - before.TxRefBytes; got != whole {
		t.Fatalf("%d payload bytes sent in place, want %d (the whole buffers'); stats %+v", got, whole, st)
	}
	if got := st.TxSlotted - before.TxSlotted; got != uint64(2*len(sizes)) || st.TxSlotted != st.TxRefFrames {
		t.Fatalf("%d frames slotted, want %d; stats %+v", got, 2*len(sizes), st)
	}
}
