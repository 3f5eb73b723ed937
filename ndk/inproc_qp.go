package ndk

import (
	"errors"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// inprocQP is the in-process provider's QP (backend.go): a QP of one of
// the adapter's engines, which posts run in directly.
type inprocQP struct {
	q   *QP
	rc  *rc.QP
	srq *SRQ // QPConfig.SRQ
	// writeArm is the channel ArmPeerWrites last armed, boxed for the
	// engine's atomic pointer; never written after it is published.
	writeArm *chan struct{}
}

// engine returns the engine's QP behind q, nil for a daemon-backed one.
func (q *QP) engine() *rc.QP {
	if b, ok := q.be.(*inprocQP); ok {
		return b.rc
	}
	return nil
}

func (b *inprocQP) qpn() uint32 { return b.rc.QPN() }

func (b *inprocQP) connected() bool { return b.rc.State() == rc.StateConnected }

func (b *inprocQP) post(op string, wr rc.SendWR) error {
	if st := b.rc.PostSend(&wr); st != StatusSuccess {
		return postError(op, st)
	}
	return nil
}

func (b *inprocQP) ringDeferred() { b.rc.RingDeferred() }

func (b *inprocQP) receive(ctx any, sgl []SGE) error {
	if st := b.rc.PostReceive(ctx, engineSGL(sgl)); st != StatusSuccess {
		return postError("receive", st)
	}
	return nil
}

func (b *inprocQP) bind(ctx any, mr *MR, mw *MW, addr, length uint64, flags OpFlag) error {
	if mr == nil || mw == nil {
		b.rc.RingDeferred()
		if err := checkOpFlags(postBind, flags, b.q.adapter.info.AdapterFlags); err != nil {
			return err
		}
		return errBindNil
	}
	return b.bindToken(ctx, mr.LocalToken(), mw, addr, length, flags, 0)
}

// bindToken is Bind of the MR whose local token is mrToken; remote, if
// not zero, names the key of the window's new token (the daemon posts a
// client's Bind so: memreg.BindKey).
func (b *inprocQP) bindToken(ctx any, mrToken uint32, mw *MW, addr, length uint64, flags OpFlag, remote uint32) error {
	if err := checkOpFlags(postBind, flags, b.q.adapter.info.AdapterFlags); err != nil {
		b.rc.RingDeferred()
		return err
	}
	var access memreg.Access
	if flags&OpFlagAllowRemoteRead != 0 {
		access |= memreg.AccessRemoteRead
	}
	if flags&OpFlagAllowRemoteWrite == OpFlagAllowRemoteWrite {
		access |= memreg.AccessRemoteWrite
	}
	wr := rc.SendWR{Op: rc.OpBind, Flags: flags & opFlagsEngine, Context: ctx,
		MW: mw.token.Load(), MR: mrToken, RemoteAddr: addr, Length: length, Access: access, Tokens: memreg.Tokens{Remote: remote}}
	if err := b.postLocal("bind", &wr); err != nil {
		return err
	}
	mw.token.Store(wr.Tokens.Remote)
	return nil
}

// postLocal posts a local operation and maps an inline failure.
func (b *inprocQP) postLocal(op string, wr *rc.SendWR) error {
	switch st := b.rc.PostSend(wr); st {
	case StatusSuccess:
		return nil
	case StatusAccessViolation:
		return errorf(StatusAccessViolation, op, "refused by the token table: closed or other-PD MR or window, a range outside the MR, "+
			"rights beyond the MR's (or remote rights on an FRMR without remote access), or an FRMR still registered (invalidate it first)")
	default:
		return postError(op, st)
	}
}

func (b *inprocQP) fastRegister(ctx any, mr *MR, buf []byte, flags OpFlag) error {
	return b.fastRegisterAt(ctx, mr, addrOf(buf), buf, flags, memreg.Tokens{})
}

// fastRegisterAt is FastRegister of buf under address va; want, if not
// zero, names the keys of the new tokens (the daemon posts a client's
// FastRegister so, with the client's address: memreg.FastRegisterKeys).
func (b *inprocQP) fastRegisterAt(ctx any, mr *MR, va uint64, buf []byte, flags OpFlag, want memreg.Tokens) error {
	const op = "fast register"
	if err := checkOpFlags(postFastRegister, flags, b.q.adapter.info.AdapterFlags); err != nil {
		b.rc.RingDeferred()
		return err
	}
	switch {
	case mr == nil || mr.fast == nil || mr.fast.pages == 0:
		b.rc.RingDeferred()
		return errFastRegisterNotFast
	case va == 0 || int(va%PageSize)+len(buf) > mr.fast.pages*PageSize:
		b.rc.RingDeferred()
		return errFastRegisterSize
	}
	wr := rc.SendWR{Op: rc.OpFastRegister, Flags: flags & opFlagsEngine, Context: ctx,
		MR: mr.tokens.Local, RemoteAddr: va, Buf: buf, Access: fastRegisterAccess(flags), Tokens: want}
	if err := b.postLocal(op, &wr); err != nil {
		return err
	}
	mr.tokens, mr.buf, mr.va = wr.Tokens, buf, va
	mr.flags = MRFlag(wr.Access)
	return nil
}

// invalidated does nothing: the token table itself knows.
func (b *inprocQP) invalidated(Invalidatable) {}

func (b *inprocQP) peerWrites() uint64 { return b.rc.PlacedWrites() }

func (b *inprocQP) armPeerWrites(ch chan struct{}) {
	if b.writeArm == nil || *b.writeArm != ch {
		box := ch
		b.writeArm = &box
	}
	b.rc.ArmPlacedWrites(b.writeArm)
}

func (b *inprocQP) flush() { b.rc.Flush() }

func (b *inprocQP) close() error {
	err := b.q.adapter.provider().CloseQP(b.rc)
	if b.srq != nil {
		b.srq.detach() // the engine let go of the QP: a pending SRQ close may complete
	}
	if err != nil {
		return &Error{Status: StatusInternalError, Op: "close qp", Err: err}
	}
	return nil
}

// connectOOB is ConnectOOB on the engine's QP.
func (b *inprocQP) connectOOB(remote Endpoint, opts ConnectOptions) error {
	const op = "connect oob"
	q := b.q
	a := q.adapter
	prov := a.provider()
	pmtu := prov.PathMTU()
	local := q.LocalEndpoint()
	p := rc.ConnParams{
		InboundReadLimit:  16,
		OutboundReadLimit: 16,
		AckTimeout:        4096 * time.Nanosecond << 14,
		RetryCount:        7,
		RNRRetry:          7,
		MinRNRTimer:       rocev2.RNRTimerFor(10 * time.Microsecond),
		PathMTU:           pmtu,
	}
	if opts.PathMTU != 0 {
		m, ok := rocev2.MTUFromBytes(opts.PathMTU)
		if !ok || m > pmtu {
			return errorf(StatusInvalidParameter, op, "path MTU %d (the interface carries up to %d)", opts.PathMTU, pmtu.Bytes())
		}
		p.PathMTU = m
	}
	if opts.InboundReadLimit != 0 {
		p.InboundReadLimit = opts.InboundReadLimit
	}
	if opts.OutboundReadLimit != 0 {
		p.OutboundReadLimit = opts.OutboundReadLimit
	}
	if p.InboundReadLimit < 0 || p.OutboundReadLimit < 0 {
		return errorf(StatusInvalidParameter, op, "negative read limit")
	}
	p.InboundReadLimit = min(p.InboundReadLimit, int(a.info.MaxInboundReadLimit))
	p.OutboundReadLimit = min(p.OutboundReadLimit, int(a.info.MaxOutboundReadLimit))
	if opts.AckTimeout != 0 {
		p.AckTimeout = opts.AckTimeout
	}
	if opts.RetryCount != nil {
		p.RetryCount = *opts.RetryCount
	}
	if opts.RNRRetry != nil {
		p.RNRRetry = *opts.RNRRetry
	}
	if opts.MinRNRTimer != 0 {
		p.MinRNRTimer = rocev2.RNRTimerFor(opts.MinRNRTimer)
	}
	if p.RetryCount < 0 || p.RetryCount > 7 || p.RNRRetry < 0 || p.RNRRetry > 7 || p.AckTimeout < 0 {
		return errorf(StatusInvalidParameter, op, "retry counts %d/%d (0-7) or ACK timeout %v", p.RetryCount, p.RNRRetry, p.AckTimeout)
	}
	if opts.TrafficClass != nil {
		tc := opts.TrafficClass.rc()
		if err := tc.Validate(); err != nil {
			return &Error{Status: StatusInvalidParameter, Op: op, Err: err}
		}
		p.Traffic = &tc
	}
	if !remote.IP.IsValid() || remote.IP.Unmap().Is4() != local.IP.Is4() {
		return errorf(StatusInvalidParameter, op, "remote address %v does not match the local %v", remote.IP, local.IP)
	}
	mac := remote.MAC
	if len(mac) == 0 {
		var err error
		if mac, err = prov.ResolveNeighbour(remote.IP.Unmap()); err != nil {
			return &Error{Status: StatusHostUnreachable, Op: op, Detail: remote.IP.String(), Err: err}
		}
	}
	if len(mac) != 6 {
		return errorf(StatusInvalidParameter, op, "remote MAC %v", mac)
	}
	p.Local = rc.Endpoint{IP: local.IP, QPN: local.QPN, PSN: local.PSN}
	copy(p.Local.MAC[:], local.MAC)
	p.Remote = rc.Endpoint{IP: remote.IP.Unmap(), QPN: remote.QPN, PSN: remote.PSN}
	copy(p.Remote.MAC[:], mac)
	if err := b.rc.Connect(p); err != nil {
		if errors.Is(err, rc.ErrBadConfig) {
			return &Error{Status: StatusInvalidParameter, Op: op, Err: err}
		}
		return &Error{Status: StatusConnectionInvalid, Op: op, Err: err}
	}
	return nil
}
