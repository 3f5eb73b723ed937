package afxdp

import (
	"testing"
)

// ringPair is a TX ring and an RX ring over plain memory, with the kernel's
// side reduced to moving its index.
type ringPair struct {
	txw, rxw *ringWords
	tx       *TxQueue
	rx       *RxQueue
	fill     *FillQueue
	fw       *ringWords
	frames   *FrameAllocator
	umem     *UMEM
}

func newRingPair(tb testing.TB) *ringPair {
	u, err := NewUMEM(UMEMConfig{NumFrames: 256})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { u.Close() })
	p := &ringPair{frames: u.Allocator(), umem: u}
	start := uint32(1<<32 - 1000) // the loops below cross the wrap
	p.txw = words(start, start)
	p.rxw = words(start, start)
	p.fw = words(start, start)
	p.tx = newTxQueue(&p.txw.prod, &p.txw.cons, &p.txw.flags, make([]Desc, 256))
	p.rx = newRxQueue(&p.rxw.prod, &p.rxw.cons, &p.rxw.flags, make([]Desc, 256))
	p.fill = newFillQueue(&p.fw.prod, &p.fw.cons, &p.fw.flags, make([]uint64, 256))
	return p
}

// txBatch is the per-batch TX work of an engine: reserve, write, submit;
// then the kernel consumes.
func (p *ringPair) txBatch(n uint32) {
	i, got := p.tx.Reserve(n)
	for j := uint32(0); j < got; j++ {
		p.tx.Set(i+j, Desc{Addr: uint64(j) << 12, Len: 64})
	}
	p.tx.Submit()
	p.txw.cons.Store(p.txw.prod.Load())
}

// rxBatch has the kernel produce n descriptors, then does the per-batch RX
// work of an engine: peek, read (with packet boundaries), release.
func (p *ringPair) rxBatch(n uint32) (bytes uint64) {
	p.rxw.prod.Store(p.rxw.cons.Load() + n)
	i, got := p.rx.Peek(n)
	for j := uint32(0); j < got; {
		k := p.rx.NextPacket(i+j, got-j)
		if k == 0 {
			break
		}
		bytes += uint64(len(p.umem.Data(p.rx.Get(i + j))))
		j += k
	}
	p.rx.Release(got)
	return bytes
}

// frameCycle allocates frames into the fill ring and frees them back, as
// the kernel would after receive.
func (p *ringPair) frameCycle(n uint32) {
	got := p.fill.FillFrom(p.frames, n)
	prod := p.fw.prod.Load()
	for i := prod - got; i != prod; i++ {
		_ = p.frames.Free(p.fill.entries[i&p.fill.mask])
	}
	p.fw.cons.Store(prod)
}

func TestRingHotPathAllocatesNothing(t *testing.T) {
	p := newRingPair(t)
	tests := []struct {
		name string
		fn   func()
	}{
		{"tx reserve/set/submit", func() { p.txBatch(32) }},
		{"rx peek/get/release", func() { p.rxBatch(32) }},
		{"alloc/fill/free", func() { p.frameCycle(32) }},
		{"frame views", func() {
			_ = p.umem.Frame(4096 + 17)
			_ = p.umem.Data(Desc{Addr: 4096 + 256, Len: 1000})
		}},
		{"free errors", func() {
			_ = p.frames.Free(1 << 40)
			_ = p.frames.Free(0)
		}},
	}
	for _, tc := range tests {
		if n := testing.AllocsPerRun(1000, tc.fn); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", tc.name, n)
		}
	}
}

func BenchmarkTxReserveSubmit(b *testing.B) {
	p := newRingPair(b)
	b.ReportAllocs()
	for b.Loop() {
		p.txBatch(32)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*32), "ns/desc")
}

func BenchmarkRxPeekRelease(b *testing.B) {
	p := newRingPair(b)
	b.ReportAllocs()
	for b.Loop() {
		p.rxBatch(32)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*32), "ns/desc")
}

func BenchmarkFrameAllocFillFree(b *testing.B) {
	p := newRingPair(b)
	b.ReportAllocs()
	for b.Loop() {
		p.frameCycle(32)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*32), "ns/frame")
}
