package memreg

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Access is a region's set of rights; the bits are the NDK_MR_FLAG_* values
// (NDKPI.md §6), so ndk.MRFlag converts directly. Local read is always
// granted.
type Access uint32

const (
	AccessLocalWrite  Access = 0x1
	AccessRemoteRead  Access = 0x2
	AccessRemoteWrite Access = 0x4 // only together with AccessLocalWrite
	AccessReadSink    Access = 0x8 // may receive RDMA read responses
	// AccessRemoteAtomic lets a peer run CMP_SWAP and FETCH_ADD on the
	// region. NDK has no such flag (NDKPI has no atomic verb); the bit is
	// an ndkxdp extension above NDK_MR_FLAG_*'s, and like verbs'
	// IBV_ACCESS_REMOTE_ATOMIC it needs AccessLocalWrite.
	AccessRemoteAtomic Access = 0x100

	accessKnown = AccessLocalWrite | AccessRemoteRead | AccessRemoteWrite | AccessReadSink | AccessRemoteAtomic
)

// Region describes memory to register.
type Region struct {
	PD uint32 // protection domain; checks fail for any other PD
	VA uint64 // address of Buf[0] as the consumer names it; never 0
	// Buf is the memory itself. The table keeps it reachable until the
	// region is deregistered.
	Buf    []byte
	Access Access
	// Invalidatable marks memory that an invalidation may revoke (fast
	// registered MRs, bound MWs). NdkInvalidate "is never used on an MR
	// registered with NdkRegisterMr" (NDKPI.md §3), and Linux rxe refuses to
	// invalidate one (rxe_invalidate_mr: type must be IB_MR_TYPE_MEM_REG).
	Invalidatable bool
}

// Tokens are the two tokens of a registration.
type Tokens struct {
	Local  uint32 // NdkGetLocalTokenFromMr: goes into NDK_SGE
	Remote uint32 // NdkGetRemoteTokenFromMr: given to the peer (R_Key)
}

// Fault says why a check failed. It is a plain value so the hot path never
// allocates; OK means the access is allowed.
type Fault uint8

const (
	OK                    Fault = iota
	FaultToken                  // no region has this token (unknown, stale, deregistered, or the wrong kind)
	FaultPD                     // the region belongs to another protection domain
	FaultInvalidated            // the region was invalidated
	FaultBounds                 // the range leaves the region, or va+length overflows
	FaultAccess                 // the region lacks the right
	FaultNotInvalidatable       // Invalidate on memory that cannot be invalidated
	FaultKind                   // FastRegister on what is not a fast MR, Bind on what is not a window (or to one)
	FaultState                  // FastRegister on a registered fast MR (invalidate it first), or a concurrent change
)

var faultNames = [...]string{
	OK:                    "ok",
	FaultToken:            "bad token",
	FaultPD:               "protection domain mismatch",
	FaultInvalidated:      "region invalidated",
	FaultBounds:           "out of bounds",
	FaultAccess:           "access right missing",
	FaultNotInvalidatable: "region cannot be invalidated",
	FaultKind:             "wrong kind of region",
	FaultState:            "region is registered",
}

func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", uint8(f))
}

// MaxCapacity is the largest table: the token index has 24 bits, and index 0
// is never used so that token 0 is always invalid.
const MaxCapacity = 1<<24 - 1

// ErrFull reports that every slot is in use.
var ErrFull = errors.New("memreg: token table full")

type entry struct {
	Region
	tokens      Tokens
	invalidated atomic.Bool
	// mut holds the changing state of a fast MR or window (mutable.go);
	// nil for NdkRegisterMr's regions, whose fields never change.
	mut *mutable
}

// Table maps tokens to regions. Lookups are lock-free; Register and
// Deregister serialize on a mutex (they are control-path calls).
type Table struct {
	slots []atomic.Pointer[entry] // index 0 unused

	// keyBits is the width of a token's key: every bit the index does
	// not need (see New).
	keyBits uint

	mu         sync.Mutex
	free       []uint32 // FIFO of free indices, so a slot rests as long as possible before reuse
	freeHead   int
	lastLocal  []uint32 // per slot: the previous occupant's local key
	lastRemote []uint32 // and its remote key
	rng        *rand.ChaCha8
}

// KeyBits is how many random key bits the tokens of a table of capacity
// regions carry: 32 less the bits of the largest index, so from 8 (the
// largest table) to 31. A peer that guesses R_Keys for a live region
// needs 2^(KeyBits-1) tries on average per index.
func KeyBits(capacity int) uint {
	return 32 - uint(bits.Len32(uint32(capacity)))
}

// New returns a table with room for capacity regions.
func New(capacity int) (*Table, error) {
	if capacity < 1 || capacity > MaxCapacity {
		return nil, fmt.Errorf("memreg: capacity %d out of range [1, %d]", capacity, MaxCapacity)
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("memreg: seed token keys: %w", err)
	}
	t := &Table{
		slots:      make([]atomic.Pointer[entry], capacity+1),
		keyBits:    KeyBits(capacity),
		free:       make([]uint32, 0, capacity),
		lastLocal:  make([]uint32, capacity+1),
		lastRemote: make([]uint32, capacity+1),
		rng:        rand.NewChaCha8(seed),
	}
	for i := 1; i <= capacity; i++ {
		t.free = append(t.free, uint32(i))
	}
	return t, nil
}

// Register validates r and publishes it under fresh tokens.
func (t *Table) Register(r Region) (Tokens, error) {
	switch {
	case r.VA == 0:
		return Tokens{}, errors.New("memreg: zero-based virtual address (not supported by NdkRegisterMr)")
	case len(r.Buf) == 0:
		return Tokens{}, errors.New("memreg: zero-length region")
	case r.VA+uint64(len(r.Buf)) < r.VA:
		return Tokens{}, fmt.Errorf("memreg: region [%#x, +%d) wraps the address space", r.VA, len(r.Buf))
	case r.Access&^accessKnown != 0:
		return Tokens{}, fmt.Errorf("memreg: unknown access bits %#x", uint32(r.Access&^accessKnown))
	case r.Access&AccessRemoteWrite != 0 && r.Access&AccessLocalWrite == 0:
		return Tokens{}, errors.New("memreg: remote write requires local write (NDK_MR_FLAG_ALLOW_REMOTE_WRITE is 0x5)")
	case r.Access&AccessRemoteAtomic != 0 && r.Access&AccessLocalWrite == 0:
		return Tokens{}, errors.New("memreg: remote atomic requires local write (as IBV_ACCESS_REMOTE_ATOMIC does)")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freeHead == len(t.free) {
		return Tokens{}, ErrFull
	}
	idx := t.free[t.freeHead]
	t.freeHead++
	if t.freeHead > len(t.free)/2 { // compact the FIFO now and then
		t.free = append(t.free[:0], t.free[t.freeHead:]...)
		t.freeHead = 0
	}
	oldL, oldR := t.lastLocal[idx], t.lastRemote[idx]
	local := t.key(func(k uint32) bool { return k != oldL && k != oldR })
	remote := t.key(func(k uint32) bool { return k != oldL && k != oldR && k != local })
	t.lastLocal[idx], t.lastRemote[idx] = local, remote
	e := &entry{Region: r, tokens: Tokens{Local: idx<<t.keyBits | local, Remote: idx<<t.keyBits | remote}}
	t.slots[idx].Store(e)
	return e.tokens, nil
}

// key draws a key of keyBits bits that ok accepts; at most three values
// are excluded, so the loop ends quickly.
func (t *Table) key(ok func(uint32) bool) uint32 {
	for {
		k := uint32(t.rng.Uint64()) & (1<<t.keyBits - 1)
		if ok(k) {
			return k
		}
	}
}

// Deregister removes the region whose local token is given; its tokens fail
// from the moment Deregister returns.
func (t *Table) Deregister(local uint32) error {
	idx := local >> t.keyBits
	if idx == 0 || idx >= uint32(len(t.slots)) {
		return fmt.Errorf("memreg: deregister: no region for token %#x", local)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.slots[idx].Load()
	if e == nil || e.tokens.Local != local {
		return fmt.Errorf("memreg: deregister: no region for token %#x", local)
	}
	t.slots[idx].Store(nil)
	e.invalidated.Store(true) // for an engine that still holds the entry
	if m := e.mut; m != nil {
		// Its keys changed since Register noted them: the next occupant
		// must not draw the ones a peer may still hold.
		mask := uint32(1)<<t.keyBits - 1
		t.lastLocal[idx], t.lastRemote[idx] = m.local.Load()&mask, m.remote.Load()&mask
	}
	t.free = append(t.free, idx)
	return nil
}

// lookup finds the live entry for token, comparing the key byte of the kind
// of token the caller expects.
func (t *Table) lookup(token uint32, remote bool) (*entry, Fault) {
	idx := token >> t.keyBits
	if idx >= uint32(len(t.slots)) {
		return nil, FaultToken
	}
	e := t.slots[idx].Load()
	if e == nil {
		return nil, FaultToken
	}
	if e.mut != nil {
		return e, OK // its tokens change: checkMutable compares them
	}
	want := e.tokens.Local
	if remote {
		want = e.tokens.Remote
	}
	if token != want {
		return nil, FaultToken
	}
	return e, OK
}

// check is the part CheckLocal and CheckRemote share.
func (e *entry) check(pd uint32, va, length uint64, need Access) ([]byte, Fault) {
	if e.PD != pd {
		return nil, FaultPD
	}
	if e.invalidated.Load() {
		return nil, FaultInvalidated
	}
	// Written so that no sum can overflow: off is the distance from the
	// region's start, and the length must fit in what remains.
	size := uint64(len(e.Buf))
	if va < e.VA || va-e.VA > size || length > size-(va-e.VA) {
		return nil, FaultBounds
	}
	if e.Access&need != need {
		return nil, FaultAccess
	}
	off := va - e.VA
	return e.Buf[off : off+uint64(length)], OK
}

// CheckLocal checks an SGE (local token, address, length) posted on a QP of
// protection domain pd, needing the rights in need: 0 to read (send, write
// source), AccessLocalWrite to receive into, AccessReadSink to place an RDMA
// read response (granted by LocalWrite or ReadSink, since the adapter sets
// RDMA_READ_SINK_NOT_REQUIRED). On success it returns the bytes the SGE
// names. Lock-free; allocates nothing.
func (t *Table) CheckLocal(pd, token uint32, va uint64, length uint32, need Access) ([]byte, Fault) {
	e, f := t.lookup(token, false)
	if f != OK {
		return nil, f
	}
	if e.mut != nil {
		return e.checkMutable(token, false, pd, 0, va, uint64(length), need)
	}
	if need == AccessReadSink && e.Access&AccessLocalWrite != 0 {
		need = AccessLocalWrite
	}
	return e.check(pd, va, uint64(length), need)
}

// CheckRemoteOn checks a peer's access (remote token, address, length from
// a RETH or AtomicETH) arriving on QP qpn of protection domain pd; need is
// AccessRemoteRead, AccessRemoteWrite or AccessRemoteAtomic. A window
// answers only on the QP that bound it (FaultToken elsewhere), as an IB
// type-2 window. On success it returns the bytes to read or write.
// Lock-free; allocates nothing.
func (t *Table) CheckRemoteOn(pd, qpn, token uint32, va uint64, length uint32, need Access) ([]byte, Fault) {
	e, f := t.lookup(token, true)
	if f != OK {
		return nil, f
	}
	if e.mut != nil {
		return e.checkMutable(token, true, pd, qpn, va, uint64(length), need)
	}
	return e.check(pd, va, uint64(length), need)
}

// CheckRemote is CheckRemoteOn for an access on no particular QP: it
// reaches registered and fast-registered MRs, never a window.
func (t *Table) CheckRemote(pd, token uint32, va uint64, length uint32, need Access) ([]byte, Fault) {
	return t.CheckRemoteOn(pd, 0, token, va, length, need)
}

// Invalidate revokes the region of token (either of its tokens) for
// protection domain pd: the remote invalidation a SEND_WITH_INVALIDATE
// carries (IETH), or a local NdkInvalidate. Afterwards every use of the
// region's tokens fails with FaultInvalidated, and so does a second
// Invalidate (seed 002: "a later NdkInvalidate of that token fails").
// Lock-free; allocates nothing.
func (t *Table) Invalidate(pd, token uint32) Fault {
	e, f := t.lookup(token, true)
	if f != OK {
		if e, f = t.lookup(token, false); f != OK {
			return f
		}
	}
	if e.mut != nil {
		return t.invalidateMutable(e, pd, token)
	}
	if e.PD != pd {
		return FaultPD
	}
	if !e.Invalidatable {
		return FaultNotInvalidatable
	}
	if !e.invalidated.CompareAndSwap(false, true) {
		return FaultInvalidated
	}
	return OK
}
