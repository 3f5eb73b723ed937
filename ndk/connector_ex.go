package ndk

import (
	"context"
	"fmt"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
)

// DisconnectReason is the ProviderDisconnectReason of NDKPI 2.1's
// NDK_FN_DISCONNECT_EVENT_CALLBACK_EX, which NDKPI leaves to the provider;
// 0 means none was given. ndkxdp's values say whether the peer ended the
// connection or the transport failed, and then with which IB error: the
// low byte of a transport reason is the ib_wc_status, the value a failed
// completion carries in ResultEx.ProviderErrorCode.
type DisconnectReason uint32

const (
	DisconnectReasonNone DisconnectReason = DisconnectReason(cm.ReasonNone)
	// DisconnectReasonPeer: the peer disconnected (its DREQ, gracefully or
	// abortively, or it closed its connector or adapter).
	DisconnectReasonPeer DisconnectReason = DisconnectReason(cm.ReasonPeerDisconnected)
	// DisconnectReasonStale: the peer connected anew from the same QP, so
	// it had forgotten this connection.
	DisconnectReasonStale DisconnectReason = DisconnectReason(cm.ReasonStale)

	// The QP failed and the provider aborted the connection (seed 004:
	// "must abort the connection"). The same reason reaches the side
	// that detected the error and, when its own QP fails too, the side
	// that caused it (otherwise that side sees DisconnectReasonPeer).
	disconnectReasonTransport DisconnectReason = DisconnectReason(cm.ReasonTransport)
	// DisconnectReasonLocalLength: a READ response did not fit
	// (IB_WC_LOC_LEN_ERR).
	DisconnectReasonLocalLength DisconnectReason = disconnectReasonTransport | 1
	// DisconnectReasonRemoteInvalidRequest: an invalid request NAK
	// (IB_WC_REM_INV_REQ_ERR), sent or received: among others a
	// SendAndInvalidate whose token the receiver could not invalidate, a
	// SEND larger than the receive buffer.
	DisconnectReasonRemoteInvalidRequest DisconnectReason = disconnectReasonTransport | 9
	// DisconnectReasonRemoteAccess: a remote access error NAK
	// (IB_WC_REM_ACCESS_ERR), sent or received: a token, bounds or rights
	// that did not allow a READ or WRITE.
	DisconnectReasonRemoteAccess DisconnectReason = disconnectReasonTransport | 10
	// DisconnectReasonRemoteOperational: a remote operational error NAK
	// (IB_WC_REM_OP_ERR).
	DisconnectReasonRemoteOperational DisconnectReason = disconnectReasonTransport | 11
	// DisconnectReasonRetryExceeded: no ACK through every retry
	// (IB_WC_RETRY_EXC_ERR, ConnectOptions/CMOptions RetryCount).
	DisconnectReasonRetryExceeded DisconnectReason = disconnectReasonTransport | 12
	// DisconnectReasonRNRRetryExceeded: the peer had no receive posted
	// through every RNR retry (IB_WC_RNR_RETRY_EXC_ERR).
	DisconnectReasonRNRRetryExceeded DisconnectReason = disconnectReasonTransport | 13
)

var disconnectReasonNames = map[DisconnectReason]string{
	DisconnectReasonNone:                 "none",
	DisconnectReasonPeer:                 "peer disconnected",
	DisconnectReasonStale:                "stale connection",
	DisconnectReasonLocalLength:          "local length error",
	DisconnectReasonRemoteInvalidRequest: "remote invalid request",
	DisconnectReasonRemoteAccess:         "remote access error",
	DisconnectReasonRemoteOperational:    "remote operational error",
	DisconnectReasonRetryExceeded:        "retry count exceeded",
	DisconnectReasonRNRRetryExceeded:     "RNR retry count exceeded",
}

func (r DisconnectReason) String() string {
	if s, ok := disconnectReasonNames[r]; ok {
		return s
	}
	return fmt.Sprintf("DisconnectReason(%#x)", uint32(r))
}

// Transport reports whether the connection ended because its QP failed
// (a transport error) rather than by the peer's choice.
func (r DisconnectReason) Transport() bool { return r&disconnectReasonTransport != 0 }

// withoutReason adapts an NDKPI 1.x disconnect callback to the 2.1 form.
func withoutReason(f func()) func(DisconnectReason) {
	if f == nil {
		return nil
	}
	return func(DisconnectReason) { f() }
}

// CompleteConnectEx is CompleteConnect with a disconnect callback that
// learns why the connection ended (NdkCompleteConnectEx, NDKPI 2.1).
func (c *Connector) CompleteConnectEx(onDisconnect func(DisconnectReason)) error {
	return c.be.completeConnect(onDisconnect)
}

// DisconnectEx is Disconnect, or with abortive an abortive disconnect
// (NDK_FN_DISCONNECT_EX, NDKPI.md §3): the QP's requests are cancelled,
// one DREQ goes out, and it returns as soon as no DMA on the QP can follow,
// without waiting for the peer's answer. The peer's disconnect callback
// fires (DisconnectReasonPeer) when the DREQ reaches it; if it is lost,
// the peer learns of it from its own failed requests or stale-connection
// handling, as after a TCP reset. It fails with STATUS_CONNECTION_INVALID
// on a connection never established or already disconnecting.
func (c *Connector) DisconnectEx(ctx context.Context, abortive bool) error {
	return c.be.disconnect(ctx, abortive)
}

// SetRetryCounts sets this connection's transport retry counts, as
// rdma_cm's consumers set struct rdma_conn_param's retry_count and
// rnr_retry_count: call it before Connect or Accept. Connect's REQ
// carries both, and the peer's QP uses them too; Accept's REP carries
// rnrRetry, how often the peer waits out this side's RNR NAKs (the
// passive side retries as the REQ asked). retry is how often an
// unacknowledged packet is resent before requests fail with
// STATUS_IO_TIMEOUT (and the connection aborts with
// DisconnectReasonRetryExceeded); rnrRetry how many RNR NAKs are waited
// out, 7 meaning without limit. Both lie in 0-7, else
// STATUS_INVALID_PARAMETER. Without it, the adapter's CMOptions apply.
func (c *Connector) SetRetryCounts(retry, rnrRetry int) error {
	if retry < 0 || retry > 7 || rnrRetry < 0 || rnrRetry > 7 {
		return errorf(StatusInvalidParameter, "set retry counts", "%d/%d outside 0-7", retry, rnrRetry)
	}
	c.mu.Lock()
	c.retry = &cm.RetryCounts{Count: uint8(retry), RNR: uint8(rnrRetry)}
	c.mu.Unlock()
	return nil
}

func (c *Connector) retryCounts() *cm.RetryCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retry
}
