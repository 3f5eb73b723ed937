// Package hook lets the daemon (ndk/daemon) reach the two things of package
// ndk that no application should: registering a client's memory under the
// client's own address, and reading a CQ's entries with the solicited bit
// that NDK_RESULT_EX does not carry. Package ndk installs them when it
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
