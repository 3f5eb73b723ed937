package cm

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Disconnect ends an established connection gracefully (NdkDisconnect):
// the QP moves to error (flushing its work requests), DREQ goes out and is
// resent until DREP arrives. done is called once, when the peer answered
// (nil) or never did (IO_TIMEOUT), and in both cases only after the QP's
// DMA has drained. Disconnecting a connection the peer already ended
// succeeds once the QP drained, and so does disconnecting one the CM
// aborted (TransportFailed), once the peer answered its DREQ.
func (c *Connector) Disconnect(done func(error)) error {
	return c.disconnect("disconnect", done, false)
}

// Abort ends an established connection abortively (NDK_FN_DISCONNECT_EX
// with Abortive TRUE): the QP moves to error, one DREQ goes out without
// waiting for the DREP, and done is called once the QP's DMA has drained.
// On a connection the peer or a transport failure already ended it
// completes once the QP drained.
func (c *Connector) Abort(done func(error)) error {
	return c.disconnect("abortive disconnect", done, true)
}

func (c *Connector) disconnect(op string, done func(error), abortive bool) error {
	m := c.m
	if done == nil {
		return ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "completion is required")
	}
	m.mu.Lock()
	if c.disconnectDone != nil || c.userDisconnect {
		m.mu.Unlock()
		return ndkpi.Errorf(ndkpi.StatusConnectionInvalid, op, nil, "already disconnecting")
	}
	switch {
	case c.state == stEstablished:
		c.qpToError(m)
		c.sendDREQ(m, !abortive)
		if abortive {
			c.enterTimeWait(m)
		}
	case c.state == stDreqSent && c.aborted:
		// The CM aborted it (TransportFailed) and waits for the DREP,
		// which a graceful Disconnect waits for too.
	case c.wasConnected && (c.state == stTimeWait || c.state == stDone):
		c.discAnswered = true
		c.qpToError(m) // the peer's disconnect left the QP alone
	default:
		m.mu.Unlock()
		return ndkpi.Errorf(ndkpi.StatusConnectionInvalid, op, nil, "not connected (%v)", c.state)
	}
	c.userDisconnect = true
	c.disconnectDone = done
	if abortive {
		c.discAnswered = true // nothing to wait for from the peer
	}
	c.maybeDisconnected(m)
	m.unlockAndRun()
	return nil
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
	c.leaveBacklog()
	// The peer's QP is free for a new connection now: a REQ from it with
	// a new communication ID is no stale one, as Linux forgets the QP of
	// a connection entering time-wait (cm_cleanup_timewait). Its IDs stay
	// for the duplicates.
	if k := (remoteKey{c.remoteGUID, c.remoteQPN}); m.remoteQPs[k] == c {
		delete(m.remoteQPs, k)
	}
	if m.timeWaits >= m.p.MaxTimeWait {
		// A peer that makes connections end (a REJ for every REP, say)
		// would otherwise hold rate × time-wait of them. The oldest has
		// answered its duplicates longest; ending it early costs at most
		// a late duplicate taken for a new request, which the peer's
		// retries then sort out.
		old := m.twOldest
		old.cancelTimer()
		m.leaveTimeWait(old)
		m.stats.TimeWaitEvictions++
	}
	c.state = stTimeWait
	c.twPrev = m.twNewest
	if m.twNewest != nil {
		m.twNewest.twNext = c
	} else {
		m.twOldest = c
	}
	m.twNewest = c
	m.timeWaits++
	m.arm(c, m.timeWait(c))
}

// leaveTimeWait ends c's time-wait: its IDs are forgotten (locked).
func (m *Manager) leaveTimeWait(c *Connector) {
	if p := c.twPrev; p != nil {
		p.twNext = c.twNext
	} else {
		m.twOldest = c.twNext
	}
	if n := c.twNext; n != nil {
		n.twPrev = c.twPrev
	} else {
		m.twNewest = c.twPrev
	}
	c.twPrev, c.twNext = nil, nil
	m.timeWaits--
	c.state = stDone
	m.unregister(c)
}

// disconnectEvent calls the consumer's disconnect callback with reason,
// once, unless the consumer disconnected first (NDKPI.md §8 Disconnect).
func (c *Connector) disconnectEvent(m *Manager, reason uint32) {
	if c.eventFired || c.userDisconnect || c.onDisconnect == nil {
		return
	}
	c.eventFired = true
	f := c.onDisconnect
	m.queueCall(&c.lt, false, func() { f(reason) })
}

// abortStale ends a connection the peer has evidently forgotten.
func (c *Connector) abortStale(m *Manager) {
	if c.state == stEstablished {
		c.abort(m, ReasonStale)
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
		c.disconnectEvent(m, ReasonPeerDisconnected)
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
