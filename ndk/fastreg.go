package ndk

import (
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// PageSize is NDK's PAGE_SIZE: the unit of FRMR sizes
// (NdkInitializeFastRegisterMr's AdapterPageCount, FRMRPageCount).
const PageSize = 4096

// fastMR is the state of an MR created with FastRegister=TRUE.
type fastMR struct {
	handle   uint32 // the token table's slot handle
	pages    int    // AdapterPageCount of the last InitializeFastRegister; 0 before
	remoteOK bool
	// On a daemon-backed adapter (daemon_mem.go), what the client knows of
	// the registration, for the inline refusals the token table makes in
	// process: revoked while the MR holds none (initialized, invalidated
	// by its own Invalidate, or seen invalidated in a completion: a peer's
	// SendAndInvalidate, a READ_LOCAL_INVALIDATE), and cur, its tokens
	// (local<<32 | remote) for the completions to compare.
	revoked atomic.Bool
	cur     atomic.Uint64
}

// CreateMR creates an MR on the PD (NdkCreateMr). With fastRegister false
// it is registered with Register (NdkRegisterMr); PD.RegisterMR does both
// at once. With fastRegister true it is sized with InitializeFastRegister
// and then given memory by QP.FastRegister, any number of times, with an
// Invalidate between two.
func (pd *PD) CreateMR(fastRegister bool) (*MR, error) {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closing {
		return nil, errorf(StatusInvalidHandle, "create mr", "pd closed")
	}
	mr := &MR{pd: pd}
	if fastRegister {
		mr.fast = &fastMR{}
	}
	return mr, nil
}

// Register registers buf with the rights in flags on an MR created with
// fastRegister false (NdkRegisterMr); see PD.RegisterMR for the rules and
// failures. It fails with STATUS_INVALID_DEVICE_REQUEST on a fast-register
// MR ("only for an MR created with FastRegister=FALSE") or one already
// registered.
func (m *MR) Register(buf []byte, flags MRFlag) error {
	pd := m.pd
	pd.mu.Lock()
	bad := m.fast != nil || m.registered
	pd.mu.Unlock()
	if bad {
		return errorf(StatusInvalidDeviceRequest, "register mr", "NdkRegisterMr needs an unregistered MR created with FastRegister=FALSE")
	}
	r, err := pd.RegisterMR(buf, flags)
	if err != nil {
		return err
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	delete(pd.mrs, r)
	*m = *r // the registration RegisterMR made, daemon handle included
	pd.mrs[m] = struct{}{}
	return nil
}

// InitializeFastRegister readies a fast-register MR for FastRegisters of
// up to pages pages of PageSize bytes (NdkInitializeFastRegisterMr);
// remoteAccess allows them to grant remote rights. It gives the MR tokens
// (LocalToken, RemoteToken) but no memory. It may be called again, which
// drops the previous registration. It fails with
// STATUS_INVALID_DEVICE_REQUEST on an MR not created with
// fastRegister true, STATUS_IMPLEMENTATION_LIMIT for pages outside [1,
// MaxRegistrationSize/PageSize], STATUS_INSUFFICIENT_RESOURCES when the
// token table is full and STATUS_INVALID_HANDLE once the PD is closing.
func (m *MR) InitializeFastRegister(pages int, remoteAccess bool) error {
	const op = "initialize fast register mr"
	pd := m.pd
	if m.fast == nil {
		return errorf(StatusInvalidDeviceRequest, op, "the MR was not created with FastRegister=TRUE")
	}
	if pages < 1 || uint64(pages) > pd.adapter.info.MaxRegistrationSize/PageSize {
		return errorf(StatusImplementationLimit, op, "%d pages outside [1, %d]", pages, pd.adapter.info.MaxRegistrationSize/PageSize)
	}
	return pd.be.initFastRegister(m, pages, remoteAccess)
}

// FastRegister gives a fast-register MR the memory buf (NdkFastRegister).
// NDK's page array, first-byte offset (FBO), length and base virtual
// address describe memory by adapter logical addresses, which a Go
// program does not have (BuildLAM is not supported, lam.go): here the
// memory is buf, its address is the MR's address as with RegisterMR, and
// the FBO is that address's offset into its page, so buf must fit the
// initialized pages: FBO + len(buf) <= pages*PageSize. Flags:
// OpFlagAllowLocalWrite, OpFlagAllowRemoteRead, OpFlagAllowRemoteWrite,
// OpFlagRDMAReadSink, plus SILENT_SUCCESS, READ_FENCE and DEFER.
//
// The registration takes effect, and the MR's tokens, address and length
// change, when FastRegister returns (NdkGetRemoteTokenFromMr is
// "refreshed when NdkFastRegister returns"): requests posted after it may
// use the new LocalToken at once. It completes in order with the QP's
// other requests, with Type OpFastRegister. The MR must not be
// registered: Invalidate it between two FastRegisters.
//
// It fails inline with STATUS_INVALID_DEVICE_REQUEST on an MR that is not
// an initialized fast-register MR, STATUS_INVALID_PARAMETER for an empty
// buf or one over the pages, STATUS_ACCESS_VIOLATION for remote rights on
// an MR initialized without remote access, or an MR still registered; and
// like Send otherwise. Allocates nothing.
func (q *QP) FastRegister(ctx any, mr *MR, buf []byte, flags OpFlag) error {
	return q.be.fastRegister(ctx, mr, buf, flags)
}

// The inline refusals of FastRegister, built once: a post allocates only
// when it fails for a reason its message must spell out.
var (
	errFastRegisterNotFast = errorf(StatusInvalidDeviceRequest, "fast register", "the MR is not a fast-register MR initialized with InitializeFastRegister")
	errFastRegisterSize    = errorf(StatusInvalidParameter, "fast register", "empty buffer, or FBO + length over the MR's pages")
)

// fastRegisterAccess maps FastRegister's rights flags to the token
// table's, which are NDK_MR_FLAG_* values.
func fastRegisterAccess(f OpFlag) memreg.Access {
	var a memreg.Access
	if f&OpFlagAllowLocalWrite != 0 {
		a |= memreg.Access(MRFlagAllowLocalWrite)
	}
	if f&OpFlagAllowRemoteRead != 0 {
		a |= memreg.Access(MRFlagAllowRemoteRead)
	}
	if f&OpFlagAllowRemoteWrite == OpFlagAllowRemoteWrite {
		a |= memreg.Access(MRFlagAllowRemoteWrite)
	}
	if f&OpFlagRDMAReadSink != 0 {
		a |= memreg.Access(MRFlagRDMAReadSink)
	}
	return a
}

// Invalidatable is what NdkInvalidate accepts: a fast-register MR or a
// memory window (*MR, *MW).
type Invalidatable interface {
	invalidationToken() uint32
}

// A nil *MR or *MW names no region: token 0, which no region has, so the
// Invalidate completes in error instead of panicking.
func (m *MR) invalidationToken() uint32 {
	if m == nil {
		return 0
	}
	return m.tokens.Remote
}

func (mw *MW) invalidationToken() uint32 {
	if mw == nil {
		return 0
	}
	return mw.token.Load()
}

// Invalidate revokes a fast-registered MR or a bound window (NdkInvalidate,
// IB_WR_LOCAL_INV): from the moment it returns, every use of their tokens
// fails, locally and from peers. Flags: SILENT_SUCCESS, READ_FENCE, DEFER.
// It completes in order with the QP's other requests, with Type
// OpInvalidate. Invalidating what is not valid (never registered or
// bound, invalidated already, locally or by a peer's SendAndInvalidate
// (seed 002), an MR registered with RegisterMR, which "is never used"
// with NdkInvalidate) completes with STATUS_INVALID_DEVICE_REQUEST and,
// as every error completion, moves the QP to the error state. Inline
// failures are those of Send. Allocates nothing.
func (q *QP) Invalidate(ctx any, obj Invalidatable, flags OpFlag) error {
	if obj == nil {
		q.be.ringDeferred()
		return errInvalidateNil
	}
	if err := q.invalidate(ctx, obj.invalidationToken(), flags); err != nil {
		return err
	}
	q.be.invalidated(obj)
	return nil
}

var errInvalidateNil = errorf(StatusInvalidParameter, "invalidate", "no MR or MW given")

// invalidate is Invalidate of the fast MR or window whose token is token.
func (q *QP) invalidate(ctx any, token uint32, flags OpFlag) error {
	wr := rc.SendWR{Op: rc.OpInvalidate, Flags: flags, Context: ctx, InvalidateToken: token}
	return q.post("invalidate", postInvalidate, &wr)
}
