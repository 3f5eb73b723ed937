package cm

import (
	"encoding/binary"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Reject refuses a connect request, or a connection whose Connect completed
// but that CompleteConnect has not finished (NdkReject). privateData (at
// most MaxRejectData bytes) goes into the REJ, reason 28 (consumer
// defined).
func (c *Connector) Reject(privateData []byte) error {
	const op = "reject"
	m := c.m
	if len(privateData) > MaxRejectData {
		return ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "%d bytes of private data exceed %d", len(privateData), MaxRejectData)
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
			err = ndkpi.Errorf(ndkpi.StatusConnectionInvalid, op, nil, "nothing to reject (%v)", c.state)
		}
		return err
	}
	c.sendREJ(m, rej)
	c.enterTimeWait(m)
	c.abortErr = ndkpi.Errorf(ndkpi.StatusConnectionAborted, op, nil, "connection was rejected locally")
	m.unlockAndRun()
	return nil
}

// sendREJ sends a REJ for this connection and remembers it.
func (c *Connector) sendREJ(m *Manager, rej *rocev2.CMRej) {
	c.rejOut = m.send(c.path, c.tid, rej)
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
	aborted := ndkpi.Errorf(ndkpi.StatusConnectionAborted, "", re, "peer rejected")
	if rej.Reason == rocev2.RejTimeout {
		aborted = ndkpi.Errorf(ndkpi.StatusIOTimeout, "", re, "peer timed out waiting for us")
	}
	switch c.state {
	case stReqSent:
		c.cancelTimer()
		c.data = ConnectionData{PrivateData: re.PrivateData}
		c.haveData = true
		refused := ndkpi.Errorf(ndkpi.StatusConnectionRefused, "connect", re, "%v refused the connection", c.peer)
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
		c.abortErr = ndkpi.Errorf(ndkpi.StatusConnectionAborted, "", re, "peer abandoned the request")
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
		c.disconnectEvent(m, ReasonPeerDisconnected)
	case stDreqSent:
		c.discAnswered = true
		c.enterTimeWait(m)
		c.maybeDisconnected(m)
	default:
		m.stats.Duplicates++
	}
}
