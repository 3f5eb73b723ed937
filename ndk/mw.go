package ndk

import (
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// MW is a memory window (NDK_MW, NdkCreateMw): a remote token for a range
// of a registered MR, given by QP.Bind and revoked by QP.Invalidate or by
// a peer's SendAndInvalidate naming it. Windows are IB type-2 windows
// bound through the send queue (NDKPI.md §9): a bound window answers
// only the peer of the QP that bound it; through another QP its token is
// a remote access error.
type MW struct {
	pd     *PD
	rh     uint32        // the daemon's handle, on a daemon-backed adapter
	handle uint32        // the token table's slot handle
	token  atomic.Uint32 // the current remote token
	open   bool          // guarded by pd.mu
}

// CreateMW creates an unbound memory window on the PD (NdkCreateMw). It
// fails with STATUS_INSUFFICIENT_RESOURCES when the adapter's token table
// is full and STATUS_INVALID_HANDLE once the PD is closing.
func (pd *PD) CreateMW() (*MW, error) {
	const op = "create mw"
	if pd.adapter.daemon != nil {
		return pd.adapter.daemon.createMW(pd)
	}
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

// RemoteToken is the token a peer passes in Read, Write and
// SendAndInvalidate to reach the window (NdkGetRemoteTokenFromMw). It is
// valid as soon as Bind returns, before Bind completes, and changes with
// each Bind.
func (mw *MW) RemoteToken() uint32 { return mw.token.Load() }

// Close closes the window (NdkCloseMw): its token fails at once. A second
// Close does nothing; it never fails and never pends.
func (mw *MW) Close() {
	pd := mw.pd
	if pd.adapter.daemon != nil {
		pd.adapter.daemon.closeMW(mw)
		return
	}
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

// Bind binds mw to length bytes at address addr of mr, with the remote
// rights in flags (NdkBind): OpFlagAllowRemoteRead and
// OpFlagAllowRemoteWrite, plus SILENT_SUCCESS, READ_FENCE and DEFER. The
// window's new token is RemoteToken as soon as Bind returns; the bind
// completes in order with the QP's other requests, with Type OpBind. A
// bound window may be bound again, which kills its old token.
//
// The range must lie inside the MR and the rights within the MR's (a
// window never grants what its MR does not): otherwise Bind fails inline
// with STATUS_ACCESS_VIOLATION, as does a window or MR that is closed or
// of another PD. Peers' accesses through the window are checked against
// its range and rights on the wire (a remote access error NAK otherwise),
// and fail once the MR is deregistered or invalidated. Other inline
// failures are those of Send. Allocates nothing.
func (q *QP) Bind(ctx any, mr *MR, mw *MW, addr, length uint64, flags OpFlag) error {
	if q.r != nil {
		return q.daemonBind(ctx, mr, mw, addr, length, flags)
	}
	if mr == nil || mw == nil {
		q.rc.RingDeferred()
		if err := checkOpFlags(postBind, flags, q.adapter.info.AdapterFlags); err != nil {
			return err
		}
		return errBindNil
	}
	return q.bind(ctx, mr.LocalToken(), mw, addr, length, flags, 0)
}

var errBindNil = errorf(StatusInvalidParameter, "bind", "an MR and an MW are required")

// bind is Bind of the MR whose local token is mrToken; remote, if not
// zero, names the key of the window's new token (the daemon posts a
// client's Bind so: memreg.BindKey).
func (q *QP) bind(ctx any, mrToken uint32, mw *MW, addr, length uint64, flags OpFlag, remote uint32) error {
	if err := checkOpFlags(postBind, flags, q.adapter.info.AdapterFlags); err != nil {
		q.rc.RingDeferred()
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
	if err := q.postLocal("bind", &wr); err != nil {
		return err
	}
	mw.token.Store(wr.Tokens.Remote)
	return nil
}

// opFlagsEngine are the flags the engine acts on; the rights flags of
// Bind and FastRegister share bits with nothing it reads, but they are
// passed as access rights instead.
const opFlagsEngine = OpFlagSilentSuccess | OpFlagReadFence | OpFlagDefer

// postLocal posts a local operation and maps an inline failure.
func (q *QP) postLocal(op string, wr *rc.SendWR) error {
	switch st := q.rc.PostSend(wr); st {
	case StatusSuccess:
		return nil
	case StatusAccessViolation:
		return errorf(StatusAccessViolation, op, "refused by the token table: closed or other-PD MR or window, a range outside the MR, "+
			"rights beyond the MR's (or remote rights on an FRMR without remote access), or an FRMR still registered (invalidate it first)")
	default:
		return postError(op, st)
	}
}

// QueryExtension is NdkQueryExtension on the MW (STATUS_NOT_SUPPORTED;
// extension.go says why).
func (mw *MW) QueryExtension(id GUID, v Version) (any, error) { return queryExtension("mw", id, v) }
