package port

import (
	"bytes"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// slotFrame places a SEND_ONLY frame's payload as the whole allocation of
// slot i of e's pool (as ndk's AllocBuffer lays it out) and returns the
// frame and its segments: the header and trailer on the Go heap, the
// payload in the pool.
func slotFrame(t testing.TB, e, to *xskEnd, i, psn, n int) (frame []byte, segs [][]byte) {
	t.Helper()
	f := roceFrame(t, e.host, to.host, psn, pattern(n, byte(psn)))
	hl := len(f) - n - rocev2.ICRCLen
	off := i*TxSlotSize + TxHeadroom
	pay := e.ref[off : off+n : off+n]
	copy(pay, f[hl:hl+n])
	e.port.slots.Mark(i, n)
	return f, [][]byte{bytes.Clone(f[:hl]), pay, bytes.Clone(f[hl+n:])}
}

// TestXSKSlottedOneDescriptor sends a frame whose payload is one whole
// allocation of the pool on a socket without multi-buffer: it leaves as
// one descriptor starting in the allocation's headroom, the header bytes
// and the ICRC written around the payload, nothing else of the pool
// touched, no port frame used; it arrives whole with a valid ICRC, the
// payload read in place, and the completion gives the allocation's mark
// back.
func TestXSKSlottedOneDescriptor(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver, ref: true, slots: true})
	for i := range a.ref {
		a.ref[i] = byte(i*5 + 1)
	}
	before := bytes.Clone(a.ref)
	const n, slot = 1400, 3
	f, segs := slotFrame(t, a, b, slot, 1, n)
	hl := len(segs[0])
	off := slot*TxSlotSize + TxHeadroom
	copy(before[off:], segs[1]) // the user's own write
	if err := a.port.Transmit(segs); err != nil {
		t.Fatal(err)
	}
	if a.port.txInFlight != 1 || a.port.txOut != 0 {
		t.Fatalf("after Transmit %d descriptors and %d port frames in flight, want 1 and 0", a.port.txInFlight, a.port.txOut)
	}
	ring := a.port.txDescs[0]
	if base := uint64(len(a.umem.Bytes()) - len(a.ref)); ring.Addr != base+uint64(off-hl) || ring.Len != uint32(len(f)) {
		t.Fatalf("descriptor %+v, want addr %#x len %d", ring, base+uint64(off-hl), len(f))
	}
	if !bytes.Equal(a.ref[off-hl:off+n+rocev2.ICRCLen], f) {
		t.Fatal("the pool does not hold the frame around the payload: headers in the headroom, ICRC behind")
	}
	// Everything but the headroom's header bytes and the tailroom's ICRC
	// is as the user left it.
	after := bytes.Clone(a.ref)
	copy(after[off-hl:off], before[off-hl:off])
	copy(after[off+n:off+n+rocev2.ICRCLen], before[off+n:off+n+rocev2.ICRCLen])
	if !bytes.Equal(after, before) {
		t.Fatal("bytes of the pool outside the frame changed")
	}
	if !a.port.slots.busy[slot].CompareAndSwap(ring.Addr+1, ring.Addr+1) {
		t.Fatalf("slot %d's mark %d, want the descriptor's", slot, a.port.slots.busy[slot].Load())
	}
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, b.port, 1)[0]
	if !sameFrame(got, f) {
		t.Fatalf("received %d bytes, not the %d-byte frame", len(got), len(f))
	}
	var p rocev2.Packet
	if err := rocev2.Parse(got[:len(f)], &p); err != nil {
		t.Fatalf("received frame: %v", err)
	}
	st := a.port.Stats()
	if st.TxFrames != 1 || st.TxSlotted != 1 || st.TxRefFrames != 1 || st.TxRefBytes != n || st.TxChained != 0 {
		t.Fatalf("stats %+v, want one slotted frame of %d bytes in place", st, n)
	}
	// Copy mode completes within the kick.
	if a.port.txInFlight != 0 || a.port.slots.busy[slot].Load() != 0 {
		t.Fatalf("after completion %d descriptors in flight, slot mark %d", a.port.txInFlight, a.port.slots.busy[slot].Load())
	}

	// In place: what the allocation holds at Flush is what leaves.
	f2, segs2 := slotFrame(t, a, b, slot, 2, n)
	if err := a.port.Transmit(segs2); err != nil {
		t.Fatal(err)
	}
	segs2[1][0] ^= 0xff
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	got = receive(t, b.port, 1)[0]
	if got[hl] != f2[hl]^0xff || !bytes.Equal(got[hl+1:len(f2)], f2[hl+1:]) {
		t.Fatal("the payload was not read where it lies")
	}
}

// TestXSKSlottedFallsBackToCopy: a frame whose payload is not exactly one
// allocation (a part of one, an allocation of another length), whose
// allocation's headroom is in flight (the same buffer sent twice before a
// completion, or held by another port sharing the pool), or whose header
// is too long for the headroom is copied; all arrive intact.
func TestXSKSlottedFallsBackToCopy(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver, ref: true, slots: true})
	const n = 1000
	f, segs := slotFrame(t, a, b, 0, 1, n)
	var frames [][]byte
	send := func(segs [][]byte) {
		t.Helper()
		if err := a.port.Transmit(segs); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, bytes.Join(segs, nil))
	}
	// Twice before a Flush: the second copies.
	send(segs)
	send(segs)
	// A part of the allocation.
	send([][]byte{segs[0], segs[1][:n-1], segs[2]})
	send([][]byte{segs[0], segs[1][1:], segs[2]})
	// The allocation says another length.
	_, other := slotFrame(t, a, b, 1, 2, n)
	a.port.slots.Mark(1, n+4)
	send(other)
	// Held by another port.
	_, held := slotFrame(t, a, b, 2, 3, n)
	if !a.port.slots.take(2, 12345) {
		t.Fatal("slot 2 taken")
	}
	send(held)
	// A header as long as the headroom (not a frame the peer's
	// program takes: it is counted, not received).
	long := append(bytes.Repeat([]byte{0}, TxHeadroom-len(segs[0])), segs[0]...)
	send([][]byte{long, segs[1], segs[2]})
	frames = frames[:len(frames)-1]
	st := a.port.Stats()
	if st.TxSlotted != 0 || st.TxRefFrames != 0 || st.TxSlotBusy != 0 {
		t.Fatalf("stats before Flush %+v: counted already", st)
	}
	if a.port.txInFlight != uint32(len(frames)+1) || a.port.txOut != uint32(len(frames)) {
		t.Fatalf("%d descriptors, %d port frames in flight; want %d and %d", a.port.txInFlight, a.port.txOut, len(frames)+1, len(frames))
	}
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, b.port, len(frames))
	for i := range frames {
		if !sameFrame(got[i], frames[i]) {
			t.Fatalf("frame %d arrived changed", i)
		}
	}
	if !bytes.Equal(frames[0], f) {
		t.Fatal("the slotted frame is not the frame")
	}
	st = a.port.Stats()
	if st.TxSlotted != 1 || st.TxRefFrames != 1 || st.TxRefBytes != n || st.TxSlotBusy != 2 {
		t.Fatalf("stats %+v, want 1 slotted frame and 2 copied for a busy mark", st)
	}
	if a.port.slots.busy[0].Load() != 0 || a.port.slots.busy[2].Load() != 12345+1 {
		t.Fatalf("marks %d, %d: want the completed one back, the other port's kept", a.port.slots.busy[0].Load(), a.port.slots.busy[2].Load())
	}
}

// TestXSKSlottedChunkBoundary: on a UMEM of 2048-byte chunks an
// allocation whose frame would cross a chunk cannot be one descriptor
// (xp_aligned_validate_desc); a multi-buffer socket sends it as a
// reference chain instead, and one within a chunk goes slotted.
func TestXSKSlottedChunkBoundary(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{MTU: 9000}, xskOptions{mode: loader.AttachDriver, multi: true, ref: true, slots: true, frameSize: 2048})
	fBig, big := slotFrame(t, a, b, 0, 1, 3000)
	fSmall, small := slotFrame(t, a, b, 1, 2, 1500)
	for _, segs := range [][][]byte{big, small} {
		if err := a.port.Transmit(segs); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, b.port, 2)
	if !bytes.Equal(got[0], fBig) || !bytes.Equal(got[1], fSmall) {
		t.Fatal("frames arrived changed")
	}
	if st := a.port.Stats(); st.TxSlotted != 1 || st.TxRefFrames != 2 || st.TxRefBytes != 4500 || st.TxChained != 1 {
		t.Fatalf("stats %+v: want the 3000-byte payload chained in place, the 1500-byte one slotted", st)
	}
}

// TestXSKSlottedAllocatesNothing sends slotted frames under
// testing.AllocsPerRun.
func TestXSKSlottedAllocatesNothing(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver, ref: true, slots: true})
	_, segs := slotFrame(t, a, b, 5, 1, 1024)
	var rx [4][]byte
	step := func() {
		if err := a.port.Transmit(segs); err != nil {
			t.Fatal(err)
		}
		if err := a.port.Flush(); err != nil {
			t.Fatal(err)
		}
		for range 1000 { // bounded: the frame is usually there at once
			if b.port.Receive(rx[:]) > 0 {
				break
			}
			if err := b.port.Wait(time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		b.port.Release()
	}
	step()
	if n := testing.AllocsPerRun(200, step); n != 0 {
		t.Fatalf("%v allocations per slotted frame", n)
	}
	if st := a.port.Stats(); st.TxSlotted != 202 || st.TxSlotBusy != 0 {
		t.Fatalf("stats %+v: want every frame slotted", st)
	}
}

// BenchmarkXSKSlotted measures what Transmit itself costs per 1000-byte
// frame whose payload is a whole allocation of the pool, sent as one
// descriptor over its headroom, against the same frame copied into a
// port frame (the payload on the Go heap), in one run on one veth pair.
// Only the Transmit calls are timed: the kick, veth's copy-mode transmit
// and the receive are the kernel's either way. It reports ns/transmit and,
// for slotted, slotted/copy: the ratio of the two.
func BenchmarkXSKSlotted(b *testing.B) {
	_, x, y := xskPair(b, harness.Config{}, xskOptions{mode: loader.AttachDriver, ref: true, slots: true})
	const n, batch = 1000, 32
	var segs [batch][][]byte
	for i := range segs {
		_, segs[i] = slotFrame(b, x, y, i, i, n)
	}
	var rx [64][]byte
	run := func(b *testing.B, frames [][][]byte) float64 {
		var spent time.Duration
		sent := 0
		for sent < b.N {
			k := min(batch, b.N-sent)
			start := time.Now()
			for i := range k {
				if err := x.port.Transmit(frames[i]); err != nil {
					b.Fatal(err)
				}
			}
			spent += time.Since(start)
			sent += k
			if err := x.port.Flush(); err != nil {
				b.Fatal(err)
			}
			for got := 0; got < k; {
				m := y.port.Receive(rx[:])
				got += m
				y.port.Release()
				if m == 0 {
					if err := y.port.Wait(time.Millisecond); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		ns := float64(spent.Nanoseconds()) / float64(b.N)
		b.ReportMetric(ns, "ns/transmit")
		return ns
	}
	var copied [batch][][]byte
	for i := range copied {
		copied[i] = [][]byte{segs[i][0], bytes.Clone(segs[i][1]), segs[i][2]}
	}
	var copyNS float64
	b.Run("copy", func(b *testing.B) { copyNS = run(b, copied[:]) })
	b.Run("slotted", func(b *testing.B) {
		before := x.port.Stats().TxSlotted
		ns := run(b, segs[:])
		if got := x.port.Stats().TxSlotted - before; got != uint64(b.N) {
			b.Fatalf("%d of %d frames slotted", got, b.N)
		}
		if copyNS > 0 {
			b.ReportMetric(ns/copyNS, "slotted/copy")
		}
	})
}
