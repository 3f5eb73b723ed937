package ndk

import (
	"crypto/rand"
	"encoding/binary"
	"errors"

	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// inprocPD is the in-process provider's PD (backend.go): its MRs, windows
// and fast MRs are slots of the adapter's token table, which the engines
// consult; its QPs and SRQs are the engines'.
type inprocPD struct{ pd *PD }

func (b *inprocPD) register(buf []byte, flags MRFlag, invalidatable bool) (*MR, error) {
	return b.pd.register(addrOf(buf), buf, flags, invalidatable)
}

// registerAt registers buf under address va; RegisterMR passes buf's own
// address. Keeping the address separate lets tests present the request a
// zero-based MDL would make.
func (pd *PD) registerAt(va uint64, buf []byte, flags MRFlag) (*MR, error) {
	return pd.register(va, buf, flags, false)
}

// register is registerAt with the choice of whether an invalidation may
// revoke the region (RegisterInvalidatableMR).
func (pd *PD) register(va uint64, buf []byte, flags MRFlag, invalidatable bool) (*MR, error) {
	const op = "register mr"
	info := &pd.adapter.info
	switch {
	case va == 0:
		return nil, errorf(StatusInvalidParameter, op, "zero-based virtual address (len %d); NdkRegisterMr does not support it", len(buf))
	case len(buf) == 0:
		return nil, errorf(StatusInvalidParameter, op, "zero length")
	case uint64(len(buf)) > info.MaxRegistrationSize:
		return nil, errorf(StatusInvalidParameter, op, "length %d exceeds MaxRegistrationSize %d", len(buf), info.MaxRegistrationSize)
	case flags&^mrFlagsKnown != 0:
		return nil, errorf(StatusInvalidParameter, op, "unknown flag bits %#x", uint32(flags&^mrFlagsKnown))
	case flags&0x4 != 0 && flags&MRFlagAllowLocalWrite == 0:
		return nil, errorf(StatusInvalidParameter, op, "flags %#x: remote write without local write (ALLOW_REMOTE_WRITE is 0x5)", uint32(flags))
	case flags&0x100 != 0 && flags&MRFlagAllowLocalWrite == 0:
		return nil, errorf(StatusInvalidParameter, op, "flags %#x: remote atomic without local write (ALLOW_REMOTE_ATOMIC is 0x101)", uint32(flags))
	}

	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closing {
		return nil, errorf(StatusInvalidHandle, op, "pd closed")
	}
	tokens, err := pd.adapter.regions.Register(memreg.Region{
		PD:     pd.id,
		VA:     va,
		Buf:    buf,
		Access: memreg.Access(flags), // NDK_MR_FLAG bits are memreg's access bits

		Invalidatable: invalidatable,
	})
	if err != nil {
		return nil, registrationError(op, err)
	}
	mr := &MR{pd: pd, buf: buf, va: va, flags: flags, tokens: tokens, registered: true}
	pd.mrs[mr] = struct{}{}
	return mr, nil
}

// closeWithSuccessors is the adapter's close of a PD: its MRs are
// deregistered with it.
func (pd *PD) closeWithSuccessors() {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	for mr := range pd.mrs {
		pd.deregisterLocked(mr)
	}
	for mw := range pd.mws {
		pd.closeMWLocked(mw)
	}
	srqs := pd.srqs
	pd.srqs = nil
	for s := range srqs {
		s.be.(*inprocSRQ).stopLocked()
	}
	pd.closing = true
	if !pd.finished {
		pd.finishLocked()
	}
}

// deregisterLocked drops mr's tokens; pd.mu is held.
func (pd *PD) deregisterLocked(mr *MR) {
	// The table refuses only unknown tokens, and mr's are known while
	// registered is true, which the caller checked.
	handle := mr.tokens.Local
	if mr.fast != nil {
		handle = mr.fast.handle // its tokens change; the slot's handle does not
	}
	_ = pd.adapter.regions.Deregister(handle)
	mr.registered = false
	delete(pd.mrs, mr)
}

func (b *inprocPD) deregister(m *MR) error {
	pd := b.pd
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if !m.registered {
		return errorf(StatusInvalidHandle, "deregister mr", "mr %#x not registered", m.tokens.Local)
	}
	pd.deregisterLocked(m)
	pd.maybeFinishLocked()
	return nil
}

func (b *inprocPD) close() {
	pd := b.pd
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closing {
		return
	}
	pd.closing = true
	pd.maybeFinishLocked()
}

func (b *inprocPD) finishIfIdleLocked() {
	pd := b.pd
	if pd.closing && !pd.finished && pd.idleLocked() && pd.qps == 0 {
		pd.finishLocked()
	}
}

func (b *inprocPD) createMW() (*MW, error) {
	const op = "create mw"
	pd := b.pd
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closing {
		return nil, errorf(StatusInvalidHandle, op, "pd closed")
	}
	tok, err := pd.adapter.regions.AllocWindow(pd.id)
	if err != nil {
		return nil, registrationError(op, err)
	}
	mw := &MW{pd: pd, handle: tok.Local, open: true}
	mw.token.Store(tok.Remote)
	if pd.mws == nil {
		pd.mws = make(map[*MW]struct{})
	}
	pd.mws[mw] = struct{}{}
	return mw, nil
}

func (b *inprocPD) closeMW(mw *MW) {
	pd := b.pd
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if !mw.open {
		return
	}
	pd.closeMWLocked(mw)
	pd.maybeFinishLocked()
}

// closeMWLocked frees mw's slot; pd.mu is held.
func (pd *PD) closeMWLocked(mw *MW) {
	_ = pd.adapter.regions.Deregister(mw.handle) // known while open
	mw.open = false
	delete(pd.mws, mw)
}

func (b *inprocPD) initFastRegister(m *MR, pages int, remoteAccess bool) error {
	const op = "initialize fast register mr"
	pd := b.pd
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closing {
		return errorf(StatusInvalidHandle, op, "pd closed")
	}
	if m.registered {
		pd.deregisterLocked(m)
	}
	tok, err := pd.adapter.regions.AllocFastMR(pd.id, uint64(pages)*PageSize, remoteAccess)
	if err != nil {
		return registrationError(op, err)
	}
	m.fast.handle, m.fast.pages, m.fast.remoteOK = tok.Local, pages, remoteAccess
	m.tokens, m.buf, m.va, m.flags = tok, nil, 0, 0
	m.registered = true
	pd.mrs[m] = struct{}{}
	return nil
}

func (b *inprocPD) createSRQ(depth, maxReceiveRequestSGE, notifyThreshold int, notify func(Status)) (*SRQ, error) {
	const op = "create srq"
	pd := b.pd
	core, err := rc.NewSRQ(rc.SRQConfig{Regions: pd.adapter.regions, PD: pd.id, Depth: depth,
		MaxSGE: maxReceiveRequestSGE, NotifyThreshold: notifyThreshold, MaxTransfer: pd.adapter.info.MaxTransferLength})
	if err != nil {
		return nil, &Error{Status: StatusInsufficientResources, Op: op, Err: err}
	}
	s := &SRQ{pd: pd, notify: notify, done: make(chan struct{})}
	is := &inprocSRQ{s: s, rc: core, stop: make(chan struct{}), stopped: make(chan struct{})}
	s.be = is
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closing {
		return nil, errorf(StatusInvalidHandle, op, "pd closed")
	}
	if pd.srqs == nil {
		pd.srqs = make(map[*SRQ]struct{})
	}
	pd.srqs[s] = struct{}{}
	go is.notifications()
	return s, nil
}

func (b *inprocPD) createQP(cfg QPConfig) (*QP, error) { return b.newQP(cfg, false) }

// newQP makes an RC QP, or a UD QP if ud (inproc_ud.go).
func (b *inprocPD) newQP(cfg QPConfig, ud bool) (*QP, error) {
	const op = "create qp"
	pd := b.pd
	a := pd.adapter
	info := &a.info
	prov := a.provider()
	if prov == nil {
		return nil, errorf(StatusNotSupported, op, "adapter has no transport (use ndk.Open)")
	}
	if err := holdSuccessor(pd, cfg.ReceiveCQ, cfg.InitiatorCQ); err != nil {
		return nil, &Error{Status: StatusInvalidHandle, Op: op, Err: err}
	}
	var srq *rc.SRQ
	if cfg.SRQ != nil {
		if !cfg.SRQ.attach() {
			releaseSuccessor(pd, cfg.ReceiveCQ, cfg.InitiatorCQ)
			return nil, errorf(StatusInvalidHandle, op, "srq closed")
		}
		srq = cfg.SRQ.be.(*inprocSRQ).rc
	}
	// The SGE limit for reads is the adapter's MaxReadRequestSGE, capped
	// by what this QP accepts for other requests.
	readSGE := min(cfg.MaxInitiatorRequestSGE, int(info.MaxReadRequestSGE))
	q, queue, err := prov.CreateQP(rc.QPConfig{
		PD:     pd.id,
		RecvCQ: cfg.ReceiveCQ.core(), SendCQ: cfg.InitiatorCQ.core(), Context: cfg.Context,
		RecvDepth: cfg.ReceiveQueueDepth, SendDepth: cfg.InitiatorQueueDepth,
		MaxRecvSGE: cfg.MaxReceiveRequestSGE, MaxSendSGE: cfg.MaxInitiatorRequestSGE, MaxReadSGE: readSGE,
		InlineSize: cfg.InlineDataSize, MaxTransfer: info.MaxTransferLength, SRQ: srq, UD: ud, UC: cfg.UC,
		BlockSelfLoopback: cfg.BlockSelfMulticastLoopback,
	})
	if err != nil {
		releaseSuccessor(pd, cfg.ReceiveCQ, cfg.InitiatorCQ)
		if cfg.SRQ != nil {
			cfg.SRQ.detach()
		}
	}
	switch {
	case errors.Is(err, inproc.ErrClosed):
		return nil, errorf(StatusInvalidHandle, op, "adapter closed")
	case err != nil:
		return nil, &Error{Status: StatusInsufficientResources, Op: op, Err: err}
	}
	var psn [4]byte
	_, _ = rand.Read(psn[:])
	qp := &QP{pd: pd, adapter: a, queue: queue, rcq: cfg.ReceiveCQ, icq: cfg.InitiatorCQ,
		done: make(chan struct{}), psn: binary.LittleEndian.Uint32(psn[:]) & rocev2.PSNMask}
	qp.be = &inprocQP{q: qp, rc: q, srq: cfg.SRQ}
	return qp, nil
}
