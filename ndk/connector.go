package ndk

import (
	"context"
	"net/netip"
	"sync"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
)

// Private-data limits (NDKPI.md §9): what a Connect, an Accept and a Reject
// carry to the peer. Connect's is the REQ's 92 bytes less rdma_cm's 36-byte
// header, which ndkxdp puts first so that librdmacm peers understand it.
const (
	MaxCallerData = cm.MaxCallerData
	MaxCalleeData = cm.MaxCalleeData
	MaxRejectData = cm.MaxRejectData
)

// Connector is one connection, set up and torn down through the
// InfiniBand CM on QP1 (NDK_CONNECTOR): created by Adapter.CreateConnector
// for the active side, or handed to a Listener's connect callback for the
// passive side. Its methods are safe for concurrent use.
//
// The calls that wait for the peer (Connect, Accept, Disconnect) block
// until it answered, the CM gave up, or ctx ended; NDKPI's STATUS_PENDING
// and request completion become that wait. The disconnect callback runs on
// a goroutine of its own, once.
type Connector struct {
	a  *Adapter
	be connectorBackend // inproc_cm.go, daemon_cm.go
	qp *QP

	mu       sync.Mutex
	retry    *cm.RetryCounts // SetRetryCounts; nil: the adapter's CMOptions
	inflight int             // consumer callbacks running
	closing  bool            // Close called
	cmClosed bool            // the CM's close completed
	done     chan struct{}
}

// CreateConnector returns a connector for an outgoing connection
// (NdkCreateConnector). It fails with STATUS_NOT_SUPPORTED on an adapter
// without a transport and STATUS_INVALID_HANDLE after the adapter closed.
func (a *Adapter) CreateConnector() (*Connector, error) { return a.backend().createConnector() }

// readLimits checks the consumer's read limits and caps them at the
// adapter's (NDKPI.md §8 Read limits).
func (c *Connector) readLimits(op string, inbound, outbound int) (uint8, uint8, error) {
	if inbound < 0 || outbound < 0 {
		return 0, 0, errorf(StatusInvalidParameter, op, "negative read limit %d/%d", inbound, outbound)
	}
	info := &c.a.info
	in := min(inbound, int(info.MaxInboundReadLimit), 255)
	out := min(outbound, int(info.MaxOutboundReadLimit), 255)
	return uint8(in), uint8(out), nil
}

func (c *Connector) checkQP(op string, qp *QP) error {
	switch {
	case qp == nil:
		return errorf(StatusInvalidParameter, op, "no QP")
	case qp.adapter != c.a:
		return errorf(StatusInvalidParameter, op, "QP of another adapter")
	case qp.closed.Load():
		return errorf(StatusInvalidHandle, op, "QP closed")
	case qp.ud != nil:
		return errorf(StatusInvalidDeviceRequest, op, "a UD QP is not connected: SendTo, and ResolveUD or ServeUD")
	}
	return nil
}

// Connect connects qp to the listener at dst (NdkConnect): it resolves the
// route and the next hop's MAC through the kernel's tables, sends a REQ
// with privateData (at most MaxCallerData bytes), and returns when the
// peer accepted. Then GetConnectionData gives the effective read limits
// and the peer's private data, and CompleteConnect (or Reject) finishes.
// src may be the zero AddrPort (the kernel's source address, an ephemeral
// port), an address with port 0, or a full address and port.
//
// The read limits are capped by AdapterInfo's MaxInboundReadLimit and
// MaxOutboundReadLimit; the effective ones are also capped by the peer's.
// Errors: STATUS_CONNECTION_REFUSED (nobody listens, the listener's
// backlog is full, or the peer rejected: GetConnectionData then holds the
// REJ's private data), STATUS_IO_TIMEOUT (no answer after the CM's
// retries), STATUS_NETWORK_UNREACHABLE (no route through this adapter),
// STATUS_HOST_UNREACHABLE (the next hop's MAC could not be learned),
// STATUS_INVALID_ADDRESS (src is not the adapter's, dst not unicast),
// STATUS_SHARING_VIOLATION (src's port is taken),
// STATUS_ADDRESS_ALREADY_EXISTS (this 4-tuple exists),
// STATUS_INVALID_PARAMETER, and STATUS_CANCELLED when ctx ended first, in
// which case the attempt is abandoned and the connector closed.
func (c *Connector) Connect(ctx context.Context, qp *QP, src, dst netip.AddrPort, inboundReadLimit, outboundReadLimit int, privateData []byte) error {
	return c.be.connect(ctx, "connect", qp, src, nil, dst, inboundReadLimit, outboundReadLimit, privateData)
}

// ConnectWithSharedEndpoint is Connect from the address and port of se
// (NdkConnectWithSharedEndpoint): several connections share them, and only
// the 4-tuple must be unique.
func (c *Connector) ConnectWithSharedEndpoint(ctx context.Context, qp *QP, se *SharedEndpoint, dst netip.AddrPort, inboundReadLimit, outboundReadLimit int, privateData []byte) error {
	const op = "connect with shared endpoint"
	if se == nil || se.a != c.a {
		return errorf(StatusInvalidParameter, op, "shared endpoint missing or of another adapter")
	}
	return c.be.connect(ctx, op, qp, netip.AddrPort{}, se, dst, inboundReadLimit, outboundReadLimit, privateData)
}

// wait returns the completion, or gives up on ctx: abandon closes the
// connector (a Connect or Accept cannot be withdrawn otherwise).
func (c *Connector) wait(ctx context.Context, op string, done chan error, abandon bool) error {
	select {
	case err := <-done:
		return cmError(op, err)
	case <-ctx.Done():
		if abandon {
			c.Close()
		}
		return &Error{Status: StatusCancelled, Op: op, Detail: "context ended first", Err: ctx.Err()}
	}
}

// CompleteConnect finishes a connection whose Connect succeeded: the RTU
// goes out (NdkCompleteConnect). onDisconnect, if not nil, is called once,
// on a goroutine of its own, when the peer disconnects or the connection
// aborts. A disconnect by the peer leaves the QP and its outstanding
// requests alone, as NDKPI asks of a provider: Disconnect (which succeeds
// after the peer's), Flush or Close end them. It fails with STATUS_CONNECTION_INVALID when Connect has not
// succeeded, and STATUS_CONNECTION_ABORTED or STATUS_IO_TIMEOUT when the
// peer gave up meanwhile.
func (c *Connector) CompleteConnect(onDisconnect func()) error {
	return c.CompleteConnectEx(withoutReason(onDisconnect))
}

// Accept accepts the connect request this connector was handed with
// (NdkAccept): qp moves to ready-to-send, the REP carries privateData (at
// most MaxCalleeData bytes), and Accept returns when the peer's RTU (or its
// first packet on the QP) arrived. onDisconnect is as in CompleteConnect.
// Errors: STATUS_IO_TIMEOUT (the peer never completed),
// STATUS_CONNECTION_ABORTED (it rejected or went away),
// STATUS_CONNECTION_INVALID (no request to accept), STATUS_INVALID_PARAMETER,
// and STATUS_CANCELLED when ctx ended first (the connector is then closed).
func (c *Connector) Accept(ctx context.Context, qp *QP, inboundReadLimit, outboundReadLimit int, privateData []byte, onDisconnect func()) error {
	return c.AcceptEx(ctx, qp, inboundReadLimit, outboundReadLimit, privateData, withoutReason(onDisconnect))
}

// AcceptEx is Accept with a disconnect callback that learns why the
// connection ended (NdkAcceptEx, NDKPI 2.1).
func (c *Connector) AcceptEx(ctx context.Context, qp *QP, inboundReadLimit, outboundReadLimit int, privateData []byte, onDisconnect func(DisconnectReason)) error {
	return c.be.accept(ctx, qp, inboundReadLimit, outboundReadLimit, privateData, onDisconnect)
}

// Reject refuses the connect request, or a connection whose Connect
// succeeded before CompleteConnect (NdkReject). privateData (at most
// MaxRejectData bytes) reaches the peer in the REJ. It fails with
// STATUS_CONNECTION_ABORTED when the peer gave up already.
func (c *Connector) Reject(privateData []byte) error { return c.be.reject(privateData) }

// Disconnect ends the connection gracefully (NdkDisconnect): the QP's
// pending requests are cancelled, a DREQ goes out, and Disconnect returns
// when the peer answered and no DMA on the QP can follow; STATUS_IO_TIMEOUT
// when the peer never answered. The peer's disconnect callback fires
// unless it disconnected too. If ctx ends first, Disconnect returns
// STATUS_CANCELLED and the disconnect goes on.
func (c *Connector) Disconnect(ctx context.Context) error { return c.be.disconnect(ctx, false) }

// GetConnectionData returns the read limits and copies the peer's private
// data into buf (NdkGetConnectionData). size is the private data's length,
// which is the whole field of the peer's message (REQ 56, REP 196, REJ 148
// bytes: CM private data carries no length). An empty buf is a size query
// and succeeds; a buf shorter than size fails with STATUS_BUFFER_TOO_SMALL
// and copies nothing. Before Accept the limits are what the peer asked for
// seen from this side; once connected, the effective ones (the minimum of
// both sides). After a rejected Connect it holds the REJ's private data.
func (c *Connector) GetConnectionData(buf []byte) (inboundReadLimit, outboundReadLimit, size int, err error) {
	return c.be.connectionData(buf)
}

// LocalAddress returns the connection's local address and port
// (NdkGetLocalAddress).
func (c *Connector) LocalAddress() netip.AddrPort { return c.be.localAddress() }

// PeerAddress returns the peer's address and port (NdkGetPeerAddress).
func (c *Connector) PeerAddress() netip.AddrPort { return c.be.peerAddress() }

// QP returns the QP given to Connect or Accept, or nil.
func (c *Connector) QP() *QP {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.qp
}

// Close releases the connector (NdkCloseConnector): a connection being set
// up is rejected, an established one gets a DREQ and its QP's requests are
// cancelled, and its address and port are released once nothing else
// holds them. Close does not wait: Closed reports when the close completed,
// which is after every callback of the connector returned, so it may be
// called from one. A second Close does nothing.
func (c *Connector) Close() {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.mu.Unlock()
	c.be.close()
}

// Closed returns a channel closed when the connector's close completed.
func (c *Connector) Closed() <-chan struct{} { return c.done }

func (c *Connector) cmCloseDone() {
	c.mu.Lock()
	c.cmClosed = true
	c.finishLocked()
	c.mu.Unlock()
}

func (c *Connector) finishLocked() {
	if !c.cmClosed || c.inflight > 0 {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	close(c.done)
	c.a.conns.forget(func() { delete(c.a.conns.connectors, c) })
}

// event wraps a consumer event callback to run on a goroutine of its own,
// so that it may call the blocking methods, and be counted so that Close
// completes after it.
func (c *Connector) event(f func(DisconnectReason)) func(uint32) {
	if f == nil {
		return nil
	}
	return func(reason uint32) {
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return
		}
		c.inflight++
		c.mu.Unlock()
		go func() {
			defer func() {
				c.mu.Lock()
				c.inflight--
				c.finishLocked()
				c.mu.Unlock()
			}()
			f(DisconnectReason(reason))
		}()
	}
}
