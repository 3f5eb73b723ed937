package port

import (
	"fmt"
	"sync/atomic"
)

// The buffer pool's layout for sending in place with one descriptor, the
// way kernel stacks send from an skb: an allocation small enough to fit
// one slot starts TxHeadroom bytes into a TxSlotSize-aligned slot and is
// followed by at least TxTailroom bytes, both owned by the engine and never
// handed to the user. When a frame's payload is exactly one such
// allocation, Transmit writes the headers into the headroom and the pad
// and ICRC into the tailroom and queues one descriptor over the three: no
// multi-buffer socket needed, which a zero-copy socket on a device whose
// xdp_zc_max_segs is 1 (virtio_net) cannot have.
const (
	// TxSlotSize is the pool's alignment: an allocation starts a slot.
	TxSlotSize = 4096
	// TxHeadroom exceeds the largest header the engine writes: Ethernet
	// 14, 802.1Q 4, IPv6 40, UDP 8, BTH 12, RETH 16, ImmDt 4 (98; DETH
	// with ImmDt is smaller). A header must be shorter than the headroom,
	// so that a descriptor written here never starts at a slot's first
	// byte.
	TxHeadroom = 128
	// TxTailroom holds the pad (at most 3) and the ICRC (4).
	TxTailroom = 8
	// MaxTxSlotted is the largest allocation that gets headroom and
	// tailroom; larger ones stay slot-aligned without (a whole one never
	// fits one frame of a one-chunk MTU anyway).
	MaxTxSlotted = TxSlotSize - TxHeadroom - TxTailroom
)

// TxSlots records, per TxSlotSize slot of a buffer pool, the length of the
// allocation that starts there with headroom (0: none), and which
// transmission holds its headroom. The pool's allocator writes the
// lengths; the ports of every queue share the marks, so that one
// allocation is never in flight twice with one headroom (two posts of one
// buffer, a retransmission, two engines): the second copies instead. Safe
// for concurrent use.
type TxSlots struct {
	lens []atomic.Uint32
	// busy holds 1 + the UMEM address of the descriptor in flight over
	// the slot's headroom, or 0.
	busy []atomic.Uint64
}

// NewTxSlots makes the table for a pool of size bytes, a multiple of
// TxSlotSize.
func NewTxSlots(size int) (*TxSlots, error) {
	if size <= 0 || size%TxSlotSize != 0 {
		return nil, fmt.Errorf("port: buffer pool of %d bytes: not a positive multiple of %d", size, TxSlotSize)
	}
	n := size / TxSlotSize
	return &TxSlots{lens: make([]atomic.Uint32, n), busy: make([]atomic.Uint64, n)}, nil
}

// Size is the pool's size in bytes.
func (s *TxSlots) Size() int { return len(s.lens) * TxSlotSize }

// Mark records an allocation of n bytes (1 to MaxTxSlotted) at offset
// TxHeadroom of slot i. The allocator calls it before it hands the bytes
// out.
func (s *TxSlots) Mark(i, n int) {
	if i >= 0 && i < len(s.lens) && n > 0 && n <= MaxTxSlotted {
		s.lens[i].Store(uint32(n))
	}
}

// Unmark forgets the allocation of slot i. A transmission in flight keeps
// its mark until its completion: a new allocation there copies until then.
func (s *TxSlots) Unmark(i int) {
	if i >= 0 && i < len(s.lens) {
		s.lens[i].Store(0)
	}
}

// Whole returns the slot whose allocation is exactly the n bytes at rel
// (an offset into the pool), and false when there is none.
func (s *TxSlots) Whole(rel uint64, n int) (int, bool) {
	if rel < TxHeadroom || (rel-TxHeadroom)%TxSlotSize != 0 {
		return 0, false
	}
	i := (rel - TxHeadroom) / TxSlotSize
	if i >= uint64(len(s.lens)) || s.lens[i].Load() != uint32(n) {
		return 0, false
	}
	return int(i), true
}

// take marks slot i's headroom as used by the descriptor at addr.
func (s *TxSlots) take(i int, addr uint64) bool {
	return s.busy[i].CompareAndSwap(0, addr+1)
}

// done releases slot i's headroom if the completed descriptor at addr held
// it, and reports whether it did.
func (s *TxSlots) done(i int, addr uint64) bool {
	return i < len(s.busy) && s.busy[i].CompareAndSwap(addr+1, 0)
}
