package port

import (
	"errors"

	"github.com/ndkxdp/ndkxdp/afxdp"
)

// Transmit implements Port. A frame of header, payload and trailer whose
// payload is exactly one allocation of the pool (TxSlots) leaves as one
// descriptor around it (slotted). Otherwise Transmit copies the frame
// into one UMEM frame, or a chain of them on a multi-buffer socket, and
// reserves TX descriptors; Flush publishes them. There, segments inside
// TxReference are not copied but referenced by descriptors of their own.
// It never blocks: ErrTxFull when the TX ring, the TX frame budget or the
// completion ring is exhausted.
func (x *XSK) Transmit(segs [][]byte) error {
	if x.closed.Load() {
		return ErrClosed
	}
	n, copied, refd := 0, 0, uint32(0)
	for i, s := range segs {
		n += len(s)
		if i < 32 && x.referable(s) {
			refd |= 1 << i
		} else {
			copied += len(s)
		}
	}
	switch {
	case n == 0:
		return ErrEmptyFrame
	case n > x.maxFrame:
		return ErrTooLarge
	}
	if x.slots != nil && len(segs) == 3 {
		if sent, err := x.slotted(segs, n); sent {
			return err
		}
	}
	k := x.layout(segs, refd, false)
	if refd != 0 && k > maxChain {
		refd, copied = 0, n // too fragmented to reference: copy it all
		k = x.layout(segs, 0, false)
	}
	frames := uint32((copied + x.chunk - 1) / x.chunk)
	if x.txOut+frames > x.txBudget || x.txInFlight+uint32(k) > x.comp.Size() {
		x.reclaim()
	}
	if x.txOut+frames > x.txBudget || x.frames.Available() < frames || x.txInFlight+uint32(k) > x.comp.Size() {
		x.local.TxFull++
		return ErrTxFull
	}
	start, got := x.tx.Reserve(uint32(k))
	if got < uint32(k) {
		x.tx.Cancel(got)
		x.local.TxFull++
		return ErrTxFull
	}
	x.layout(segs, refd, true)
	x.tx.SetPacket(start, x.txDescs[:k])
	x.txOut += frames
	x.txInFlight += uint32(k)
	x.local.TxFrames++
	if k > 1 {
		x.local.TxChained++
	}
	if refd != 0 {
		x.local.TxRefFrames++
		x.local.TxRefBytes += uint64(n - copied)
	}
	return nil
}

// slotted sends segs (header, payload, trailer; n bytes) as one
// descriptor when the payload is exactly one allocation of the pool and
// the header and trailer fit its headroom and tailroom inside one chunk (a
// descriptor never crosses one: xp_aligned_validate_desc,
// net/xdp/xsk_queue.h). It takes the allocation's mark first, so that no
// other transmission writes that headroom until the kernel completes this
// descriptor (reclaim). It reports false when the frame must be copied.
func (x *XSK) slotted(segs [][]byte, n int) (bool, error) {
	hdr, pay, tail := segs[0], segs[1], segs[2]
	if len(hdr) >= TxHeadroom || len(tail) > TxTailroom || len(pay) == 0 {
		return false, nil
	}
	off, ok := umemOffset(x.umem.Bytes(), pay)
	if !ok || off < x.refLo || off+uint64(len(pay)) > x.refHi {
		return false, nil
	}
	i, ok := x.slots.Whole(off-x.refLo, len(pay))
	if !ok {
		return false, nil
	}
	addr := off - uint64(len(hdr))
	if chunk := uint64(x.chunk); addr/chunk != (addr+uint64(n)-1)/chunk {
		return false, nil
	}
	if x.txInFlight+1 > x.comp.Size() {
		x.reclaim()
		if x.txInFlight+1 > x.comp.Size() {
			x.local.TxFull++
			return true, ErrTxFull
		}
	}
	if !x.slots.take(i, addr) {
		x.local.TxSlotBusy++
		return false, nil
	}
	start, got := x.tx.Reserve(1)
	if got < 1 {
		x.tx.Cancel(got)
		x.slots.done(i, addr)
		x.local.TxFull++
		return true, ErrTxFull
	}
	mem := x.umem.Bytes()
	copy(mem[addr:off], hdr)
	end := off + uint64(len(pay))
	copy(mem[end:end+uint64(len(tail))], tail)
	x.txDescs[0] = afxdp.Desc{Addr: addr, Len: uint32(n)}
	x.tx.SetPacket(start, x.txDescs[:1])
	x.txInFlight++
	x.local.TxFrames++
	x.local.TxRefFrames++
	x.local.TxRefBytes += uint64(len(pay))
	x.local.TxSlotted++
	return true, nil
}

// referable reports whether Transmit may send s in place: a multi-buffer
// socket, a segment worth a descriptor, wholly inside TxReference.
func (x *XSK) referable(s []byte) bool {
	if x.refHi == 0 || len(s) < MinTxReference || !x.sock.MultiBuffer() {
		return false
	}
	off, ok := umemOffset(x.umem.Bytes(), s)
	return ok && off >= x.refLo && off+uint64(len(s)) <= x.refHi
}

// layout lays segs out as descriptors and returns how many: the segments
// whose bit is set in refd in place, split at chunk boundaries (a
// descriptor never crosses one: xp_aligned_validate_desc,
// net/xdp/xsk_queue.h); the others copied back to back into frames from
// the allocator, so that a header and a trailer around a referenced
// payload share one frame. With fill false it only counts; with fill set
// it allocates the frames (the caller checked there are enough), copies,
// and writes x.txDescs, which must hold the count.
func (x *XSK) layout(segs [][]byte, refd uint32, fill bool) int {
	k, open := 0, -1 // descriptors; the copy descriptor being extended
	used := x.chunk  // bytes used of the current copy frame: none yet
	var frame []byte
	var faddr uint64
	for i, s := range segs {
		if i < 32 && refd&(1<<i) != 0 {
			addr, _ := umemOffset(x.umem.Bytes(), s)
			for len(s) > 0 {
				c := min(len(s), x.chunk-int(addr%uint64(x.chunk)))
				if fill {
					x.txDescs[k] = afxdp.Desc{Addr: addr, Len: uint32(c)}
				}
				k++
				addr += uint64(c)
				s = s[c:]
			}
			open = -1
			continue
		}
		for len(s) > 0 {
			if used == x.chunk {
				if fill {
					faddr, _ = x.frames.Alloc() // cannot fail: checked by Transmit
					frame = x.umem.Frame(faddr)
				}
				used, open = 0, -1
			}
			if open < 0 {
				if fill {
					x.txDescs[k] = afxdp.Desc{Addr: faddr + uint64(used)}
					x.txRefs[(faddr-x.frLo)/uint64(x.chunk)]++
				}
				open = k
				k++
			}
			c := min(len(s), x.chunk-used)
			if fill {
				copy(frame[used:], s[:c])
				x.txDescs[open].Len += uint32(c)
			}
			used += c
			s = s[c:]
		}
	}
	return k
}

// Flush implements Port: it publishes the queued descriptors, kicks the
// kernel (in copy mode the kernel transmits within the kick) and reclaims
// completed frames. Frames the kernel could not take yet stay queued and
// the next Flush kicks again.
func (x *XSK) Flush() error {
	if x.closed.Load() {
		return ErrClosed
	}
	x.reclaim()
	x.tx.Submit()
	err := x.sock.Kick()
	if errors.Is(err, afxdp.ErrTxBusy) {
		x.local.KickBusy++
		err = nil
	}
	x.reclaim()
	x.publish()
	if err == nil {
		err, x.deferred = x.deferred, nil
	}
	return err
}

// reclaim takes the completed descriptors: each one into the port's
// frames drops its frame's count, and the frame is freed at zero;
// referenced bytes (TxReference) belong to their owner, who learns from
// the peer's ACK that they may change; a slotted descriptor gives its
// allocation's headroom back.
func (x *XSK) reclaim() {
	start, got := x.comp.Peek(x.comp.Size())
	for j := range got {
		addr := x.comp.Get(start + j)
		switch {
		case addr >= x.frLo && addr < x.frHi:
			i := (addr - x.frLo) / uint64(x.chunk)
			if x.txRefs[i] == 0 {
				x.fault(afxdp.ErrFrameNotAllocated)
				continue
			}
			if x.txRefs[i]--; x.txRefs[i] == 0 {
				if err := x.frames.Free(addr); err != nil {
					x.fault(err)
				}
				x.txOut--
			}
		case addr < x.refLo || addr >= x.refHi:
			x.fault(afxdp.ErrFrameOutOfRange)
		case x.slots != nil:
			x.slots.done(int((addr-x.refLo)/TxSlotSize), addr)
		}
	}
	x.comp.Release(got)
	x.txInFlight -= min(got, x.txInFlight)
}
