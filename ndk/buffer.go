package ndk

import (
	"sync"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
)

// bufferPool hands out page-aligned pieces of the UMEM's buffer partition:
// first fit over a sorted free list. It is a control-path allocator. With
// slots (the ports' port.TxSlots), an allocation of up to
// port.MaxTxSlotted bytes starts port.TxHeadroom bytes into its page and
// ends at least port.TxTailroom bytes before the next: the engine writes a
// frame's headers and ICRC there and sends a whole allocation as one
// descriptor. The user's slice is capped at its length, so neither room is
// reachable through it.
type bufferPool struct {
	mu    sync.Mutex
	mem   []byte
	free  []span // sorted by offset, coalesced
	slots *port.TxSlots
}

type span struct{ off, n int }

const bufferAlign = 4096

func newBufferPool(mem []byte, slots *port.TxSlots) *bufferPool {
	return &bufferPool{mem: mem, free: []span{{0, len(mem)}}, slots: slots}
}

// room is where an allocation of n bytes starts in its span, and the
// span's size.
func (p *bufferPool) room(n int) (head, size int) {
	if p.slots != nil && n <= port.MaxTxSlotted {
		head = port.TxHeadroom
	}
	return head, (head + n + bufferAlign - 1) / bufferAlign * bufferAlign
}

func (p *bufferPool) alloc(n int) ([]byte, bool) {
	head, size := p.room(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.free {
		if s.n < size {
			continue
		}
		if s.n == size {
			p.free = append(p.free[:i], p.free[i+1:]...)
		} else {
			p.free[i] = span{s.off + size, s.n - size}
		}
		clear(p.mem[s.off : s.off+size])
		if head != 0 {
			p.slots.Mark(s.off/port.TxSlotSize, n)
		}
		return p.mem[s.off+head : s.off+head+n : s.off+head+n], true
	}
	return nil, false
}

func (p *bufferPool) release(b []byte) {
	head, size := p.room(cap(b))
	off := int(addrOf(b[:1])-addrOf(p.mem[:1])) - head
	p.mu.Lock()
	defer p.mu.Unlock()
	if head != 0 {
		p.slots.Unmark(off / port.TxSlotSize)
	}
	i := 0
	for i < len(p.free) && p.free[i].off < off {
		i++
	}
	p.free = append(p.free, span{})
	copy(p.free[i+1:], p.free[i:])
	p.free[i] = span{off, size}
	// Coalesce with the neighbours.
	if i+1 < len(p.free) && p.free[i].off+p.free[i].n == p.free[i+1].off {
		p.free[i].n += p.free[i+1].n
		p.free = append(p.free[:i+1], p.free[i+2:]...)
	}
	if i > 0 && p.free[i-1].off+p.free[i-1].n == p.free[i].off {
		p.free[i-1].n += p.free[i].n
		p.free = append(p.free[:i], p.free[i+1:]...)
	}
}

// Buffer is memory from the adapter's buffer pool, registered as an MR of
// a PD.
type Buffer struct {
	*MR
	pool *bufferPool
}

// AllocBuffer allocates n bytes of packet memory (in the UMEM, outside the
// Go heap) and registers them with pd and flags. The point is zero-copy
// transmit. A packet whose payload is a whole buffer of up to
// port.MaxTxSlotted bytes (a SEND or WRITE of one buffer that fits the
// path MTU) leaves as one descriptor over the buffer, its headers written
// into headroom the pool keeps in front of it and the ICRC into room
// behind it, on every socket; the same buffer in flight twice at once
// (posted again, retransmitted before the first frame left) is copied the
// second time. Each other packet whose payload lies in one such buffer
// leaves as a descriptor chain (a header frame, the payload in place, a
// trailer with the ICRC) on a multi-buffer socket, so the engine copies
// nothing; payloads under port.MinTxReference bytes, and sockets without
// multi-buffer (MTU up to 3800 bytes), copy those. Zero-copy AF_XDP
// drivers then read the payload straight from the buffer; veth, which
// has only copy mode, copies it in the kernel instead of in the engine.
// As in verbs, the bytes must not change until the request completes: a
// retransmission reads them again. On an adapter without AF_XDP the
// memory comes from the Go heap.
//
// It fails with STATUS_INVALID_PARAMETER for n < 1 and
// STATUS_INSUFFICIENT_RESOURCES when the pool (16 MiB) has no room.
// Free releases the buffer; it deregisters the MR first.
func (a *Adapter) AllocBuffer(pd *PD, n int, flags MRFlag) (*Buffer, error) {
	const op = "alloc buffer"
	if n < 1 {
		return nil, errorf(StatusInvalidParameter, op, "length %d", n)
	}
	if pd == nil || pd.adapter != a {
		return nil, errorf(StatusInvalidParameter, op, "pd of another adapter")
	}
	pool, err := a.backend().bufferPool()
	if err != nil {
		return nil, err
	}
	var b []byte
	if pool != nil {
		var ok bool
		if b, ok = pool.alloc(n); !ok {
			return nil, errorf(StatusInsufficientResources, op, "buffer pool has no %d contiguous bytes", n)
		}
	} else {
		b = make([]byte, n)
	}
	mr, err := pd.RegisterMR(b, flags)
	if err != nil {
		if pool != nil {
			pool.release(b)
		}
		return nil, err
	}
	return &Buffer{MR: mr, pool: pool}, nil
}

// Free deregisters the buffer and returns its memory to the pool. The
// caller must not use the bytes afterwards.
func (b *Buffer) Free() error {
	if err := b.Deregister(); err != nil {
		return err
	}
	if b.pool != nil {
		b.pool.release(b.Bytes())
	}
	return nil
}
