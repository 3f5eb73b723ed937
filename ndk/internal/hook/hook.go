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
	// BellFD (a memfd) holds the engine's doorbell flags at offset 0,
	// BellSize bytes; EventFD is the doorbell's eventfd. A client maps
	// the one and rings the other with shm.Doorbell. Both belong to the
	// adapter: dup them to hand them out.
	BellFD, EventFD, BellSize int
	// Add and Remove put a poller in the engine's loop and take it out;
	// after Remove the poller is not running and never runs again.
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
