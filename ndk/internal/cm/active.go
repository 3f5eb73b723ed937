package cm

import (
	"net/netip"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

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
		return ndkpi.Errorf(ndkpi.StatusInvalidParameter, "connect", nil, "nil shared endpoint")
	}
	return c.connect(qp, path, netip.AddrPort{}, se, dst, p, done)
}

// connect checks its arguments without the lock, then starts the
// connection under it.
func (c *Connector) connect(qp QP, path PathInfo, src netip.AddrPort, se *SharedEndpoint, dst netip.AddrPort, p ConnectParams, done func(error)) error {
	dst, mtu, err := checkConnect(qp, path, dst, p, done)
	if err != nil {
		return err
	}
	return c.startConnect(qp, path, src, se, dst, mtu, p, done)
}

// checkConnect validates what needs no Manager state and returns the
// destination unmapped and the path MTU.
func checkConnect(qp QP, path PathInfo, dst netip.AddrPort, p ConnectParams, done func(error)) (netip.AddrPort, rocev2.MTU, error) {
	const op = "connect"
	if qp == nil || done == nil {
		return dst, 0, ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "QP and completion are required")
	}
	if len(p.PrivateData) > MaxCallerData {
		return dst, 0, ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "%d bytes of private data exceed MaxCallerData %d", len(p.PrivateData), MaxCallerData)
	}
	if err := p.Retry.check(op); err != nil {
		return dst, 0, err
	}
	mtu, ok := path.pathMTU()
	if !ok {
		return dst, 0, ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "interface MTU %d is below the smallest RoCE path MTU", path.MTU)
	}
	dst = unmap(dst)
	if !usableAddr(dst.Addr()) || dst.Port() == 0 {
		return dst, 0, ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "destination %v is not a unicast address and port", dst)
	}
	if path.RemoteIP.Unmap() != dst.Addr() {
		return dst, 0, ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "path leads to %v, not to %v", path.RemoteIP, dst.Addr())
	}
	return dst, mtu, nil
}

// startConnect takes the local endpoint, registers the connection and
// sends its REQ.
func (c *Connector) startConnect(qp QP, path PathInfo, src netip.AddrPort, se *SharedEndpoint, dst netip.AddrPort, mtu rocev2.MTU, p ConnectParams, done func(error)) error {
	const op = "connect"
	m := c.m
	m.mu.Lock()
	defer m.unlockAndRun()
	switch {
	case m.closed || c.lt.closed:
		return ndkpi.Errorf(ndkpi.StatusInvalidHandle, op, nil, "connector or manager closed")
	case c.state != stIdle || c.passive:
		return ndkpi.Errorf(ndkpi.StatusConnectionInvalid, op, nil, "connector already used (%v)", c.state)
	case m.byQPN[qp.QPN()] != nil:
		return ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "QP %d already belongs to a connection", qp.QPN())
	}
	ep, src, err := m.connectEndpoint(path, src, se, dst)
	if err != nil {
		return err
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

	c.req, err = m.newREQ(c, qp.StartingPSN(), mtu, p)
	if err != nil {
		c.release(m)
		m.unregister(c)
		return ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, err, "rdma_cm header for %v -> %v", src, dst)
	}
	c.out = m.send(c.path, c.tid, &c.req)
	c.state = stReqSent
	m.arm(c, c.timeout)
	return nil
}

// connectEndpoint returns the local endpoint of an active connection, with
// a reference taken, and its address: the shared endpoint se, or src bound
// for this connection alone (NDKPI.md §8 Endpoints).
func (m *Manager) connectEndpoint(path PathInfo, src netip.AddrPort, se *SharedEndpoint, dst netip.AddrPort) (*endpoint, netip.AddrPort, error) {
	const op = "connect"
	if se != nil {
		if se.closed {
			return nil, src, ndkpi.Errorf(ndkpi.StatusInvalidHandle, op, nil, "shared endpoint closed")
		}
		src = se.addr
		if src.Addr().Is4() != dst.Addr().Is4() || src.Addr() != path.LocalIP.Unmap() {
			return nil, src, ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "shared endpoint %v cannot reach %v over path from %v", src, dst, path.LocalIP)
		}
		if se.ep.peers[dst] > 0 {
			return nil, src, ndkpi.Errorf(ndkpi.StatusAddressAlreadyExists, op, nil, "connection %v -> %v exists", src, dst)
		}
		se.ep.refs++
		return se.ep, src, nil
	}
	src = unmap(src)
	if !src.Addr().IsValid() || src.Addr().IsUnspecified() {
		src = netip.AddrPortFrom(path.LocalIP.Unmap(), src.Port())
	}
	if src.Addr() != path.LocalIP.Unmap() || src.Addr().Is4() != dst.Addr().Is4() {
		return nil, src, ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "source %v does not match the path's local address %v or the destination family", src.Addr(), path.LocalIP)
	}
	if err := m.checkLocal(src.Addr(), op); err != nil {
		return nil, src, err
	}
	ep, err := m.bind(src, epConnector, dst, op)
	if err != nil {
		return nil, src, err
	}
	return ep, ep.addr, nil
}

// newREQ builds c's REQ as Linux does over RoCE (cm.c cm_format_req, cma.c
// cma_connect_ib): rdma_cm's header first in the private data, then p's.
func (m *Manager) newREQ(c *Connector, psn rocev2.PSN, mtu rocev2.MTU, p ConnectParams) (rocev2.CMReq, error) {
	src, dst := c.local, c.peer
	req := rocev2.CMReq{
		LocalCommID:             c.localID,
		ServiceID:               rocev2.ServiceID(rocev2.PortSpaceTCP, dst.Port()),
		LocalCAGUID:             m.guid,
		LocalQPN:                c.qpn & 0xFFFFFF,
		ResponderResources:      p.InboundReadLimit,
		InitiatorDepth:          p.OutboundReadLimit,
		RemoteCMResponseTimeout: m.p.CMResponseTimeout,
		TransportType:           rocev2.CMTransportRC,
		StartingPSN:             psn & rocev2.PSNMask,
		LocalCMResponseTimeout:  m.p.CMResponseTimeout,
		RetryCount:              m.p.RetryCount,
		PKey:                    c.path.pkey(),
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
			TrafficClass:    m.p.TrafficClass,
			LocalAckTimeout: ackTimeout(m.p.AckDelay, m.p.PacketLifeTime),
		},
	}
	if p.Retry != nil {
		req.RetryCount, req.RNRRetryCount = p.Retry.Count, p.Retry.RNR
	}
	hdr := rocev2.CMAHeader{SrcPort: src.Port(), Src: src.Addr(), Dst: dst.Addr()}
	if err := hdr.Encode(req.PrivateData[:]); err != nil {
		return req, err
	}
	copy(req.PrivateData[rocev2.CMAHeaderLen:], p.PrivateData)
	return req, nil
}

// CompleteConnect finishes an active connection after Connect succeeded:
// it sends RTU (NdkCompleteConnect). onDisconnect, if not nil, is called
// once when the peer disconnects or the connection aborts. It fails with
// CONNECTION_INVALID when Connect has not completed, CONNECTION_ABORTED when
// the peer gave up meanwhile, and IO_TIMEOUT when it did so because its
// REP went unanswered too long.
func (c *Connector) CompleteConnect(onDisconnect func()) error {
	return c.CompleteConnectEx(withoutReason(onDisconnect))
}

// CompleteConnectEx is CompleteConnect with a disconnect callback that
// learns why (NdkCompleteConnectEx, NDKPI 2.1): a Reason* value.
func (c *Connector) CompleteConnectEx(onDisconnect func(reason uint32)) error {
	const op = "complete connect"
	m := c.m
	m.mu.Lock()
	if c.state != stRepRcvd {
		err := c.abortErr
		m.mu.Unlock()
		if err != nil {
			return err
		}
		return ndkpi.Errorf(ndkpi.StatusConnectionInvalid, op, nil, "not connecting (%v)", c.state)
	}
	rtu := &rocev2.CMRtu{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	m.send(c.path, c.tid, rtu)
	c.state = stEstablished
	c.wasConnected = true
	c.onDisconnect = onDisconnect
	m.unlockAndRun()
	return nil
}

func (c *Connector) failConnect(m *Manager, err error) {
	if f := c.connectDone; f != nil {
		c.connectDone = nil
		m.queueCall(&c.lt, true, func() { f(err) })
	}
}

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
		TrafficClass:      c.req.Primary.TrafficClass,
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
		c.failConnect(m, ndkpi.Errorf(ndkpi.StatusConnectionAborted, "connect", err, "QP %d did not reach RTS", c.qpn))
	default:
		c.state = stRepRcvd
		if f := c.connectDone; f != nil {
			c.connectDone = nil
			m.queueCall(&c.lt, true, func() { f(nil) })
		}
	}
	m.unlockAndRun()
}
