package cm

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ntstatus"
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
}

// AcceptParams are the inputs of Accept.
type AcceptParams struct {
	InboundReadLimit, OutboundReadLimit uint8
	// PrivateData goes into the REP: at most MaxCalleeData.
	PrivateData []byte
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

	// QP transitions run outside the lock; a ToError wanted meanwhile waits.
	transition  bool
	needQPError bool
	qpErrored   bool

	connectDone    func(error)
	acceptDone     func(error)
	disconnectDone func(error)
	onDisconnect   func()
	eventFired     bool
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

// Connect sends a connection request from src to dst over path
// (NdkConnect). src's address may be left unspecified (path.LocalIP is
// used) and its port 0 (an ephemeral port is picked). done is called once,
// when the peer accepted (nil: call ConnectionData, then CompleteConnect or
// Reject), rejected (CONNECTION_REFUSED, with a *RejectError cause), or
// never answered (IO_TIMEOUT). An error returned here means done will not
// be called.
func (c *Connector) Connect(qp QP, path PathInfo, src, dst netip.AddrPort, p ConnectParams, done func(error)) error {
	return c.connect(qp, path, src, nil, dst, p, done)
}

// ConnectWithSharedEndpoint is Connect from a shared endpoint's address
// (NdkConnectWithSharedEndpoint): several connections share the local
// address and port; only the full 4-tuple must be unique.
func (c *Connector) ConnectWithSharedEndpoint(qp QP, path PathInfo, se *SharedEndpoint, dst netip.AddrPort, p ConnectParams, done func(error)) error {
	if se == nil {
		return errorf(ntstatus.InvalidParameter, "connect", nil, "nil shared endpoint")
	}
	return c.connect(qp, path, netip.AddrPort{}, se, dst, p, done)
}

func (c *Connector) connect(qp QP, path PathInfo, src netip.AddrPort, se *SharedEndpoint, dst netip.AddrPort, p ConnectParams, done func(error)) error {
	const op = "connect"
	m := c.m
	if qp == nil || done == nil {
		return errorf(ntstatus.InvalidParameter, op, nil, "QP and completion are required")
	}
	if len(p.PrivateData) > MaxCallerData {
		return errorf(ntstatus.InvalidParameter, op, nil, "%d bytes of private data exceed MaxCallerData %d", len(p.PrivateData), MaxCallerData)
	}
	mtu, ok := path.pathMTU()
	if !ok {
		return errorf(ntstatus.InvalidParameter, op, nil, "interface MTU %d is below the smallest RoCE path MTU", path.MTU)
	}
	dst = unmap(dst)
	if !usableAddr(dst.Addr()) || dst.Port() == 0 {
		return errorf(ntstatus.InvalidAddress, op, nil, "destination %v is not a unicast address and port", dst)
	}
	if path.RemoteIP.Unmap() != dst.Addr() {
		return errorf(ntstatus.InvalidParameter, op, nil, "path leads to %v, not to %v", path.RemoteIP, dst.Addr())
	}

	m.mu.Lock()
	if m.closed || c.lt.closed {
		m.mu.Unlock()
		return errorf(ntstatus.InvalidHandle, op, nil, "connector or manager closed")
	}
	if c.state != stIdle || c.passive {
		m.mu.Unlock()
		return errorf(ntstatus.ConnectionInvalid, op, nil, "connector already used (%v)", c.state)
	}
	if other := m.byQPN[qp.QPN()]; other != nil {
		m.mu.Unlock()
		return errorf(ntstatus.InvalidParameter, op, nil, "QP %d already belongs to a connection", qp.QPN())
	}

	// Local address and endpoint reference (NDKPI.md §8 Endpoints).
	var ep *endpoint
	if se != nil {
		if se.closed {
			m.mu.Unlock()
			return errorf(ntstatus.InvalidHandle, op, nil, "shared endpoint closed")
		}
		src = se.addr
		if src.Addr().Is4() != dst.Addr().Is4() || src.Addr() != path.LocalIP.Unmap() {
			m.mu.Unlock()
			return errorf(ntstatus.InvalidAddress, op, nil, "shared endpoint %v cannot reach %v over path from %v", src, dst, path.LocalIP)
		}
		if se.ep.peers[dst] > 0 {
			m.mu.Unlock()
			return errorf(ntstatus.AddressAlreadyExists, op, nil, "connection %v -> %v exists", src, dst)
		}
		ep = se.ep
		ep.refs++
	} else {
		src = unmap(src)
		if !src.Addr().IsValid() || src.Addr().IsUnspecified() {
			src = netip.AddrPortFrom(path.LocalIP.Unmap(), src.Port())
		}
		if src.Addr() != path.LocalIP.Unmap() || src.Addr().Is4() != dst.Addr().Is4() {
			m.mu.Unlock()
			return errorf(ntstatus.InvalidAddress, op, nil, "source %v does not match the path's local address %v or the destination family", src.Addr(), path.LocalIP)
		}
		if err := m.checkLocal(src.Addr(), op); err != nil {
			m.mu.Unlock()
			return err
		}
		var err error
		ep, err = m.bind(src, epConnector, dst, op)
		if err != nil {
			m.mu.Unlock()
			return err
		}
		src = ep.addr
	}
	ep.peers[dst]++

	c.ep, c.shared = ep, se
	c.local, c.peer = src, dst
	c.path = path
	c.qp, c.qpn = qp, qp.QPN()
	c.localID = m.allocLocalID()
	c.tid = m.tidFor(c.localID)
	c.connectDone = done
	c.avTimeout = m.p.PacketLifeTime + 1 // cm.c cm_init_av_by_path
	c.timeout = 2*imsOf(m.p.PacketLifeTime) + imsOf(m.p.CMResponseTimeout)
	c.maxRetries = m.p.MaxCMRetries
	c.retriesLeft = c.maxRetries
	m.register(c)
	m.byQPN[c.qpn] = c

	c.req = rocev2.CMReq{
		LocalCommID:             c.localID,
		ServiceID:               rocev2.ServiceID(rocev2.PortSpaceTCP, dst.Port()),
		LocalCAGUID:             m.guid,
		LocalQPN:                c.qpn & 0xFFFFFF,
		ResponderResources:      p.InboundReadLimit,
		InitiatorDepth:          p.OutboundReadLimit,
		RemoteCMResponseTimeout: m.p.CMResponseTimeout,
		TransportType:           rocev2.CMTransportRC,
		StartingPSN:             qp.StartingPSN() & rocev2.PSNMask,
		LocalCMResponseTimeout:  m.p.CMResponseTimeout,
		RetryCount:              m.p.RetryCount,
		PKey:                    path.pkey(),
		PathMTU:                 mtu,
		RNRRetryCount:           m.p.RNRRetry,
		MaxCMRetries:            m.p.MaxCMRetries,
		Primary: rocev2.CMPath{
			// Routed RoCE: permissive LIDs, hop limit 64 (cm.c cm_format_req
			// for hop_limit > 1; ROCEV2.md 3.3).
			LocalLID:        0xFFFF,
			RemoteLID:       0xFFFF,
			LocalGID:        rocev2.GIDFromAddr(src.Addr()),
			RemoteGID:       rocev2.GIDFromAddr(dst.Addr()),
			FlowLabel:       rocev2.CMAFlowLabel(src.Port(), dst.Port()),
			HopLimit:        rocev2.DefaultTTL,
			LocalAckTimeout: ackTimeout(m.p.AckDelay, m.p.PacketLifeTime),
		},
	}
	hdr := rocev2.CMAHeader{SrcPort: src.Port(), Src: src.Addr(), Dst: dst.Addr()}
	if err := hdr.Encode(c.req.PrivateData[:]); err != nil {
		c.release(m)
		m.unregister(c)
		m.mu.Unlock()
		return errorf(ntstatus.InvalidAddress, op, err, "rdma_cm header for %v -> %v", src, dst)
	}
	copy(c.req.PrivateData[rocev2.CMAHeaderLen:], p.PrivateData)
	c.out = m.send(c.path, c.tid, &c.req)
	c.state = stReqSent
	m.arm(c, c.timeout)
	m.unlockAndRun()
	return nil
}

// ConnectionData returns the read limits and the peer's private data
// (NdkGetConnectionData). It is available once a connect request arrived
// (passive), once Connect completed (active), and after a rejection, whose
// REJ private data it then holds.
func (c *Connector) ConnectionData() (ConnectionData, error) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if !c.haveData {
		return ConnectionData{}, errorf(ntstatus.ConnectionInvalid, "get connection data", nil, "no connection data in state %v", c.state)
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

// CompleteConnect finishes an active connection after Connect succeeded:
// it sends RTU (NdkCompleteConnect). onDisconnect, if not nil, is called
// once when the peer disconnects or the connection aborts. It fails with
// CONNECTION_INVALID when Connect has not completed, CONNECTION_ABORTED when
// the peer gave up meanwhile, and IO_TIMEOUT when it did so because its
// REP went unanswered too long.
func (c *Connector) CompleteConnect(onDisconnect func()) error {
	const op = "complete connect"
	m := c.m
	m.mu.Lock()
	if c.state != stRepRcvd {
		err := c.abortErr
		m.mu.Unlock()
		if err != nil {
			return err
		}
		return errorf(ntstatus.ConnectionInvalid, op, nil, "not connecting (%v)", c.state)
	}
	rtu := &rocev2.CMRtu{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	m.send(c.path, c.tid, rtu)
	c.state = stEstablished
	c.wasConnected = true
	c.onDisconnect = onDisconnect
	m.unlockAndRun()
	return nil
}

// Accept accepts a connect request (NdkAccept): the QP moves to RTR and RTS
// and then the REP goes out, as rdma_cm's cma_accept_ib does. done is
// called once: nil when the RTU (or the first packet on the QP, see
// Manager.CommEstablished) arrived, IO_TIMEOUT when the REP went unanswered
// through every retry, CONNECTION_ABORTED when the peer rejected. An error
// returned here means done will not be called.
func (c *Connector) Accept(qp QP, p AcceptParams, onDisconnect func(), done func(error)) error {
	const op = "accept"
	m := c.m
	if qp == nil || done == nil {
		return errorf(ntstatus.InvalidParameter, op, nil, "QP and completion are required")
	}
	if len(p.PrivateData) > MaxCalleeData {
		return errorf(ntstatus.InvalidParameter, op, nil, "%d bytes of private data exceed MaxCalleeData %d", len(p.PrivateData), MaxCalleeData)
	}
	m.mu.Lock()
	if c.state != stReqRcvd {
		err := c.abortErr
		m.mu.Unlock()
		if err != nil {
			return err
		}
		return errorf(ntstatus.ConnectionInvalid, op, nil, "no connect request to accept (%v)", c.state)
	}
	if other := m.byQPN[qp.QPN()]; other != nil {
		m.mu.Unlock()
		return errorf(ntstatus.InvalidParameter, op, nil, "QP %d already belongs to a connection", qp.QPN())
	}
	c.leaveBacklog()
	req := &c.req
	in := min(p.InboundReadLimit, req.InitiatorDepth)
	out := min(p.OutboundReadLimit, req.ResponderResources)
	mtu := req.PathMTU
	if own, ok := c.path.pathMTU(); ok && own < mtu {
		mtu = own
	}
	c.qp, c.qpn = qp, qp.QPN()
	m.byQPN[c.qpn] = c
	c.remote = RemoteInfo{
		Path:              c.path,
		QPN:               c.remoteQPN,
		PSN:               req.StartingPSN,
		PathMTU:           mtu,
		InboundReadLimit:  in,
		OutboundReadLimit: out,
		RetryCount:        req.RetryCount,
		RNRRetry:          req.RNRRetryCount,
		AckTimeout:        c.avTimeout,
		FlowLabel:         req.Primary.FlowLabel,
		UDPSourcePort:     rocev2.UDPSourcePort(req.Primary.FlowLabel, c.qpn, c.remoteQPN),
	}
	c.data = ConnectionData{InboundReadLimit: in, OutboundReadLimit: out, PrivateData: c.data.PrivateData}
	c.state = stAccepting
	c.transition = true
	ri := c.remote
	m.unlockAndRun()

	err := qp.ToRTR(ri)
	if err == nil {
		err = qp.ToRTS()
	}

	m.mu.Lock()
	c.transition = false
	if c.state != stAccepting {
		// Rejected or closed while the QP moved; that path already
		// answered the peer.
		aerr := c.abortErr
		c.flushQPError(m)
		m.unlockAndRun()
		if aerr == nil {
			aerr = errorf(ntstatus.ConnectionAborted, op, nil, "connection ended during accept")
		}
		return aerr
	}
	if err != nil {
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREQ, Reason: rocev2.RejConsumerDefined})
		c.qpToError(m)
		c.enterTimeWait(m)
		m.unlockAndRun()
		return errorf(ntstatus.ConnectionAborted, op, err, "QP %d did not reach RTS", c.qpn)
	}
	rep := &rocev2.CMRep{
		LocalCommID:        c.localID,
		RemoteCommID:       c.remoteID,
		LocalQPN:           c.qpn & 0xFFFFFF,
		StartingPSN:        qp.StartingPSN() & rocev2.PSNMask,
		ResponderResources: in,
		InitiatorDepth:     out,
		TargetAckDelay:     m.p.AckDelay,
		RNRRetryCount:      m.p.RNRRetry,
		LocalCAGUID:        m.guid,
	}
	copy(rep.PrivateData[:], p.PrivateData)
	c.out = m.send(c.path, c.tid, rep)
	c.state = stRepSent
	c.acceptDone = done
	c.onDisconnect = onDisconnect
	c.retriesLeft = c.maxRetries
	m.arm(c, c.timeout)
	m.unlockAndRun()
	return nil
}

// Reject refuses a connect request, or a connection whose Connect completed
// but that CompleteConnect has not finished (NdkReject). privateData (at
// most MaxRejectData bytes) goes into the REJ, reason 28 (consumer
// defined).
func (c *Connector) Reject(privateData []byte) error {
	const op = "reject"
	m := c.m
	if len(privateData) > MaxRejectData {
		return errorf(ntstatus.InvalidParameter, op, nil, "%d bytes of private data exceed %d", len(privateData), MaxRejectData)
	}
	m.mu.Lock()
	rej := &rocev2.CMRej{RemoteCommID: c.remoteID, Reason: rocev2.RejConsumerDefined}
	copy(rej.PrivateData[:], privateData)
	switch c.state {
	case stReqRcvd:
		// cm.c cm_format_rej: in REQ_RCVD the local comm ID is 0.
		rej.MessageRejected = rocev2.CMKindREQ
		c.leaveBacklog()
	case stRepRcvd:
		rej.LocalCommID = c.localID
		rej.MessageRejected = rocev2.CMKindREP
		c.qpToError(m)
	default:
		err := c.abortErr
		m.mu.Unlock()
		if err == nil {
			err = errorf(ntstatus.ConnectionInvalid, op, nil, "nothing to reject (%v)", c.state)
		}
		return err
	}
	c.sendREJ(m, rej)
	c.enterTimeWait(m)
	c.abortErr = errorf(ntstatus.ConnectionAborted, op, nil, "connection was rejected locally")
	m.unlockAndRun()
	return nil
}

// Disconnect ends an established connection gracefully (NdkDisconnect):
// the QP moves to error (flushing its work requests), DREQ goes out and is
// resent until DREP arrives. done is called once, when the peer answered
// (nil) or never did (IO_TIMEOUT), and in both cases only after the QP's
// DMA has drained. Disconnecting a connection the peer already ended
// succeeds once the QP drained.
func (c *Connector) Disconnect(done func(error)) error {
	const op = "disconnect"
	m := c.m
	if done == nil {
		return errorf(ntstatus.InvalidParameter, op, nil, "completion is required")
	}
	m.mu.Lock()
	if c.disconnectDone != nil || c.userDisconnect {
		m.mu.Unlock()
		return errorf(ntstatus.ConnectionInvalid, op, nil, "already disconnecting")
	}
	switch {
	case c.state == stEstablished:
		c.userDisconnect = true
		c.disconnectDone = done
		c.qpToError(m)
		c.sendDREQ(m, true)
	case c.wasConnected && (c.state == stTimeWait || c.state == stDone):
		c.userDisconnect = true
		c.disconnectDone = done
		c.discAnswered = true
		c.qpToError(m)
		c.maybeDisconnected(m)
	default:
		m.mu.Unlock()
		return errorf(ntstatus.ConnectionInvalid, op, nil, "not connected (%v)", c.state)
	}
	m.unlockAndRun()
	return nil
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
	c.failPending(m, ErrCancelled)
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

func (c *Connector) leaveBacklog() {
	if c.inBacklog {
		c.inBacklog = false
		c.listener.pending--
	}
}

// ---- state transitions (all with the Manager's lock held) ----

// sendREJ sends a REJ for this connection and remembers it.
func (c *Connector) sendREJ(m *Manager, rej *rocev2.CMRej) {
	c.rejOut = m.send(c.path, c.tid, rej)
}

// releaseQP forgets a QP that never left INIT, so that it can be used for
// another connection after a refused or timed-out request.
func (c *Connector) releaseQP(m *Manager) {
	if c.qp != nil && m.byQPN[c.qpn] == c {
		delete(m.byQPN, c.qpn)
	}
}

func (c *Connector) cancelTimer() {
	c.timerGen++
	c.timerSet = false
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

func (m *Manager) onDrained(c *Connector) {
	m.mu.Lock()
	c.drained = true
	c.maybeDisconnected(m)
	m.unlockAndRun()
}

// maybeDisconnected completes Disconnect when the peer answered and the QP
// drained.
func (c *Connector) maybeDisconnected(m *Manager) {
	if c.disconnectDone == nil || !c.discAnswered || !(c.drained || c.qp == nil) {
		return
	}
	f, err := c.disconnectDone, c.discErr
	c.disconnectDone = nil
	m.queueCall(&c.lt, true, func() { f(err) })
}

func (c *Connector) sendDREQ(m *Manager, retry bool) {
	dreq := &rocev2.CMDreq{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}
	c.out = m.send(c.path, m.tidFor(c.localID), dreq)
	c.state = stDreqSent
	if retry {
		c.retriesLeft = c.maxRetries
		m.arm(c, c.timeout)
	}
}

// enterTimeWait ends the connection but keeps its IDs for a while, so that
// late duplicates are answered and not mistaken for new requests (cm.c
// cm_enter_timewait).
func (c *Connector) enterTimeWait(m *Manager) {
	if c.state == stTimeWait || c.state == stDone {
		return
	}
	c.state = stTimeWait
	m.arm(c, m.timeWait(c))
}

// establish moves a passive connection to established on RTU or first data.
func (c *Connector) establish(m *Manager) {
	c.cancelTimer()
	c.state = stEstablished
	c.wasConnected = true
	if f := c.acceptDone; f != nil {
		c.acceptDone = nil
		m.queueCall(&c.lt, true, func() { f(nil) })
	}
}

// disconnectEvent calls the consumer's disconnect callback, once, unless
// the consumer disconnected first (NDKPI.md §8 Disconnect).
func (c *Connector) disconnectEvent(m *Manager) {
	if c.eventFired || c.userDisconnect || c.onDisconnect == nil {
		return
	}
	c.eventFired = true
	m.queueCall(&c.lt, false, c.onDisconnect)
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
		c.state = stDone
		m.unregister(c)
		return
	default:
		return
	}
	// Out of retries: give up, telling the peer as IBTA 12.9.x asks (REJ
	// "timeout" with our GUID as ARI) for REQ and REP.
	timeout := errorf(ntstatus.IOTimeout, "", nil, "no answer after %d retries of %v", c.maxRetries, c.timeout)
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

func (c *Connector) failConnect(m *Manager, err error) {
	if f := c.connectDone; f != nil {
		c.connectDone = nil
		m.queueCall(&c.lt, true, func() { f(err) })
	}
}

// ---- inbound messages (locked) ----

func (m *Manager) handleREP(src PathInfo, tid uint64, rep *rocev2.CMRep) {
	c := m.conns[rep.RemoteCommID]
	if c == nil || c.passive {
		m.stats.Unmatched++
		return
	}
	switch c.state {
	case stReqSent:
	case stEstablished, stDreqSent:
		if c.remoteID == rep.LocalCommID {
			// Our RTU was lost: say it again (cm.c cm_dup_rep_handler).
			m.stats.Duplicates++
			m.send(c.path, c.tid, &rocev2.CMRtu{LocalCommID: c.localID, RemoteCommID: c.remoteID})
		}
		return
	default:
		m.stats.Duplicates++
		return
	}
	if old := m.remoteQPs[remoteKey{rep.LocalCAGUID, rep.LocalQPN}]; old != nil && old != c {
		// The peer reuses a QP we still consider connected: refuse, and
		// end the old connection (cm.c cm_rep_handler).
		m.rejectStateless(src, tid, rep.LocalCommID, c.localID, rocev2.CMKindREP, rocev2.RejStaleConn)
		old.abortStale(m)
		return
	}
	c.cancelTimer()
	c.remoteID = rep.LocalCommID
	c.remoteGUID = rep.LocalCAGUID
	c.remoteQPN = rep.LocalQPN
	m.registerRemote(c)
	in := min(c.req.ResponderResources, rep.InitiatorDepth)
	out := min(c.req.InitiatorDepth, rep.ResponderResources)
	// cm.c cm_rep_handler: av.timeout = cm_ack_timeout(target_ack_delay,
	// av.timeout - 1).
	c.avTimeout = ackTimeout(rep.TargetAckDelay, c.avTimeout-1)
	c.remote = RemoteInfo{
		Path:              c.path,
		QPN:               rep.LocalQPN,
		PSN:               rep.StartingPSN,
		PathMTU:           c.req.PathMTU,
		InboundReadLimit:  in,
		OutboundReadLimit: out,
		RetryCount:        c.req.RetryCount,
		RNRRetry:          rep.RNRRetryCount,
		AckTimeout:        c.avTimeout,
		FlowLabel:         c.req.Primary.FlowLabel,
		UDPSourcePort:     rocev2.UDPSourcePort(c.req.Primary.FlowLabel, c.qpn, rep.LocalQPN),
	}
	c.data = ConnectionData{InboundReadLimit: in, OutboundReadLimit: out, PrivateData: append([]byte(nil), rep.PrivateData[:]...)}
	c.haveData = true
	c.state = stRepWait
	c.transition = true
	qp, ri := c.qp, c.remote
	m.queueFunc(func() { m.finishREP(c, qp, ri) })
}

// finishREP moves the active QP to RTR and RTS outside the lock, then
// completes Connect (rdma_cm cma_rep_recv).
func (m *Manager) finishREP(c *Connector, qp QP, ri RemoteInfo) {
	err := qp.ToRTR(ri)
	if err == nil {
		err = qp.ToRTS()
	}
	m.mu.Lock()
	c.transition = false
	switch {
	case c.state != stRepWait:
		c.flushQPError(m)
	case err != nil:
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREP, Reason: rocev2.RejConsumerDefined})
		c.qpToError(m)
		c.enterTimeWait(m)
		c.failConnect(m, errorf(ntstatus.ConnectionAborted, "connect", err, "QP %d did not reach RTS", c.qpn))
	default:
		c.state = stRepRcvd
		if f := c.connectDone; f != nil {
			c.connectDone = nil
			m.queueCall(&c.lt, true, func() { f(nil) })
		}
	}
	m.unlockAndRun()
}

// abortStale ends a connection the peer has evidently forgotten.
func (c *Connector) abortStale(m *Manager) {
	if c.state == stEstablished {
		c.qpToError(m)
		c.sendDREQ(m, true)
		c.disconnectEvent(m)
	}
}

func (m *Manager) handleRTU(rtu *rocev2.CMRtu) {
	c := m.conns[rtu.RemoteCommID]
	if c == nil || !c.passive || c.remoteID != rtu.LocalCommID {
		m.stats.Unmatched++
		return
	}
	if c.state != stRepSent {
		m.stats.Duplicates++
		return
	}
	c.establish(m)
}

func (m *Manager) findRejected(rej *rocev2.CMRej) *Connector {
	if rej.Reason == rocev2.RejTimeout && rej.RejectedInfoLength >= 8 {
		guid := binary.BigEndian.Uint64(rej.ARI[:8])
		if c := m.remoteIDs[remoteKey{guid, rej.LocalCommID}]; c != nil {
			return c
		}
	}
	c := m.conns[rej.RemoteCommID]
	if c == nil {
		return nil
	}
	if rej.MessageRejected != rocev2.CMKindREQ && c.remoteID != rej.LocalCommID {
		return nil
	}
	return c
}

func (m *Manager) handleREJ(rej *rocev2.CMRej) {
	c := m.findRejected(rej)
	if c == nil {
		m.stats.Unmatched++
		return
	}
	re := &RejectError{Reason: rej.Reason, PrivateData: append([]byte(nil), rej.PrivateData[:]...)}
	aborted := errorf(ntstatus.ConnectionAborted, "", re, "peer rejected")
	if rej.Reason == rocev2.RejTimeout {
		aborted = errorf(ntstatus.IOTimeout, "", re, "peer timed out waiting for us")
	}
	switch c.state {
	case stReqSent:
		c.cancelTimer()
		c.data = ConnectionData{PrivateData: re.PrivateData}
		c.haveData = true
		refused := errorf(ntstatus.ConnectionRefused, "connect", re, "%v refused the connection", c.peer)
		c.abortErr = refused
		c.releaseQP(m)
		c.enterTimeWait(m)
		c.failConnect(m, refused)
	case stRepWait:
		c.abortErr = aborted
		c.qpToError(m)
		c.enterTimeWait(m)
		c.failConnect(m, aborted)
	case stRepRcvd:
		c.abortErr = aborted
		c.qpToError(m)
		c.enterTimeWait(m)
	case stReqRcvd, stAccepting:
		// The active side gave up before we answered: an abort, whatever
		// its reason.
		c.abortErr = errorf(ntstatus.ConnectionAborted, "", re, "peer abandoned the request")
		c.leaveBacklog()
		c.enterTimeWait(m)
	case stRepSent:
		c.abortErr = aborted
		c.qpToError(m)
		c.enterTimeWait(m)
		if f := c.acceptDone; f != nil {
			c.acceptDone = nil
			m.queueCall(&c.lt, true, func() { f(aborted) })
		}
	case stEstablished:
		c.qpToError(m)
		c.enterTimeWait(m)
		c.disconnectEvent(m)
	case stDreqSent:
		c.discAnswered = true
		c.enterTimeWait(m)
		c.maybeDisconnected(m)
	default:
		m.stats.Duplicates++
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

func (m *Manager) handleDREQ(src PathInfo, tid uint64, dreq *rocev2.CMDreq) {
	c := m.conns[dreq.RemoteCommID]
	if c == nil || c.remoteID != dreq.LocalCommID || (c.qp != nil && c.qpn&0xFFFFFF != dreq.RemoteQPN) {
		// Unknown or long gone: answer anyway so the peer can finish
		// (cm.c cm_issue_drep).
		m.stats.Unmatched++
		m.send(src, tid, &rocev2.CMDrep{LocalCommID: dreq.RemoteCommID, RemoteCommID: dreq.LocalCommID})
		return
	}
	drep := &rocev2.CMDrep{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	switch c.state {
	case stRepSent:
		// The peer's DREQ implies its RTU went out.
		c.establish(m)
		fallthrough
	case stEstablished:
		// The QP is left as it is: NDKPI's provider does not flush
		// outstanding requests because of a disconnect it indicates
		// (NDK_FN_DISCONNECT_EVENT_CALLBACK). The consumer's Disconnect
		// or Flush does.
		m.send(c.path, tid, drep)
		c.enterTimeWait(m)
		c.disconnectEvent(m)
	case stDreqSent:
		// Both sides disconnected at once: the peer's DREQ answers ours.
		m.send(c.path, tid, drep)
		c.discAnswered = true
		c.enterTimeWait(m)
		c.maybeDisconnected(m)
	case stTimeWait, stDone:
		m.stats.Duplicates++
		m.send(c.path, tid, drep)
	default:
		m.stats.Duplicates++
	}
}

func (m *Manager) handleDREP(drep *rocev2.CMDrep) {
	c := m.conns[drep.RemoteCommID]
	if c == nil || c.remoteID != drep.LocalCommID {
		m.stats.Unmatched++
		return
	}
	if c.state != stDreqSent {
		m.stats.Duplicates++
		return
	}
	c.discAnswered = true
	c.enterTimeWait(m)
	c.maybeDisconnected(m)
}
