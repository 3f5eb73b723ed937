package memreg

import (
	"math/rand/v2"
	"sync/atomic"
	"unsafe"
)

// Mutable regions: fast-register MRs (NdkCreateMr with FastRegister=TRUE,
// IB_MR_TYPE_MEM_REG) and memory windows (NdkCreateMw, IB type-2 style
// windows). Their slot is taken once, at creation, and then changes on
// the consumer's posting path: NdkFastRegister and NdkBind give it new
// memory, rights and keys, NdkInvalidate (or a peer's SEND with
// Invalidate) revokes it. Posting must not allocate, so the state lives
// in atomics inside the entry instead of a fresh immutable entry per
// change; a sequence count (odd while a writer changes the fields) lets
// lock-free readers take a consistent snapshot. A reader that meets a
// change in progress fails its check: every change draws new keys, so
// the token it holds is already dead or not yet handed out.

// Region kinds of a mutable entry.
const (
	kindFastMR uint8 = iota + 1
	kindWindow
)

// States of a mutable region (rxe_mr.c RXE_MR_STATE_*).
const (
	stateFree        uint32 = iota // created or invalidated: no memory behind it
	stateValid                     // registered or bound
	stateInvalidated               // revoked by an invalidation
)

type mutable struct {
	kind     uint8
	maxLen   uint64 // fast MR: AdapterPageCount pages
	remoteOK bool   // fast MR: initialized with RemoteAccess

	busy   atomic.Bool   // a FastRegister or Bind is writing
	seq    atomic.Uint32 // odd while the fields below change
	state  atomic.Uint32
	local  atomic.Uint32 // current tokens
	remote atomic.Uint32
	va     atomic.Uint64
	base   atomic.Pointer[byte]
	n      atomic.Uint64
	access atomic.Uint32
	// parent is the MR a window is bound to, and parentKey that MR's local
	// token when it was bound: a window dies with its MR's registration.
	parent    atomic.Pointer[entry]
	parentKey atomic.Uint32
	qpn       atomic.Uint32 // a window's: the QP that bound it
}

// view is a consistent snapshot of a mutable region.
type view struct {
	state         uint32
	local, remote uint32
	va            uint64
	buf           []byte
	access        Access
	parent        *entry
	parentKey     uint32
	qpn           uint32
}

// snapshot reads m's fields consistently; false if a writer is changing
// them.
func (m *mutable) snapshot(v *view) bool {
	s := m.seq.Load()
	if s&1 != 0 {
		return false
	}
	v.state = m.state.Load()
	v.local, v.remote = m.local.Load(), m.remote.Load()
	v.va = m.va.Load()
	p, n := m.base.Load(), m.n.Load()
	v.access = Access(m.access.Load())
	v.parent, v.parentKey = m.parent.Load(), m.parentKey.Load()
	v.qpn = m.qpn.Load()
	if m.seq.Load() != s {
		return false
	}
	// Only now is (p, n) known to be one registration's: a slice built
	// from a torn pair would straddle two allocations.
	v.buf = nil
	if p != nil {
		v.buf = unsafe.Slice(p, n)
	}
	return true
}

// live reports whether an entry still stands for what key named: for a
// plain MR that it is neither deregistered nor invalidated; for a fast MR
// that it is valid under the local token key.
func (e *entry) live(key uint32) bool {
	if e.invalidated.Load() {
		return false
	}
	if e.mut == nil {
		return true
	}
	var v view
	return e.mut.snapshot(&v) && v.state == stateValid && v.local == key
}

// checkMutable is check for a fast MR or window, given the token used and,
// for a remote access, the QP it arrived on.
func (e *entry) checkMutable(token uint32, remote bool, pd, qpn uint32, va, length uint64, need Access) ([]byte, Fault) {
	m := e.mut
	var v view
	if !m.snapshot(&v) {
		return nil, FaultToken
	}
	if want := v.local; remote {
		if token != v.remote {
			return nil, FaultToken
		}
	} else if m.kind == kindWindow || token != want {
		return nil, FaultToken // a window has no local token
	}
	if m.kind == kindWindow && qpn != v.qpn {
		return nil, FaultToken // another QP's window (IB type 2)
	}
	if e.PD != pd {
		return nil, FaultPD
	}
	if v.state != stateValid || e.invalidated.Load() {
		return nil, FaultInvalidated
	}
	if v.parent != nil && !v.parent.live(v.parentKey) {
		return nil, FaultInvalidated
	}
	size := uint64(len(v.buf))
	if va < v.va || va-v.va > size || length > size-(va-v.va) {
		return nil, FaultBounds
	}
	if need == AccessReadSink && v.access&AccessLocalWrite != 0 {
		need = AccessLocalWrite
	}
	if v.access&need != need {
		return nil, FaultAccess
	}
	off := va - v.va
	return v.buf[off : off+uint64(length)], OK
}

// AllocFastMR creates a fast-register MR of protection domain pd that can
// hold maxLen bytes (NdkCreateMr with FastRegister=TRUE followed by
// NdkInitializeFastRegisterMr); remoteOK allows remote rights in later
// FastRegisters. It has tokens but no memory until FastRegister. The
// returned Local token is also its handle for Deregister and for
// FastRegister, which changes the tokens in use.
func (t *Table) AllocFastMR(pd uint32, maxLen uint64, remoteOK bool) (Tokens, error) {
	return t.allocMutable(pd, &mutable{kind: kindFastMR, maxLen: maxLen, remoteOK: remoteOK})
}

// AllocWindow creates a memory window of protection domain pd
// (NdkCreateMw), unbound. Its Remote token names it to Bind; its Local
// token is only its handle for Deregister.
func (t *Table) AllocWindow(pd uint32) (Tokens, error) {
	return t.allocMutable(pd, &mutable{kind: kindWindow})
}

func (t *Table) allocMutable(pd uint32, m *mutable) (Tokens, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freeHead == len(t.free) {
		return Tokens{}, ErrFull
	}
	idx := t.free[t.freeHead]
	t.freeHead++
	if t.freeHead > len(t.free)/2 {
		t.free = append(t.free[:0], t.free[t.freeHead:]...)
		t.freeHead = 0
	}
	oldL, oldR := t.lastLocal[idx], t.lastRemote[idx]
	local := t.key(func(k uint32) bool { return k != oldL && k != oldR })
	remote := t.key(func(k uint32) bool { return k != oldL && k != oldR && k != local })
	t.lastLocal[idx], t.lastRemote[idx] = local, remote
	tok := Tokens{Local: idx<<t.keyBits | local, Remote: idx<<t.keyBits | remote}
	m.local.Store(tok.Local)
	m.remote.Store(tok.Remote)
	e := &entry{Region: Region{PD: pd, Invalidatable: true}, tokens: tok, mut: m}
	t.slots[idx].Store(e)
	return tok, nil
}

// mutableOf finds the mutable entry whose current token (local for a fast
// MR, remote for a window) or handle is token.
func (t *Table) mutableOf(token uint32, kind uint8) (*entry, Fault) {
	idx := token >> t.keyBits
	if idx == 0 || idx >= uint32(len(t.slots)) {
		return nil, FaultToken
	}
	e := t.slots[idx].Load()
	if e == nil {
		return nil, FaultToken
	}
	if e.mut == nil || e.mut.kind != kind {
		return nil, FaultKind
	}
	cur := e.mut.local.Load()
	if kind == kindWindow {
		cur = e.mut.remote.Load()
	}
	if token != cur && token != e.tokens.Local {
		return nil, FaultToken
	}
	return e, OK
}

// newKeys draws keys for a mutable entry's next registration, different
// from its current ones. math/rand/v2's global generator is a per-thread
// ChaCha8 stream seeded by the runtime: unpredictable, lock-free and
// allocation-free, which the table's own generator (under t.mu) is not.
func (t *Table) newKeys(m *mutable) (local, remote uint32) {
	idx := m.local.Load() >> t.keyBits
	oldL, oldR := m.local.Load()&(1<<t.keyBits-1), m.remote.Load()&(1<<t.keyBits-1)
	mask := uint32(1)<<t.keyBits - 1
	for {
		l, r := rand.Uint32()&mask, rand.Uint32()&mask
		if l != r && l != oldL && l != oldR && r != oldL && r != oldR {
			return idx<<t.keyBits | l, idx<<t.keyBits | r
		}
	}
}

// FastRegister gives the fast MR whose local token (or handle) is mr the
// memory buf at address va with rights access (NdkFastRegister,
// IB_WR_REG_MR). The MR must not be registered (new, or invalidated
// since): FaultState otherwise. buf must fit the MR's size (FaultBounds),
// remote rights need an MR initialized with remote access (FaultAccess).
// On success the MR has new tokens. Lock-free; allocates nothing.
func (t *Table) FastRegister(pd, mr uint32, va uint64, buf []byte, access Access) (Tokens, Fault) {
	e, f := t.mutableOf(mr, kindFastMR)
	if f != OK {
		return Tokens{}, f
	}
	m := e.mut
	switch {
	case e.PD != pd:
		return Tokens{}, FaultPD
	case e.invalidated.Load():
		return Tokens{}, FaultToken // deregistered (closed)
	case va == 0 || len(buf) == 0 || va+uint64(len(buf)) < va || access&^accessKnown != 0:
		return Tokens{}, FaultBounds
	case uint64(len(buf)) > m.maxLen:
		return Tokens{}, FaultBounds
	case access&(AccessRemoteRead|AccessRemoteWrite|AccessRemoteAtomic) != 0 && !m.remoteOK:
		return Tokens{}, FaultAccess
	case access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0:
		return Tokens{}, FaultAccess
	}
	if !m.busy.CompareAndSwap(false, true) {
		return Tokens{}, FaultState
	}
	defer m.busy.Store(false)
	if m.state.Load() == stateValid {
		return Tokens{}, FaultState
	}
	l, r := t.newKeys(m)
	m.seq.Add(1)
	m.local.Store(l)
	m.remote.Store(r)
	m.va.Store(va)
	m.base.Store(unsafe.SliceData(buf))
	m.n.Store(uint64(len(buf)))
	m.access.Store(uint32(access))
	m.state.Store(stateValid)
	m.seq.Add(1)
	return Tokens{Local: l, Remote: r}, OK
}

// Bind binds the window whose remote token (or handle) is mw to length
// bytes at va of the MR whose local token is mr, with the remote rights
// in access, for peers of QP qpn (NdkBind, IB_WR_BIND_MW of a type-2
// window: CheckRemoteOn answers for it on that QP only). The range must
// lie inside the MR (FaultBounds) and the rights within the MR's
// (FaultAccess); both must be of protection domain pd. A bound window may
// be bound again: its old token dies. It returns the window's new remote
// token. Lock-free; allocates nothing.
func (t *Table) Bind(pd, qpn, mw, mr uint32, va, length uint64, access Access) (uint32, Fault) {
	w, f := t.mutableOf(mw, kindWindow)
	if f != OK {
		return 0, f
	}
	if w.PD != pd {
		return 0, FaultPD
	}
	if w.invalidated.Load() {
		return 0, FaultToken
	}
	if access&^(AccessRemoteRead|AccessRemoteWrite) != 0 {
		return 0, FaultAccess
	}
	p, f := t.lookup(mr, false)
	if f != OK {
		return 0, f
	}
	if p.mut != nil && p.mut.kind == kindWindow {
		return 0, FaultKind
	}
	if p.PD != pd {
		return 0, FaultPD
	}
	// The window's bytes, checked against the MR with the rights it asks
	// for: a window never grants what its MR does not.
	var buf []byte
	if p.mut != nil {
		buf, f = p.checkMutable(mr, false, pd, 0, va, length, access)
	} else {
		buf, f = p.check(pd, va, length, access)
	}
	if f != OK {
		return 0, f
	}
	m := w.mut
	if !m.busy.CompareAndSwap(false, true) {
		return 0, FaultState
	}
	defer m.busy.Store(false)
	_, r := t.newKeys(m)
	m.seq.Add(1)
	m.remote.Store(r)
	m.va.Store(va)
	m.base.Store(unsafe.SliceData(buf))
	m.n.Store(uint64(len(buf)))
	m.access.Store(uint32(access))
	m.parent.Store(p)
	m.parentKey.Store(mr)
	m.qpn.Store(qpn)
	m.state.Store(stateValid)
	m.seq.Add(1)
	return r, OK
}

// invalidateMutable is Invalidate for a fast MR (by either current token)
// or a window (by its remote token).
func (t *Table) invalidateMutable(e *entry, pd, token uint32) Fault {
	m := e.mut
	var v view
	if !m.snapshot(&v) {
		return FaultToken
	}
	if token != v.remote && (m.kind == kindWindow || token != v.local) {
		return FaultToken
	}
	if e.PD != pd {
		return FaultPD
	}
	if e.invalidated.Load() || !m.state.CompareAndSwap(stateValid, stateInvalidated) {
		return FaultInvalidated
	}
	return OK
}
