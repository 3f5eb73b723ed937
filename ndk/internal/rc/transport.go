package rc

import (
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/counters"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// qpTransport is a QP's transport state, owned by its engine goroutine:
// the header template, the requester's send cursor and PSNs, and the
// responder's expected PSN, message in progress, resources and pending
// acknowledgement.
type qpTransport struct {
	connected bool
	ud        bool         // an active UD QP (ud.go); never connected
	qkey      uint32       // a UD QP's Q_Key
	udTOS     uint8        // a UD QP's own IP TOS, for sends that name none
	groups    []netip.Addr // multicast groups a UD QP is attached to
	failed    bool
	drained   bool // QP.drained is closed
	active    bool // on the engine's active list
	timed     bool // on the engine's timed list
	params    ConnParams
	peerIP    netip.Addr     // Remote.IP, unmapped: frames from elsewhere are dropped
	localIP   netip.Addr     // Local.IP, unmapped: frames to another address are dropped
	hdr       rocev2.Headers // template: addresses, ports, DestQP
	l3        int
	pmtu      uint32
	ipID      uint16
	ackTO     int64       // ns; 0: no ACK timer
	n         counters.QP // per-QP counts, plain fields: only the engine goroutine touches them
	cc        dcqcn       // congestion control (congestion.go)

	// Requester. Send-ring indices: [sqHead, sqStart) have PSNs and are
	// unretired, [sqStart, tail) are posted but not started.
	sqHead, sqStart uint64
	txIdx           uint64 // WQE of the next packet to (re)send
	txPkt           uint32 // its packet index
	nextPSN         rocev2.PSN
	una             rocev2.PSN // oldest unacknowledged PSN
	readsOut        int        // started, uncompleted READs and atomics
	sinceAckReq     int
	retryLeft       int
	rnrLeft         int
	ackDeadline     int64
	rnrUntil        int64
	rnrPSN          rocev2.PSN
	retryGuard      bool // a go-back-N to retryPSN is under way
	retryPSN        rocev2.PSN
	rearmAt         int64      // a READ at the head is asked again then (reask); 0: none
	rearmPSN        rocev2.PSN // una when rearmAt was set
	// cwnd bounds the request packets in flight after a loss (0: only
	// the window does); cwndAcc counts packets acknowledged toward its
	// next step, cwndUna is una when they were last counted.
	cwnd, cwndAcc uint32
	cwndUna       rocev2.PSN

	// Responder.
	rqHead  uint64
	cur     uint32 // on an SRQ: the slab slot of the receive the message in progress took
	hasCur  bool
	ePSN    rocev2.PSN
	msn     uint32
	nakSent bool // a sequence or RNR NAK was sent; drop until ePSN arrives
	ucDrop  bool // UC: drop until the next FIRST or ONLY (uc.go)
	inMsg   uint8
	recvOff uint32
	wbuf    []byte
	woff    uint32
	res     []readResource
	resNext int
	ctl     ctlKind
	// ackHold delays a plain ACK after a completed receive: the consumer
	// often answers at once, and the ACK then leaves in the same kick as
	// the answer instead of a kick of its own ahead of it.
	ackHold int64
	ctlPSN  rocev2.PSN
	ctlSyn  rocev2.Syndrome
}

// readResource is one responder resource (IRD entry): a READ being
// answered, kept so a duplicate READ can be answered again from memory, or
// an executed atomic, kept so a duplicate gets the saved original value
// (ROCEV2.md 2, "Duplicates").
type readResource struct {
	first rocev2.PSN
	npkts uint32
	start uint32 // packet the current response run starts at (its FIRST)
	next  uint32 // next packet to send; == npkts when done
	// again marks a run restarted by a duplicate READ: the requester may
	// already have everything, so a new READ may take the slot.
	again bool
	// sent is how far any run of this READ got: packets below it are
	// sent again (the replay budget's), those from it on for the first
	// time (qpBudget's, as a first run's).
	sent   uint32
	va     uint64
	length uint32
	// buf holds the bytes from offset bufOff of the READ on: all of them
	// for a first run, the re-checked range of a duplicate's.
	buf    []byte
	bufOff uint32
	// rkey is the R_Key the READ or atomic was checked with: a duplicate
	// is answered only if it carries the same one and that key still
	// allows it (responder.go, rxe rxe_recheck_mr), so invalidating or
	// deregistering the region ends the replays.
	rkey uint32
	// stop and end bound the current run: the packet after its last, and
	// the byte offset from va where it ends. A duplicate may ask for less
	// than the rest of the original, and gets what it asked for (rxe).
	stop, end uint32
	// begun and lastAt are when the run's first and latest responses
	// left (engine clock): with the packets a duplicate says arrived, the
	// rate the requester took while the run was being sent. The time
	// after its last response, when a requester that lost one waits for
	// its own timeout before it asks again, is no part of that rate.
	begun, lastAt int64
	// atomic marks an executed CMP_SWAP or FETCH_ADD: its one "response"
	// is an ATOMIC_ACKNOWLEDGE carrying orig, the value before the
	// operation, which a duplicate gets again (never a second execution).
	atomic bool
	orig   uint64
}

func (r *readResource) sending() bool { return r.next < r.stop }

// Message being received.
const (
	msgNone uint8 = iota
	msgSend
	msgWrite
)

// ctlKind is the responder's pending acknowledgement; a stronger one
// replaces a weaker one.
type ctlKind uint8

const (
	ctlNone ctlKind = iota
	ctlAck
	ctlNAK   // PSN sequence error or RNR: the PSN and syndrome are kept
	ctlFatal // a NAK after which the QP is in error
)

func (t *qpTransport) setup(p ConnParams, tc TrafficClass) {
	t.params = p
	t.peerIP = p.Remote.IP.Unmap()
	t.localIP = p.Local.IP.Unmap()
	t.pmtu = uint32(p.PathMTU.Bytes())
	t.hdr = rocev2.Headers{
		Eth: rocev2.EthernetFields{Dst: p.Remote.MAC, Src: p.Local.MAC, HasVLAN: tc.VLAN, VLANTCI: tc.tci()},
		IP:  rocev2.NewIPFields(p.Local.IP, p.Remote.IP),
		UDP: rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, p.Local.QPN, p.Remote.QPN)},
		BTH: rocev2.BTHFields{PKey: rocev2.DefaultPKey, DestQP: p.Remote.QPN},
	}
	t.hdr.IP.TOS = rocev2.TOS(tc.DSCP, tc.ECN)
	t.l3 = t.hdr.L3Offset()
	t.cc = dcqcn{}
	t.ackTO = int64(p.AckTimeout)
	t.nextPSN = rocev2.PSN(p.Local.PSN & rocev2.PSNMask)
	t.una = t.nextPSN
	t.ePSN = rocev2.PSN(p.Remote.PSN & rocev2.PSNMask)
	t.retryLeft = p.RetryCount
	t.rnrLeft = p.RNRRetry
	t.res = make([]readResource, max(1, p.InboundReadLimit))
}

// toLocal reports whether p is addressed to this QP's Local endpoint:
// its MAC (unless zero) and its IP. A frame the NIC delivered for another
// address (promiscuous mode, a bridge, a forged header) is not the peer
// talking to this QP, whatever its QPN and PSN say.
func (t *qpTransport) toLocal(p *rocev2.Packet) bool {
	if m := t.params.Local.MAC; m != (rocev2.MAC{}) && p.Eth.Dst != m {
		return false
	}
	// An IPv4-mapped destination comes only in an IPv6 header, where no
	// host is addressed so (RFC 4291 2.5.5.2): it is not the IPv4 address
	// it maps.
	return !t.localIP.IsValid() || (p.IP.Dst.Unmap() == t.localIP && !p.IP.Dst.Is4In6())
}

// npkts is how many PSNs a message of n bytes takes: at least one.
func (t *qpTransport) npkts(n uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + t.pmtu - 1) / t.pmtu
}
