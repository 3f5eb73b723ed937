package cm

import (
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// PathInfo is what a UD datagram to a peer's QP1 needs, seen from this
// adapter: our address and MAC, the peer's, the partition key, and the
// peer's GSI QP. For a received MAD it is the path back to its sender (the
// frame's source becomes Remote), so a reply goes where the request came
// from.
type PathInfo struct {
	LocalIP, RemoteIP   netip.Addr
	LocalMAC, RemoteMAC rocev2.MAC
	// Ifindex and Ifname name the interface the kernel routes through
	// (ResolvePath fills them; the CM only reports them).
	Ifindex int
	Ifname  string
	// MTU is the interface MTU; the path MTU is the largest IB MTU that fits
	// (rocev2.MTUForNetdev). 0 means 1500.
	MTU int
	// PKey is the partition key; 0 means rocev2.DefaultPKey.
	PKey uint16
	// PeerQP is the QP the peer's MADs come from and ours go to: 1 (the
	// GSI) unless the peer redirects, which RoCE peers do not. 0 means 1.
	PeerQP uint32
}

func (p *PathInfo) pkey() uint16 {
	if p.PKey == 0 {
		return rocev2.DefaultPKey
	}
	return p.PKey
}

func (p *PathInfo) peerQP() uint32 {
	if p.PeerQP == 0 {
		return rocev2.GSIQP
	}
	return p.PeerQP
}

func (p *PathInfo) pathMTU() (rocev2.MTU, bool) {
	mtu := p.MTU
	if mtu == 0 {
		mtu = 1500
	}
	return rocev2.MTUForNetdev(mtu)
}

// RemoteInfo is everything a QP needs to leave INIT for RTR and RTS: the
// peer QP, the PSNs, and the transport parameters both sides agreed on in
// REQ and REP (cm.c cm_init_qp_rtr_attr, cm_init_qp_rts_attr).
type RemoteInfo struct {
	// Path is the addressing of the data packets (IPs and MACs).
	Path PathInfo
	// QPN is the peer's QP number.
	QPN uint32
	// PSN is the first PSN the peer sends (our expected PSN at RTR).
	PSN rocev2.PSN
	// PathMTU bounds each packet's payload.
	PathMTU rocev2.MTU
	// InboundReadLimit is how many RDMA READs and atomics the peer may have
	// outstanding at us (max_dest_rd_atomic, responder resources);
	// OutboundReadLimit is how many we may issue (max_rd_atomic, initiator
	// depth). Both are already the minimum of the two sides.
	InboundReadLimit, OutboundReadLimit uint8
	// RetryCount is the transport retry count (3 bits), RNRRetry the RNR
	// retry count (3 bits; 7 means infinite).
	RetryCount, RNRRetry uint8
	// AckTimeout is the local ACK timeout exponent: 4.096 µs × 2^AckTimeout,
	// 0 meaning infinite (IBTA 9.7.6.1.3).
	AckTimeout uint8
	// FlowLabel is the REQ's flow label; UDPSourcePort is the UDP source
	// port Linux peers derive from it (rdma_get_udp_sport).
	FlowLabel     uint32
	UDPSourcePort uint16
	// TrafficClass is the REQ's primary path traffic class, the IP TOS
	// byte (DSCP and ECN) the active side asked for: ours on the active
	// side (Params.TrafficClass), the peer's on the passive side.
	TrafficClass uint8
}

// AckTimeoutDuration returns AckTimeout as a duration; 0 for infinite.
func (r *RemoteInfo) AckTimeoutDuration() time.Duration {
	if r.AckTimeout == 0 {
		return 0
	}
	return time.Duration(4096<<r.AckTimeout) * time.Nanosecond
}

// QP is the reliable-connected queue pair a connection drives. The public
// ndk QP implements it over the RC engine.
//
// The Manager calls these methods without holding its lock, one at a time
// per connection, so they may block briefly and may call back into the
// Manager.
type QP interface {
	// QPN is the QP number the peer addresses.
	QPN() uint32
	// StartingPSN is the first PSN this QP sends; it goes into REQ or REP.
	StartingPSN() rocev2.PSN
	// ToRTR moves the QP from INIT to ready-to-receive toward the peer.
	ToRTR(RemoteInfo) error
	// ToRTS moves the QP from RTR to ready-to-send.
	ToRTS() error
	// ToError moves the QP to the error state: outstanding and later work
	// requests complete as flushed. It is called at most once.
	ToError()
	// Drained calls f once, when every DMA of the QP has finished after
	// ToError (immediately if that is already so). Disconnect completes
	// only then (NDKPI.md §8 Disconnect).
	Drained(f func())
}

// Transport sends MADs. The engine implements it by framing the MAD as a
// UD SEND_ONLY to the peer's QP1 (see GSIFramer) and transmitting it.
type Transport interface {
	// SendMAD sends one 256-byte MAD along dst. It must not keep mad after
	// it returns, and must not call back into the Manager synchronously.
	// An error counts as a lost datagram: the CM's retransmission covers it.
	SendMAD(dst PathInfo, mad *[rocev2.MADLen]byte) error
}
