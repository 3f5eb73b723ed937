package ndk

import (
	"sync/atomic"
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
	handle uint32        // the token table's slot handle (the daemon's, there)
	token  atomic.Uint32 // the current remote token
	open   bool          // guarded by pd.mu
}

// CreateMW creates an unbound memory window on the PD (NdkCreateMw). It
// fails with STATUS_INSUFFICIENT_RESOURCES when the adapter's token table
// is full and STATUS_INVALID_HANDLE once the PD is closing.
func (pd *PD) CreateMW() (*MW, error) { return pd.be.createMW() }

// RemoteToken is the token a peer passes in Read, Write and
// SendAndInvalidate to reach the window (NdkGetRemoteTokenFromMw). It is
// valid as soon as Bind returns, before Bind completes, and changes with
// each Bind.
func (mw *MW) RemoteToken() uint32 { return mw.token.Load() }

// Close closes the window (NdkCloseMw): its token fails at once. A second
// Close does nothing; it never fails and never pends.
func (mw *MW) Close() { mw.pd.be.closeMW(mw) }

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
	return q.be.bind(ctx, mr, mw, addr, length, flags)
}

var errBindNil = errorf(StatusInvalidParameter, "bind", "an MR and an MW are required")

// opFlagsEngine are the flags the engine acts on; the rights flags of
// Bind and FastRegister share bits with nothing it reads, but they are
// passed as access rights instead.
const opFlagsEngine = OpFlagSilentSuccess | OpFlagReadFence | OpFlagDefer

// QueryExtension is NdkQueryExtension on the MW (STATUS_NOT_SUPPORTED;
// extension.go says why).
func (mw *MW) QueryExtension(id GUID, v Version) (any, error) { return queryExtension("mw", id, v) }
