// Package hook is the typed seam between the daemon (ndk/daemon) and the
// in-process adapter it serves: what only the daemon reaches in ndk, as
// one interface, Backend. Registering a client's memory under the
// client's own address, posting its local operations, reading a CQ's
// entries with the solicited bit that NDK_RESULT_EX does not carry,
// telling a failed QP from one not yet connected, how full a QP's queues
// are, running in an engine's loop, and the provider under an adapter
// (the operator's view).
//
// Backend is generic in ndk's types because hook cannot import ndk (ndk
// installs it): ndk checks at compile time that its implementation is a
// Backend of its own types, and the daemon gets it back typed with those
// same types (Get), so every call across the seam is checked by the
// compiler on both sides; the one dynamic step is Get's assertion, made
// once, when a daemon starts.
package hook

import "github.com/ndkxdp/ndkxdp/ndk/internal/inproc"

// Entry is a completion as the daemon's relay needs it.
type Entry struct {
	Status, Bytes, Type, ProviderErrorCode uint32
	TypeSpecific                           uint64
	QPContext, RequestContext              any
	// Solicited: a receive of a solicited send, or any failed completion
	// (what a SOLICITED arm fires on).
	Solicited bool
	// HasImmediate and Immediate: the ImmDt of a receive completion of a
	// SEND or WRITE with immediate.
	HasImmediate bool
	Immediate    uint32
}

// Backend is what the daemon does on its adapter (A) and the adapter's
// protection domains (PD), regions (MR), windows (MW), CQs and QPs beyond
// ndk's public API. flags are NDK_MR_FLAG_* or NDK_OP_FLAG_* values.
type Backend[A, PD, MR, MW, CQ, QP any] interface {
	// RegisterAt registers buf in pd under address va, the address the
	// client's process has it at.
	RegisterAt(pd PD, va uint64, buf []byte, flags uint32, invalidatable bool) (MR, error)
	// Bind, FastRegister and Invalidate post a client's local operation
	// on qp with request context ctx: NdkBind of mw to the MR whose local
	// token is mrToken, giving the window the key of remote;
	// NdkFastRegister of mr with buf under the client's address va and
	// the keys of local and remote; NdkInvalidate of token. They allocate
	// nothing.
	Bind(qp QP, ctx any, mw MW, mrToken uint32, addr, length uint64, flags, remote uint32) error
	FastRegister(qp QP, ctx any, mr MR, va uint64, buf []byte, flags, local, remote uint32) error
	Invalidate(qp QP, ctx any, token, flags uint32) error
	// KeyBits is the width of the keys of a's tokens.
	KeyBits(a A) int
	// WindowHandle is mw's local token: its slot's handle, whose key a
	// new remote token must not repeat.
	WindowHandle(mw MW) uint32
	// PopCQ moves up to len(dst) completions of cq into dst. It allocates
	// nothing.
	PopCQ(cq CQ, dst []Entry) int
	// QPFailed reports whether qp is in error or closed: it will never be
	// connected again. A QP enters error right after the completion of
	// the request that failed it, and before it cancels the others.
	QPFailed(qp QP) bool
	// QPQueued returns how many requests qp's send and receive queues
	// hold, posted and not retired.
	QPQueued(qp QP) (send, recv uint64)
	// SetReceiveRefill has qp's engine call f, on the engine's goroutine,
	// when a datagram finds qp's receive queue empty, before it drops
	// it; f reports whether it posted receives (rc.QP.SetReceiveRefill).
	SetReceiveRefill(qp QP, f func() bool)
	// Provider returns the in-process provider a runs on, nil for a
	// daemon-backed adapter: the operator's view reads the wire, queues
	// and QPs from it.
	Provider(a A) *inproc.Provider
	// Engine returns the engine of a's queue 0, which the relays run in.
	Engine(a A) (*Engine, error)
}

var backend any

// Install makes b the backend Get returns; ndk calls it once, when it
// initializes.
func Install[A, PD, MR, MW, CQ, QP any](b Backend[A, PD, MR, MW, CQ, QP]) { backend = b }

// Get returns the installed backend, typed with ndk's types. It panics if
// they are not the types ndk installed it with: a build that links the
// daemon with another ndk cannot run.
func Get[A, PD, MR, MW, CQ, QP any]() Backend[A, PD, MR, MW, CQ, QP] {
	return backend.(Backend[A, PD, MR, MW, CQ, QP])
}

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
