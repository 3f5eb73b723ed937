package cm

import (
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// state is a connection's CM state (IBTA 12.9.6, with the names cm.c uses).
type state uint8

const (
	stIdle      state = iota // created, not used yet
	stReqSent                // active: REQ sent (or MRAed), waiting for REP
	stRepWait                // active: REP received, QP moving to RTR/RTS
	stRepRcvd                // active: connected; waiting for CompleteConnect or Reject
	stReqRcvd                // passive: REQ delivered to the consumer
	stAccepting              // passive: Accept moving the QP to RTR/RTS
	stRepSent                // passive: REP sent, waiting for RTU
	stEstablished
	stDreqSent
	stTimeWait // over; answers duplicates until the time-wait timer fires
	stDone     // over and forgotten by the CM tables
)

var stateNames = [...]string{"idle", "REQ sent", "REP wait", "REP received", "REQ received",
	"accepting", "REP sent", "established", "DREQ sent", "time-wait", "done"}

func (s state) String() string { return stateNames[s] }

// lifetime tracks a connector's or listener's consumer callbacks so that
// its close completes only after they have returned.
type lifetime struct {
	closed    bool
	closing   bool // Close is running its own cancellations
	inflight  int
	closeDone func()
	// extra reports whether something else still holds the object open
	// (a listener's accepted connectors).
	extra func() bool
}

// finishable returns the close callback to run now, if the close can
// complete; the caller holds the Manager's lock.
func (lt *lifetime) finishable() func() {
	if !lt.closed || lt.closing || lt.inflight > 0 || lt.closeDone == nil {
		return nil
	}
	if lt.extra != nil && lt.extra() {
		return nil
	}
	f := lt.closeDone
	lt.closeDone = nil
	return f
}

// ConnectParams are the inputs of Connect besides addressing.
type ConnectParams struct {
	// InboundReadLimit is how many RDMA READs the peer may have in flight at
	// us (REQ ResponderResources); OutboundReadLimit how many we may issue
	// (REQ InitiatorDepth).
	InboundReadLimit, OutboundReadLimit uint8
	// PrivateData follows rdma_cm's header in the REQ: at most MaxCallerData.
	PrivateData []byte
	// Retry, if not nil, replaces the Manager's Params.RetryCount and
	// RNRRetry for this connection, as rdma_connect's conn_param does:
	// the REQ carries both, our QP retries with Retry.Count and the peer
	// with both, and we wait out the RNR NAKs as often as the REP says.
	Retry *RetryCounts
}

// RetryCounts are the transport retry counts rdma_cm's consumers set per
// connection (struct rdma_conn_param retry_count, rnr_retry_count): 3
// bits each; an RNR retry count of 7 means without limit.
type RetryCounts struct {
	Count, RNR uint8
}

func (r *RetryCounts) check(op string) error {
	if r != nil && (r.Count > 7 || r.RNR > 7) {
		return ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "retry counts %d/%d outside 0-7", r.Count, r.RNR)
	}
	return nil
}

// AcceptParams are the inputs of Accept.
type AcceptParams struct {
	InboundReadLimit, OutboundReadLimit uint8
	// PrivateData goes into the REP: at most MaxCalleeData.
	PrivateData []byte
	// Retry, if not nil, replaces the Manager's Params.RNRRetry in the
	// REP: how often the peer waits out our RNR NAKs (rdma_accept's
	// conn_param rnr_retry_count). Retry.Count is unused: the passive
	// side retries as the REQ asks (cm.c cm_req_handler).
	Retry *RetryCounts
}

// ConnectionData is what GetConnectionData returns: the read limits and
// the peer's private data. Before Accept the limits are the ones the peer
// asked for, seen from this side (inbound = the peer's initiator depth);
// once connected they are the effective ones, the minimum of both sides
// (NDKPI.md §8 Read limits). The private data is the whole field the peer's
// message carries (56 bytes of REQ after the rdma_cm header, 196 of REP,
// 148 of REJ): CM private data has no length, so NDK's "required data size"
// is the field size.
type ConnectionData struct {
	InboundReadLimit, OutboundReadLimit uint8
	PrivateData                         []byte
}

// Connector is one connection, active (Connect) or passive (handed over by
// a Listener): NDKPI's NDK_CONNECTOR on top of a CM communication ID.
// Its methods are safe for concurrent use; completions and events are
// called on the goroutine that made the state change (a HandleMAD, a timer,
// or the call itself), never with the Manager's lock held.
type Connector struct {
	m  *Manager
	lt lifetime

	passive  bool
	state    state
	shared   *SharedEndpoint
	ep       *endpoint
	listener *Listener

	localID, remoteID uint32
	remoteGUID        uint64
	remoteQPN         uint32
	tid               uint64 // of the REQ: REP, RTU, MRA and REJ reuse it
	qp                QP
	qpn               uint32
	path              PathInfo
	local, peer       netip.AddrPort

	req       rocev2.CMReq // sent (active) or received (passive)
	remote    RemoteInfo
	data      ConnectionData
	haveData  bool
	avTimeout uint8 // path ACK timeout exponent: time-wait and MRA waits

	// retransmission
	out         *[rocev2.MADLen]byte
	timeout     time.Duration
	maxRetries  uint8
	retriesLeft uint8
	timerGen    uint64
	timerSet    bool
	timerAt     int // 1 + the index of its entry in Manager.timers; 0: none
	// twPrev and twNext link the connections in time-wait, oldest first
	// (Manager.twOldest), so the oldest is evicted when a new one would
	// exceed Params.MaxTimeWait.
	twPrev, twNext *Connector

	// QP transitions run outside the lock; a ToError wanted meanwhile waits.
	transition  bool
	needQPError bool
	qpErrored   bool

	connectDone    func(error)
	acceptDone     func(error)
	disconnectDone func(error)
	onDisconnect   func(reason uint32)
	eventFired     bool
	aborted        bool // the QP failed and the CM ended the connection (TransportFailed)
	userDisconnect bool
	discAnswered   bool
	discErr        error
	drained        bool
	wasConnected   bool
	abortErr       error // why the connection ended before the consumer's next call
	inBacklog      bool
	rejOut         *[rocev2.MADLen]byte // the REJ we sent, repeated for duplicate REQs
}

// NewConnector returns an unused connector (NdkCreateConnector).
func (m *Manager) NewConnector() *Connector {
	return &Connector{m: m}
}

// ConnectionData returns the read limits and the peer's private data
// (NdkGetConnectionData). It is available once a connect request arrived
// (passive), once Connect completed (active), and after a rejection, whose
// REJ private data it then holds.
func (c *Connector) ConnectionData() (ConnectionData, error) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if !c.haveData {
		return ConnectionData{}, ndkpi.Errorf(ndkpi.StatusConnectionInvalid, "get connection data", nil, "no connection data in state %v", c.state)
	}
	d := c.data
	d.PrivateData = append([]byte(nil), c.data.PrivateData...)
	return d, nil
}

// LocalAddr returns the local IP address and port (NdkGetLocalAddress).
func (c *Connector) LocalAddr() netip.AddrPort {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.local
}

// PeerAddr returns the peer's IP address and port (NdkGetPeerAddress).
func (c *Connector) PeerAddr() netip.AddrPort {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.peer
}

// RemoteInfo returns the transport parameters the QP was given at RTR.
func (c *Connector) RemoteInfo() RemoteInfo {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.remote
}

// Close releases the connector (NdkCloseConnector). A connection still
// being set up is rejected, an established one gets a DREQ (sent once, as
// cm.c cm_destroy_id does), pending completions are called with CANCELLED,
// and the endpoint reference is dropped. Close reports true when the close
// is complete; false means a callback of this connector is still running
// (Close was called from one), and done (if not nil) will be called when
// the last one returns.
func (c *Connector) Close(done func()) bool {
	m := c.m
	m.mu.Lock()
	if c.lt.closed {
		m.mu.Unlock()
		return true
	}
	c.lt.closed = true
	c.lt.closing = true
	c.lt.closeDone = done
	switch c.state {
	case stReqSent:
		// cm.c cm_destroy_id: REJ "timeout" with our GUID as ARI.
		ari := guidARI(m.guid)
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREQ, Reason: rocev2.RejTimeout, RejectedInfoLength: 8, ARI: ari})
		c.releaseQP(m)
		c.enterTimeWait(m)
	case stRepWait, stRepRcvd:
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREP, Reason: rocev2.RejConsumerDefined})
		c.qpToError(m)
		c.enterTimeWait(m)
	case stReqRcvd:
		c.sendREJ(m, &rocev2.CMRej{RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREQ, Reason: rocev2.RejConsumerDefined})
		c.leaveBacklog()
		c.enterTimeWait(m)
	case stAccepting, stRepSent:
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREQ, Reason: rocev2.RejConsumerDefined})
		c.qpToError(m)
		c.enterTimeWait(m)
	case stEstablished:
		c.qpToError(m)
		c.sendDREQ(m, false)
		c.enterTimeWait(m)
	case stDreqSent:
		c.enterTimeWait(m)
	case stTimeWait, stDone:
		// The peer disconnected and left the QP alone; closing the
		// connector ends the connection here too.
		if c.wasConnected {
			c.qpToError(m)
		}
	case stIdle:
		c.state = stDone
	}
	c.failPending(m, ndkpi.ErrCancelled)
	c.release(m)
	m.unlockAndRun()

	m.mu.Lock()
	c.lt.closing = false
	complete := c.lt.inflight == 0
	if complete {
		c.lt.closeDone = nil
	}
	m.mu.Unlock()
	return complete
}

// failPending completes every pending request with err (locked).
func (c *Connector) failPending(m *Manager, err error) {
	if f := c.connectDone; f != nil {
		c.connectDone = nil
		m.queueCall(&c.lt, true, func() { f(err) })
	}
	if f := c.acceptDone; f != nil {
		c.acceptDone = nil
		m.queueCall(&c.lt, true, func() { f(err) })
	}
	if f := c.disconnectDone; f != nil {
		c.disconnectDone = nil
		m.queueCall(&c.lt, true, func() { f(err) })
	}
}

// release drops the endpoint reference (locked).
func (c *Connector) release(m *Manager) {
	if c.ep == nil {
		return
	}
	if !c.passive {
		if c.ep.peers[c.peer]--; c.ep.peers[c.peer] <= 0 {
			delete(c.ep.peers, c.peer)
		}
	}
	m.unbind(c.ep)
	c.ep = nil
	if l := c.listener; l != nil {
		l.conns--
		if done := l.lt.finishable(); done != nil {
			m.queueFunc(done)
		}
	}
}

// releaseQP forgets a QP that never left INIT, so that it can be used for
// another connection after a refused or timed-out request.
func (c *Connector) releaseQP(m *Manager) {
	if c.qp != nil && m.byQPN[c.qpn] == c {
		delete(m.byQPN, c.qpn)
	}
}

// qpToError moves the QP to error once, after any transition in progress,
// and asks to hear when it drained.
func (c *Connector) qpToError(m *Manager) {
	if c.qp == nil || c.qpErrored {
		return
	}
	if c.transition {
		c.needQPError = true
		return
	}
	c.qpErrored = true
	qp := c.qp
	m.effects = append(m.effects,
		effect{kind: effQPError, qp: qp},
		effect{kind: effDrained, qp: qp, fn: func() { m.onDrained(c) }})
}

func (c *Connector) flushQPError(m *Manager) {
	if c.needQPError {
		c.needQPError = false
		c.qpToError(m)
	}
}

// ---- retransmission and time-wait timer (locked) ----

func (c *Connector) cancelTimer() {
	c.timerGen++
	c.timerSet = false
	c.m.timers.remove(c)
}

func (c *Connector) onTimeout(m *Manager) {
	switch c.state {
	case stReqSent, stRepSent, stDreqSent:
		if c.retriesLeft > 0 {
			c.retriesLeft--
			m.stats.Retransmits++
			m.sendRaw(c.path, c.out)
			m.arm(c, c.timeout)
			return
		}
	case stTimeWait:
		m.leaveTimeWait(c)
		return
	default:
		return
	}
	// Out of retries: give up, telling the peer as IBTA 12.9.x asks (REJ
	// "timeout" with our GUID as ARI) for REQ and REP.
	timeout := ndkpi.Errorf(ndkpi.StatusIOTimeout, "", nil, "no answer after %d retries of %v", c.maxRetries, c.timeout)
	switch c.state {
	case stReqSent:
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, MessageRejected: rocev2.CMKindREQ,
			Reason: rocev2.RejTimeout, RejectedInfoLength: 8, ARI: guidARI(m.guid)})
		c.abortErr = timeout
		c.releaseQP(m)
		c.enterTimeWait(m)
		c.failConnect(m, timeout)
	case stRepSent:
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREP, Reason: rocev2.RejTimeout, RejectedInfoLength: 8, ARI: guidARI(m.guid)})
		c.abortErr = timeout
		c.qpToError(m)
		c.enterTimeWait(m)
		if f := c.acceptDone; f != nil {
			c.acceptDone = nil
			m.queueCall(&c.lt, true, func() { f(timeout) })
		}
	case stDreqSent:
		c.discAnswered = true
		c.discErr = timeout
		c.enterTimeWait(m)
		c.maybeDisconnected(m)
	}
}

func (m *Manager) handleMRA(mra *rocev2.CMMra) {
	c := m.conns[mra.RemoteCommID]
	if c == nil {
		m.stats.Unmatched++
		return
	}
	// cm.c cm_mra_handler: wait the service timeout plus the path's ACK
	// timeout before resending; the retry count is unchanged.
	wait := imsOf(mra.ServiceTimeout) + imsOf(c.avTimeout)
	switch {
	case c.state == stReqSent && mra.MessageMRAed == rocev2.CMKindREQ && !c.passive:
		m.arm(c, wait)
	case c.state == stRepSent && mra.MessageMRAed == rocev2.CMKindREP && c.remoteID == mra.LocalCommID:
		m.arm(c, wait)
	default:
		m.stats.Duplicates++
	}
}
