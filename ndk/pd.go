package ndk

import (
	"math"
	"sync"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
)

// PD is a protection domain (NDK_PD): the parent of MRs (and, with the
// transport, of QPs, MWs and SRQs). Memory registered in one PD is usable
// only by QPs of the same PD.
type PD struct {
	adapter *Adapter
	id      uint32    // the daemon's handle, on a daemon-backed adapter
	be      pdBackend // inproc_pd.go, daemon_pd.go

	mu       sync.Mutex
	mrs      map[*MR]struct{}
	mws      map[*MW]struct{}  // mw.go; nil until the first
	srqs     map[*SRQ]struct{} // srq.go; nil until the first
	qps      int               // QPs created on the PD and not yet closed (lifetime.go)
	closing  bool              // Close was called: no new registrations
	finished bool              // the close completed: done is closed
	done     chan struct{}
}

// MR is a registered memory region (NDK_MR, registered with NdkRegisterMr).
type MR struct {
	pd     *PD
	buf    []byte
	va     uint64
	flags  MRFlag
	tokens memreg.Tokens
	rh     uint32 // the daemon's handle, on a daemon-backed adapter
	// fast is set for an MR created with FastRegister=TRUE (fastreg.go);
	// then buf, va and tokens change with each FastRegister.
	fast *fastMR

	registered bool // guarded by pd.mu
}

// SGE is NDK_SGE: a byte range of registered memory named by address and
// local token.
type SGE struct {
	Addr   uint64 // virtual address inside the MR
	Length uint32
	Token  uint32 // the MR's LocalToken
}

// RegisterMR registers buf with the access rights in flags (NdkCreateMr
// with FastRegister=FALSE followed by NdkRegisterMr; seed 001). The MR's
// address is buf's real address; the caller keeps buf alive and does not
// reuse it for other purposes until Deregister.
//
// It fails with STATUS_INVALID_PARAMETER for an empty or nil buf (a nil
// slice describes address 0, and zero-based addresses are not supported), a
// length above MaxRegistrationSize, or flag bits NDK_MR_FLAG_* does not
// define (including 0x4 without 0x1: ALLOW_REMOTE_WRITE is 0x5);
// STATUS_INSUFFICIENT_RESOURCES when the adapter's token table is full; and
// STATUS_INVALID_HANDLE once the PD is closing. RDMA_READ_SINK is always
// accepted: the adapter sets RDMA_READ_SINK_NOT_REQUIRED.
// Registration completes inline; it never pends.
func (pd *PD) RegisterMR(buf []byte, flags MRFlag) (*MR, error) {
	return pd.be.register(buf, flags, false)
}

// Close closes the PD (NdkClosePd). New registrations and QPs fail at
// once. If MRs are still registered or QPs open the close is pending
// (NDKPI.md §8: an antecedent closed before its successors completes once
// every successor is closed) and completes when the last one is
// deregistered or closed; Closed reports when.
// Close never blocks and never fails; a second Close does nothing.
func (pd *PD) Close() { pd.be.close() }

// maybeFinishLocked completes a pending close once no successor is left;
// pd.mu is held.
func (pd *PD) maybeFinishLocked() { pd.be.finishIfIdleLocked() }

// idleLocked reports whether the PD has no successors left; pd.mu is held.
func (pd *PD) idleLocked() bool {
	return len(pd.mrs) == 0 && len(pd.mws) == 0 && len(pd.srqs) == 0
}

// Closed returns a channel that is closed when the PD's close has
// completed (the NdkClosePd completion).
func (pd *PD) Closed() <-chan struct{} { return pd.done }

// finishLocked completes the close; pd.mu is held.
func (pd *PD) finishLocked() {
	pd.finished = true
	close(pd.done)
	pd.adapter.forgetPD(pd)
}

// LocalToken is the token for SGEs posted on this adapter
// (NdkGetLocalTokenFromMr). It fails every check once the MR is
// deregistered.
func (m *MR) LocalToken() uint32 { return m.tokens.Local }

// RemoteToken is the token a peer passes in Read, Write and
// SendAndInvalidate (NdkGetRemoteTokenFromMr; an IB R_Key). It differs from
// LocalToken.
func (m *MR) RemoteToken() uint32 { return m.tokens.Remote }

// Addr is the MR's virtual address: the address of the registered slice.
func (m *MR) Addr() uint64 { return m.va }

// Len is the registered length in bytes.
func (m *MR) Len() int { return len(m.buf) }

// Flags returns the access rights the MR was registered with.
func (m *MR) Flags() MRFlag { return m.flags }

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.buf }

// SGE returns the SGE for n bytes at offset off into the MR. It fails with
// STATUS_INVALID_PARAMETER if the range leaves the MR or n does not fit an
// SGE length.
func (m *MR) SGE(off, n int) (SGE, error) {
	if off < 0 || n < 0 || off > len(m.buf) || n > len(m.buf)-off || n > math.MaxUint32 {
		return SGE{}, errorf(StatusInvalidParameter, "sge", "range [%d, +%d) outside MR of %d bytes", off, n, len(m.buf))
	}
	return SGE{Addr: m.va + uint64(off), Length: uint32(n), Token: m.tokens.Local}, nil
}

// Deregister revokes the MR's tokens at once (NdkDeregisterMr); later
// requests and peer accesses that use them fail. The caller may reuse the
// memory once requests that used it have completed. It fails with
// STATUS_INVALID_HANDLE if the MR is not registered (deregistered already,
// or its adapter was closed).
func (m *MR) Deregister() error { return m.pd.be.deregister(m) }
