package cm

import (
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// handleREQ runs the passive side of a connect request (cm.c
// cm_req_handler and rdma_cm's cma_ib_req_handler), locked.
func (m *Manager) handleREQ(src PathInfo, tid uint64, req *rocev2.CMReq) {
	if c := m.remoteIDs[remoteKey{req.LocalCAGUID, req.LocalCommID}]; c != nil && c.passive {
		m.dupREQ(c)
		return
	}
	if old := m.remoteQPs[remoteKey{req.LocalCAGUID, req.LocalQPN}]; old != nil {
		// A new REQ from a QP we still have a connection with: that
		// connection is stale (cm.c cm_match_req).
		m.rejectStateless(src, tid, req.LocalCommID, 0, rocev2.CMKindREQ, rocev2.RejStaleConn)
		old.abortStale(m)
		return
	}
	reject := func(r rocev2.RejectReason) {
		m.rejectStateless(src, tid, req.LocalCommID, 0, rocev2.CMKindREQ, r)
	}
	ps, port, err := rocev2.ParseServiceID(req.ServiceID)
	if err != nil || ps != rocev2.PortSpaceTCP {
		reject(rocev2.RejInvalidServiceID)
		return
	}
	hdr, herr := rocev2.DecodeCMAHeader(req.PrivateData[:])
	var dst netip.Addr
	if herr == nil {
		dst = hdr.Dst.Unmap()
	}
	l := m.findListener(port, dst)
	switch {
	case l == nil && len(m.listeners[port]) > 0:
		// Linux's CM knows the ServiceID (rdma_cm listens per port) but
		// rdma_cm finds no listener for the address: its handler fails and
		// the CM sends a consumer-defined REJ.
		reject(rocev2.RejConsumerDefined)
		return
	case l == nil || l.paused:
		reject(rocev2.RejInvalidServiceID)
		return
	case herr != nil, hdr.Dst.Unmap() != src.LocalIP.Unmap(), hdr.Src.Unmap() != src.RemoteIP.Unmap():
		// rdma_cm finds no listener for a bad header or addresses that
		// do not match the packet; its handler's error becomes a
		// consumer-defined REJ (cm.c cm_destroy_id in REQ_RCVD).
		reject(rocev2.RejConsumerDefined)
		return
	case req.TransportType != rocev2.CMTransportRC:
		reject(rocev2.RejInvalidTransportType)
		return
	case !req.PathMTU.Valid():
		reject(rocev2.RejInvalidMTU)
		return
	case l.pending >= m.p.ListenBacklog:
		m.stats.BacklogRefusals++
		reject(rocev2.RejConsumerDefined)
		return
	}

	c := &Connector{m: m, passive: true, listener: l, ep: l.ep, state: stReqRcvd, inBacklog: true}
	l.ep.refs++
	l.pending++
	l.conns++
	c.localID = m.allocLocalID()
	c.tid = tid
	c.remoteID, c.remoteGUID, c.remoteQPN = req.LocalCommID, req.LocalCAGUID, req.LocalQPN
	c.path = src
	c.local = netip.AddrPortFrom(hdr.Dst.Unmap(), port)
	c.peer = netip.AddrPortFrom(hdr.Src.Unmap(), hdr.SrcPort)
	c.req = *req
	// cm.c cm_format_paths_from_req and cm_init_av_by_path: the packet
	// lifetime is the REQ's ACK timeout less one, the path timeout that
	// plus one.
	plt := req.Primary.LocalAckTimeout
	if plt > 0 {
		plt--
	}
	c.avTimeout = plt + 1
	// How long the REP waits for the RTU, and how often it is resent,
	// come from the REQ (cm.c), capped by our own: a peer's REQ must not
	// hold a backlog slot and a QP for days (timeout 31 is 2.4 hours a
	// try); with the defaults a half-open connection lasts at most 16
	// tries of 4.3 s.
	c.timeout = imsOf(min(req.LocalCMResponseTimeout, m.p.CMResponseTimeout))
	c.maxRetries = min(req.MaxCMRetries, m.p.MaxCMRetries)
	c.data = ConnectionData{
		InboundReadLimit:  req.InitiatorDepth,
		OutboundReadLimit: req.ResponderResources,
		PrivateData:       append([]byte(nil), req.PrivateData[rocev2.CMAHeaderLen:]...),
	}
	c.haveData = true
	m.register(c)
	m.registerRemote(c)
	m.queueFunc(func() { m.deliverConnect(l, c) })
}

// deliverConnect calls the listener's connect callback, or refuses the
// request if the listener closed since it arrived.
func (m *Manager) deliverConnect(l *Listener, c *Connector) {
	m.mu.Lock()
	if l.lt.closed {
		if c.state == stReqRcvd {
			c.sendREJ(m, &rocev2.CMRej{RemoteCommID: c.remoteID, MessageRejected: rocev2.CMKindREQ, Reason: rocev2.RejInvalidServiceID})
			c.leaveBacklog()
			c.enterTimeWait(m)
		}
		c.lt.closed = true
		c.release(m)
		m.unlockAndRun()
		return
	}
	l.lt.inflight++
	m.mu.Unlock()
	l.onConnect(c)
	m.mu.Lock()
	l.lt.inflight--
	done := l.lt.finishable()
	m.mu.Unlock()
	if done != nil {
		done()
	}
}

// dupREQ answers a repeated REQ from the connection's state instead of
// starting another connection (cm.c cm_dup_req_handler; IBTA 12.9.5).
func (m *Manager) dupREQ(c *Connector) {
	m.stats.Duplicates++
	switch c.state {
	case stReqRcvd:
		// The consumer has not decided yet: ask for patience, as rdma_cm's
		// delayed MRA does.
		m.send(c.path, c.tid, &rocev2.CMMra{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageMRAed: rocev2.CMKindREQ, ServiceTimeout: m.p.MRAServiceTimeout})
	case stRepSent:
		m.sendRaw(c.path, c.out)
	case stTimeWait, stDone:
		if c.rejOut != nil {
			m.sendRaw(c.path, c.rejOut)
			return
		}
		m.send(c.path, c.tid, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREQ, Reason: rocev2.RejStaleConn})
	}
}

// Accept accepts a connect request (NdkAccept): the QP moves to RTR and RTS
// and then the REP goes out, as rdma_cm's cma_accept_ib does. done is
// called once: nil when the RTU (or the first packet on the QP, see
// Manager.CommEstablished) arrived, IO_TIMEOUT when the REP went unanswered
// through every retry, CONNECTION_ABORTED when the peer rejected. An error
// returned here means done will not be called.
func (c *Connector) Accept(qp QP, p AcceptParams, onDisconnect func(), done func(error)) error {
	return c.AcceptEx(qp, p, withoutReason(onDisconnect), done)
}

// AcceptEx is Accept with a disconnect callback that learns why
// (NdkAcceptEx, NDKPI 2.1): a Reason* value.
func (c *Connector) AcceptEx(qp QP, p AcceptParams, onDisconnect func(reason uint32), done func(error)) error {
	const op = "accept"
	if qp == nil || done == nil {
		return ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "QP and completion are required")
	}
	if len(p.PrivateData) > MaxCalleeData {
		return ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "%d bytes of private data exceed MaxCalleeData %d", len(p.PrivateData), MaxCalleeData)
	}
	if err := p.Retry.check(op); err != nil {
		return err
	}
	ri, err := c.beginAccept(qp, p)
	if err != nil {
		return err
	}
	err = qp.ToRTR(ri)
	if err == nil {
		err = qp.ToRTS()
	}
	return c.finishAccept(qp, &ri, err, p, onDisconnect, done)
}

// beginAccept takes the connect request for qp and returns the parameters
// the QP gets at RTR. The QP moves after the lock is released, with
// c.transition set meanwhile.
func (c *Connector) beginAccept(qp QP, p AcceptParams) (RemoteInfo, error) {
	const op = "accept"
	m := c.m
	m.mu.Lock()
	defer m.unlockAndRun()
	if c.state != stReqRcvd {
		if err := c.abortErr; err != nil {
			return RemoteInfo{}, err
		}
		return RemoteInfo{}, ndkpi.Errorf(ndkpi.StatusConnectionInvalid, op, nil, "no connect request to accept (%v)", c.state)
	}
	if other := m.byQPN[qp.QPN()]; other != nil {
		return RemoteInfo{}, ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "QP %d already belongs to a connection", qp.QPN())
	}
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
		TrafficClass:      req.Primary.TrafficClass,
	}
	c.data = ConnectionData{InboundReadLimit: in, OutboundReadLimit: out, PrivateData: c.data.PrivateData}
	c.state = stAccepting
	c.transition = true
	return c.remote, nil
}

// finishAccept sends the REP once the QP reached RTS, or ends the
// connection when qpErr says it did not.
func (c *Connector) finishAccept(qp QP, ri *RemoteInfo, qpErr error, p AcceptParams, onDisconnect func(uint32), done func(error)) error {
	const op = "accept"
	m := c.m
	m.mu.Lock()
	defer m.unlockAndRun()
	c.transition = false
	if c.state != stAccepting {
		// Rejected or closed while the QP moved; that path already
		// answered the peer.
		aerr := c.abortErr
		c.flushQPError(m)
		if aerr == nil {
			aerr = ndkpi.Errorf(ndkpi.StatusConnectionAborted, op, nil, "connection ended during accept")
		}
		return aerr
	}
	if qpErr != nil {
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREQ, Reason: rocev2.RejConsumerDefined})
		c.qpToError(m)
		c.enterTimeWait(m)
		return ndkpi.Errorf(ndkpi.StatusConnectionAborted, op, qpErr, "QP %d did not reach RTS", c.qpn)
	}
	c.out = m.send(c.path, c.tid, m.newREP(c, qp.StartingPSN(), ri, p))
	c.state = stRepSent
	c.acceptDone = done
	c.onDisconnect = onDisconnect
	c.retriesLeft = c.maxRetries
	m.arm(c, c.timeout)
	return nil
}

// newREP builds the REP that accepts c's REQ with the read limits of ri
// (cm.c cm_format_rep, cma.c cma_accept_ib).
func (m *Manager) newREP(c *Connector, psn rocev2.PSN, ri *RemoteInfo, p AcceptParams) *rocev2.CMRep {
	rep := &rocev2.CMRep{
		LocalCommID:        c.localID,
		RemoteCommID:       c.remoteID,
		LocalQPN:           c.qpn & 0xFFFFFF,
		StartingPSN:        psn & rocev2.PSNMask,
		ResponderResources: ri.InboundReadLimit,
		InitiatorDepth:     ri.OutboundReadLimit,
		TargetAckDelay:     m.p.AckDelay,
		RNRRetryCount:      m.p.RNRRetry,
		LocalCAGUID:        m.guid,
	}
	if p.Retry != nil {
		rep.RNRRetryCount = p.Retry.RNR
	}
	copy(rep.PrivateData[:], p.PrivateData)
	return rep
}

func (c *Connector) leaveBacklog() {
	if c.inBacklog {
		c.inBacklog = false
		c.listener.pending--
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

// establish moves a passive connection to established on RTU or first data.
func (c *Connector) establish(m *Manager) {
	c.cancelTimer()
	c.leaveBacklog()
	c.state = stEstablished
	c.wasConnected = true
	if f := c.acceptDone; f != nil {
		c.acceptDone = nil
		m.queueCall(&c.lt, true, func() { f(nil) })
	}
}
