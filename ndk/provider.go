package ndk

import (
	"net"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// provider is what an Adapter runs on: the engines that run its QPs, the
// wire they share and connection management. The adapter keeps the NDK
// object model (CQs, PDs, MRs, tokens, connectors) and asks the provider
// only for these. Open builds the in-process provider
// (ndk/internal/inproc).
type provider interface {
	// Address, MAC and PathMTU describe the wire: the local IP address
	// QPs send from, the interface's MAC, the largest path MTU it carries.
	Address() netip.Addr
	MAC() rocev2.MAC
	PathMTU() rocev2.MTU
	// Buffers is memory the wire sends from in place (AllocBuffer), or
	// nil.
	Buffers() []byte
	// BufferSlots is the layout the ports expect of Buffers'
	// allocations (headroom for one-descriptor sends), or nil.
	BufferSlots() *port.TxSlots

	// CreateQP creates a QP with a number of the provider's choosing
	// (cfg.QPN is ignored) and returns it with its queue.
	CreateQP(cfg rc.QPConfig) (*rc.QP, int, error)
	// CloseQP closes q and releases its number.
	CloseQP(q *rc.QP) error
	// JoinMulticast and LeaveMulticast make the UD QP q a member of a
	// multicast group and end it, on the wire too (inproc's
	// multicast.go).
	JoinMulticast(q *rc.QP, group netip.Addr) error
	LeaveMulticast(q *rc.QP, group netip.Addr) error
	// Stats returns each engine's counters, by queue.
	Stats() []rc.Stats
	// ResolveNeighbour finds the MAC of ip, a peer on the wire.
	ResolveNeighbour(ip netip.Addr) (net.HardwareAddr, error)

	// Manager is the IB CM on QP1, or nil without connection management.
	Manager() *cm.Manager
	// ResolvePath finds the route from src (zero: any) to dst.
	ResolvePath(src, dst netip.Addr) (cm.PathInfo, error)
	// ConnectionQP is the CM's handle on q, whose responder expects psn
	// first.
	ConnectionQP(q *rc.QP, psn uint32) cm.QP
	// MADDrops counts the MADs lost locally, received and sent.
	MADDrops() (queue, send uint64)
	// Progress runs a turn of each engine that polls PollProgress and
	// is not in a turn already, on the caller's goroutine, and returns
	// the work they did (rc.Engine.Progress). It never blocks.
	Progress() int
	// ConsumerBlocks tells the engines that a consumer is about to block
	// on a notification rather than poll (rc.Engine.ConsumerBlocks).
	ConsumerBlocks()

	// Close stops connection management, then the engines (cancelling
	// what QPs still hold), and releases the wire.
	Close()
}
