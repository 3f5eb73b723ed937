package cm

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Disconnect reasons: the ProviderDisconnectReason of NDKPI 2.1's
// NDK_FN_DISCONNECT_EVENT_CALLBACK_EX, which NDKPI leaves to the provider
// (0 means none given).
const (
	ReasonNone uint32 = 0
	// ReasonPeerDisconnected: the peer's DREQ, or its REJ of an
	// established connection: it called Disconnect, closed, or aborted.
	ReasonPeerDisconnected uint32 = 1
	// ReasonStale: the peer started a new connection from the QP of this
	// one, so it has forgotten this one (IBTA 12.9.8.3.2, cm.c
	// cm_match_req).
	ReasonStale uint32 = 2
	// ReasonTransport | the ib_wc_status of the failure: the QP failed on
	// its own (TransportFailed) and the CM ended the connection.
	ReasonTransport uint32 = 0x100
)

// withoutReason adapts an NDKPI 1.x disconnect callback to the 2.1 form.
func withoutReason(f func()) func(uint32) {
	if f == nil {
		return nil
	}
	return func(uint32) { f() }
}

// TransportFailed tells the CM that the local QP qpn failed with the
// ib_wc_status wcStatus (an invalid token in a SendAndInvalidate it
// received, a remote access error, retries exhausted...): the provider
// aborts the connection, as NdkSendAndInvalidate requires for an invalid
// token (seed 004) and NDKPI.md §4 describes for the disconnect event
// ("when the peer disconnects or the connection aborts"). An established
// connection sends a DREQ, so that the peer's consumer hears of it too,
// and the consumer's disconnect callback fires with ReasonTransport |
// wcStatus; a connection still being set up is rejected and its pending
// call fails with CONNECTION_ABORTED. A QP that belongs to no connection
// (connected out of band) is ignored.
func (m *Manager) TransportFailed(qpn, wcStatus uint32) {
	m.mu.Lock()
	if c := m.byQPN[qpn]; c != nil && !m.closed {
		c.abort(m, ReasonTransport|wcStatus)
	}
	m.unlockAndRun()
}

// abort ends the connection without the consumer asking, locked.
func (c *Connector) abort(m *Manager, reason uint32) {
	aborted := ndkpi.Errorf(ndkpi.StatusConnectionAborted, "", nil, "connection aborted (reason %#x)", reason)
	switch c.state {
	case stEstablished:
		c.aborted = true
		c.qpToError(m)
		c.sendDREQ(m, true)
		c.disconnectEvent(m, reason)
	case stRepRcvd:
		// Connected, CompleteConnect not called yet: refuse the REP.
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREP, Reason: rocev2.RejConsumerDefined})
		c.abortErr = aborted
		c.qpToError(m)
		c.enterTimeWait(m)
	case stRepSent:
		c.sendREJ(m, &rocev2.CMRej{LocalCommID: c.localID, RemoteCommID: c.remoteID,
			MessageRejected: rocev2.CMKindREQ, Reason: rocev2.RejConsumerDefined})
		c.abortErr = aborted
		c.qpToError(m)
		c.enterTimeWait(m)
		if f := c.acceptDone; f != nil {
			c.acceptDone = nil
			m.queueCall(&c.lt, true, func() { f(aborted) })
		}
	}
}
