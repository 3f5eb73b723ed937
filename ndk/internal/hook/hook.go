// Package hook lets the daemon (ndk/daemon) reach the things of package
// ndk that no application should: registering a client's memory under the
// client's own address, reading a CQ's entries with the solicited bit
// that NDK_RESULT_EX does not carry, telling a failed QP from one not yet
// connected, ringing a QP's doorbell without a post, how full its queues
// are, running in an engine's loop, and the provider under an adapter
// (for the operator's view). Package ndk installs them when it
// initializes.
package hook

// Entry is a completion as the daemon's relay needs it.
type Entry struct {
	Status, Bytes, Type, ProviderErrorCode uint32
	TypeSpecific                           uint64
	QPContext, RequestContext              any
	// Solicited: a receive of a solicited send, or any failed completion
	// (what a SOLICITED arm fires on).
	Solicited bool
}

var (
	// RegisterAt registers buf in pd (an *ndk.PD) under address va with
	// NDK_MR_FLAG_* flags, and returns the *ndk.MR.
	RegisterAt func(pd any, va uint64, buf []byte, flags uint32, invalidatable bool) (any, error)
	// Bind, FastRegister and Invalidate post a client's local operation
	// on qp (an *ndk.QP) with request context ctx: NdkBind of mw (an
	// *ndk.MW) to the MR whose local token is mrToken, giving the window
	// the remote token's key of remote; NdkFastRegister of mr (an
	// *ndk.MR) with buf under the client's address va and the keys of
	// local and remote; NdkInvalidate of token. flags are NDK_OP_FLAG_*.
	// They allocate nothing.
	Bind         func(qp, ctx, mw any, mrToken uint32, addr, length uint64, flags, remote uint32) error
	FastRegister func(qp, ctx, mr any, va uint64, buf []byte, flags, local, remote uint32) error
	Invalidate   func(qp, ctx any, token, flags uint32) error
	// KeyBits is the width of the keys of adapter's (an *ndk.Adapter)
	// tokens.
	KeyBits func(adapter any) int
	// WindowHandle is the local token of mw (an *ndk.MW): its slot's
	// handle, whose key a new remote token must not repeat.
	WindowHandle func(mw any) uint32
	// PopCQ moves up to len(dst) completions of cq (an *ndk.CQ) into dst.
	// It allocates nothing.
	PopCQ func(cq any, dst []Entry) int
	// QPFailed reports whether qp (an *ndk.QP) is in error or closed: it
	// will never be connected again. A QP enters error right after the
	// completion of the request that failed it, and before it cancels the
	// others.
	QPFailed func(qp any) bool
	// RingDeferred submits the requests posted on qp (an *ndk.QP) with
	// DEFER since its last doorbell.
	RingDeferred func(qp any)
	// QPQueued returns how many requests qp's (an *ndk.QP) send and
	// receive queues hold, posted and not retired.
	QPQueued func(qp any) (send, recv uint64)
	// Provider returns the provider an adapter (an *ndk.Adapter) runs on,
	// an *inproc.Provider for one from ndk.Open, nil for one from
	// ndk.Dial: the daemon's operator requests read the wire, queues and
	// QPs from it.
	Provider func(adapter any) any
)

// Poller is rc.Poller: work that runs in an engine's loop.
type Poller interface {
	Poll() int
	Idle()
}

// Engine is the daemon's hold on the engine its relays run in.
type Engine struct {
	// Add and Remove put a poller in the engine's loop and take it out;
	// after Remove the poller is not running and never runs again. A
	// poller with a WakeFD() int method (an eventfd) also wakes the
	// engine's sleep through it; after Remove it is no longer watched.
	Add    func(Poller) error
	Remove func(Poller) error
	// Ring wakes the engine.
	Ring func()
	// PlacedWrites is the count of peer WRITE packets the engine of
	// queue q placed (rc.Engine.PlacedWrites), 0 for no such queue.
	PlacedWrites func(q int) uint64
}

// EngineOf returns the engine of adapter's (an *ndk.Adapter) queue 0.
var EngineOf func(adapter any) (*Engine, error)
