package rc

import (
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/counters"
)

// QPInfo is what an operator sees of one QP (ndkxdp qp): its state, its
// peer, where its PSNs stand and its counts since it was created.
type QPInfo struct {
	QPN   uint32
	State State
	// Type is the transport, as rdma resource show qp names it: "RC",
	// "UC" or "UD".
	Type string
	// Peer is the remote address and QPN once connected.
	PeerIP  netip.Addr
	PeerQPN uint32
	PathMTU int
	// SendPSN is the PSN of the next new request packet; UnackedPSN the
	// oldest not yet acknowledged; ExpectedPSN the responder's next.
	SendPSN, UnackedPSN, ExpectedPSN uint32
	// Outstanding is the requests posted and not yet completed;
	// ReadsOut the READs and atomics under way (bounded by the ORD).
	Outstanding, ReadsOut int
	// Counts, as the engine's Stats but for this QP.
	counters.QP
}

// QPs returns a snapshot of every QP of the engine, taken on the engine
// goroutine (nil once the engine is closed). It allocates: an operator's
// call, not the data path's.
func (e *Engine) QPs() []QPInfo {
	var out []QPInfo
	_ = e.do(func() {
		out = make([]QPInfo, 0, len(e.qps))
		for _, q := range e.qps {
			out = append(out, q.info())
		}
	})
	return out
}

func (q *QP) info() QPInfo {
	t := &q.t
	x := QPInfo{
		QPN: q.cfg.QPN, State: q.State(), Type: "RC",
		SendPSN: uint32(t.nextPSN), UnackedPSN: uint32(t.una), ExpectedPSN: uint32(t.ePSN),
		Outstanding: int(q.sq.tail.Load() - t.sqHead), ReadsOut: t.readsOut,
		QP: t.n,
	}
	if t.connected {
		x.PeerIP, x.PeerQPN, x.PathMTU = t.peerIP, t.params.Remote.QPN, int(t.pmtu)
	}
	switch {
	case q.cfg.UC:
		x.Type = "UC"
	case q.cfg.UD:
		x.Type = "UD"
	}
	return x
}
