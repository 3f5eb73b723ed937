package port

import "github.com/ndkxdp/ndkxdp/afxdp"

// Receive implements Port. It releases the previous batch first. Frames
// in one descriptor alias the UMEM; chains are copied into scratch
// buffers, at most Scratch of them per batch.
func (x *XSK) Receive(out [][]byte) int {
	x.Release()
	if x.closed.Load() || len(out) == 0 {
		return 0
	}
	// Peek every ready descriptor on a multi-buffer socket, so that a
	// chain is never cut by the limit; NextPacket then splits packets.
	limit := uint32(min(len(out), int(x.rx.Size())))
	if x.sock.MultiBuffer() {
		limit = x.rx.Size()
	}
	start, got := x.rx.Peek(limit)
	if got == 0 {
		x.wakeRX(true)
		return 0
	}
	var i uint32
	n := 0
	for n < len(out) && i < got {
		d := x.rx.Get(start + i)
		if d.Options&afxdp.PktContd == 0 {
			i++
			if f := x.umem.Data(d); f != nil {
				out[n] = f
				n++
			} else {
				x.local.RxInvalid++
			}
			continue
		}
		k := x.rx.NextPacket(start+i, got-i)
		if k == 0 {
			break // the chain's tail is not here yet: next batch
		}
		if f := x.join(start+i, k); f != nil {
			i += k
			out[n] = f
			n++
			x.local.RxChained++
			x.local.RxJoined++
			continue
		}
		if x.scratchUsed == len(x.scratch) {
			break // no buffer: next batch
		}
		f := x.gather(start+i, k)
		i += k
		if f == nil {
			x.local.RxInvalid++
			continue
		}
		out[n] = f
		n++
		x.local.RxChained++
	}
	x.rx.Cancel(got - i)
	x.rxStart, x.rxDescs = start, i
	x.local.RxFrames += uint64(n)
	x.publish()
	return n
}

// join makes the chain of k descriptors at ring index start contiguous
// where it lies, when its chunks follow one another in the UMEM: each
// descriptor's bytes move down to where the previous one's end, over the
// headroom in front of them, which the port owns until Release. For a
// 4 KiB-MTU RoCE frame that moves the ~300 bytes past the first chunk
// instead of gathering all 4158 into scratch. It returns nil, moving
// nothing, for chunks out of order, an invalid descriptor or a chain over
// MaxFrame; Receive then gathers. Release frees frames so that the fill
// ring gets them back in the order they arrived, which keeps consecutive
// fill entries, and so the chunks of most chains, adjacent.
func (x *XSK) join(start, k uint32) []byte {
	first := x.rx.Get(start)
	if x.umem.Data(first) == nil {
		return nil
	}
	chunk := uint64(x.chunk)
	end := first.Addr + uint64(first.Len)
	for j := uint32(1); j < k; j++ {
		d := x.rx.Get(start + j)
		if d.Addr/chunk != (end-1)/chunk+1 || x.umem.Data(d) == nil || end+uint64(d.Len)-first.Addr > uint64(x.maxFrame) {
			return nil
		}
		end += uint64(d.Len)
	}
	mem := x.umem.Bytes()
	end = first.Addr + uint64(first.Len)
	for j := uint32(1); j < k; j++ {
		d := x.rx.Get(start + j)
		copy(mem[end:], mem[d.Addr:d.Addr+uint64(d.Len)])
		end += uint64(d.Len)
	}
	return mem[first.Addr:end:end]
}

// gather copies the chain of k descriptors at ring index start into the
// next scratch buffer, or returns nil if a descriptor is invalid or the
// chain exceeds MaxFrame.
func (x *XSK) gather(start, k uint32) []byte {
	buf := x.scratch[x.scratchUsed][:0]
	for j := range k {
		b := x.umem.Data(x.rx.Get(start + j))
		if b == nil || len(buf)+len(b) > cap(buf) {
			return nil
		}
		buf = append(buf, b...)
	}
	x.scratchUsed++
	return buf[:len(buf):len(buf)]
}

// Release implements Port: it frees the last batch's frames and lends the
// kernel as many again.
func (x *XSK) Release() {
	if x.rxDescs == 0 {
		return
	}
	// Last first: the allocator hands frames out last-freed first, so the
	// refill lends them in the order they arrived (see join).
	for j := x.rxDescs; j > 0; j-- {
		if err := x.frames.Free(x.rx.Get(x.rxStart + j - 1).Addr); err != nil && x.deferred == nil {
			x.deferred = err
		}
	}
	x.rx.Release(x.rxDescs)
	x.rxLent -= x.rxDescs
	x.rxDescs, x.scratchUsed = 0, 0
	x.refill()
}

// refill lends the kernel frames up to the RX budget.
func (x *XSK) refill() {
	if x.rxLent < x.rxBudget {
		x.rxLent += x.fill.FillFrom(x.frames, x.rxBudget-x.rxLent)
	}
	x.wakeRX(false)
}

// wakeRX makes the fill-ring wakeup when the kernel asks for one; with
// idle set it also lets a busy-polling socket run the driver's poll loop
// (afxdp.Socket.WakeupRX decides which applies).
func (x *XSK) wakeRX(idle bool) {
	if !idle && !x.fill.NeedWakeup() {
		return
	}
	if x.fill.NeedWakeup() {
		x.local.RxWakeups++
	}
	if err := x.sock.WakeupRX(); err != nil && x.deferred == nil {
		x.deferred = err
	}
}
