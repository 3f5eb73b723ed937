package ndkverbs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// disconnectTimeout bounds the wait for the peer's DREP when an endpoint
// closes (Linux's CM waits its own timeouts; the tools need no more).
const disconnectTimeout = 5 * time.Second

// Connector opens rdma_cm connections to Peer through ndk's IB CM
// (verbs.Connector).
type Connector struct {
	Dev    *Device
	Peer   netip.Addr
	Depths Depths
}

var _ verbs.Connector = (*Connector)(nil)

// connectErr adds a *verbs.RejectError to an ndk connect error that a
// peer's REJ caused.
func connectErr(err error) error {
	if rej := (*ndk.RejectError)(nil); errors.As(err, &rej) {
		return fmt.Errorf("%w: %w", &verbs.RejectError{Reason: uint16(rej.Reason)}, err)
	}
	return err
}

// readLimits turns rdma_conn_param's depths into ndk's limits: our
// responder resources are how many READs and atomics the peer may have
// outstanding at us, our initiator depth how many we issue.
func readLimits(p verbs.ConnParams) (in, out int) {
	return max(int(p.ResponderResources), 1), max(int(p.InitiatorDepth), 1)
}

// Connect implements verbs.Connector: a new endpoint, prepared with
// p.Prepare (its receives posted), connected with a REQ carrying
// p.PrivateData. A REJ is returned as a *verbs.RejectError.
func (c *Connector) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	srq, err := c.Dev.srqOf(p)
	if err != nil {
		return nil, err
	}
	ep, err := c.Dev.endpoint(c.Depths, srq, p.UC)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (verbs.Endpoint, error) {
		ep.Close()
		return nil, err
	}
	ep.unordered = p.Unordered
	if p.Prepare != nil {
		if err := p.Prepare(ep); err != nil {
			return fail(fmt.Errorf("prepare endpoint: %w", err))
		}
	}
	conn, err := c.Dev.Adapter.CreateConnector()
	if err != nil {
		return fail(fmt.Errorf("create connector: %w", err))
	}
	in, out := readLimits(p)
	dst := netip.AddrPortFrom(c.Peer, port)
	if err := conn.Connect(ctx, ep.qp, netip.AddrPort{}, dst, in, out, p.PrivateData); err != nil {
		conn.Close()
		return fail(fmt.Errorf("connect to %v: %w", dst, connectErr(err)))
	}
	if err := conn.CompleteConnect(ep.PeerDisconnected); err != nil {
		conn.Close()
		return fail(fmt.Errorf("complete connect to %v: %w", dst, err))
	}
	if ep.peerData, err = privateData(conn); err != nil {
		conn.Close()
		return fail(fmt.Errorf("connect to %v: %w", dst, err))
	}
	ep.peer = conn.PeerAddress()
	ep.Connected(disconnector(conn))
	return ep, nil
}

// privateData returns the peer's private data on conn (NdkGetConnectionData).
func privateData(conn *ndk.Connector) ([]byte, error) {
	_, _, n, err := conn.GetConnectionData(nil)
	if err != nil {
		return nil, fmt.Errorf("private data: %w", err)
	}
	buf := make([]byte, n)
	if _, _, _, err := conn.GetConnectionData(buf); err != nil {
		return nil, fmt.Errorf("private data: %w", err)
	}
	return buf, nil
}

// disconnector is Endpoint.Close's hook: DREQ, wait for the DREP
// (bounded), release the connector.
func disconnector(conn *ndk.Connector) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
		defer cancel()
		err := conn.Disconnect(ctx)
		conn.Close()
		if errors.Is(err, ndk.ErrConnectionInvalid) || errors.Is(err, ndk.ErrConnectionAborted) {
			err = nil // the peer disconnected first
		}
		return err
	}
}

// Listener accepts rdma_cm connections on one port through ndk's IB CM
// (verbs.Listener). Connect requests wait in a backlog until Accept.
type Listener struct {
	dev    *Device
	depths Depths
	l      *ndk.Listener
	reqs   chan *ndk.Connector
	done   chan struct{}
	once   sync.Once
}

var _ verbs.Listener = (*Listener)(nil)

// listenBacklog is how many requests wait for Accept; more are rejected.
// perftest's client with -q N sends N REQs at once (rdma_listen's backlog
// on its own server is N): up to this many QPs it finds ours waiting.
const listenBacklog = 256

// Listen listens on port of every IPv4 address of dev's adapter.
func Listen(dev *Device, port uint16, depths Depths) (*Listener, error) {
	return ListenAddr(dev, netip.AddrPortFrom(netip.IPv4Unspecified(), port), depths)
}

// ListenAddr listens on addr, one of dev's adapter's addresses or the
// unspecified address (every address), as rdma_bind_addr and rdma_listen
// do.
func ListenAddr(dev *Device, addr netip.AddrPort, depths Depths) (*Listener, error) {
	x := &Listener{dev: dev, depths: depths, reqs: make(chan *ndk.Connector, listenBacklog), done: make(chan struct{})}
	l, err := dev.Adapter.CreateListener(func(c *ndk.Connector) {
		select {
		case x.reqs <- c:
		case <-x.done:
			_ = c.Reject(nil)
			c.Close()
		default:
			_ = c.Reject(nil) // backlog full
			c.Close()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("create listener: %w", err)
	}
	if err := l.Listen(addr); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on %v: %w", addr, err)
	}
	x.l = l
	return x, nil
}

// Unbound returns a Listener that listens nowhere: its Accept waits for
// nothing but its context, and it makes endpoints connected out of band
// (verbs.Direct), for a server that takes no rdma_cm connection.
func Unbound(dev *Device, depths Depths) *Listener {
	return &Listener{dev: dev, depths: depths, reqs: make(chan *ndk.Connector), done: make(chan struct{})}
}

// Port returns the port the listener is bound to.
func (x *Listener) Port() uint16 {
	if x.l == nil {
		return 0
	}
	return x.l.LocalAddress().Port()
}

// Accept implements verbs.Listener: the next connect request gets a new
// endpoint, prepared with p.Prepare, and a REP with p.PrivateData.
func (x *Listener) Accept(ctx context.Context, p verbs.ConnParams) (verbs.Endpoint, error) {
	var conn *ndk.Connector
	select {
	case conn = <-x.reqs:
	case <-ctx.Done():
		return nil, fmt.Errorf("accept: %w", ctx.Err())
	case <-x.done:
		return nil, fmt.Errorf("accept: listener closed: %w", verbs.ErrInvalid)
	case <-x.dev.Adapter.Gone():
		return nil, fmt.Errorf("accept: %w", x.dev.Adapter.Err())
	}
	srq, err := x.dev.srqOf(p)
	if err != nil {
		_ = conn.Reject(nil)
		conn.Close()
		return nil, err
	}
	ep, err := x.dev.endpoint(x.depths, srq, p.UC)
	if err != nil {
		_ = conn.Reject(nil)
		conn.Close()
		return nil, err
	}
	ep.unordered = p.Unordered
	ep.peer = conn.PeerAddress()
	if ep.peerData, err = privateData(conn); err != nil {
		_ = conn.Reject(nil)
		conn.Close()
		ep.Close()
		return nil, fmt.Errorf("accept from %v: %w", conn.PeerAddress(), err)
	}
	if p.Prepare != nil {
		if err := p.Prepare(ep); err != nil {
			_ = conn.Reject(nil)
			conn.Close()
			ep.Close()
			return nil, fmt.Errorf("prepare endpoint: %w", err)
		}
	}
	in, out := readLimits(p)
	if err := conn.Accept(ctx, ep.qp, in, out, p.PrivateData, ep.PeerDisconnected); err != nil {
		conn.Close()
		ep.Close()
		return nil, fmt.Errorf("accept from %v: %w", conn.PeerAddress(), err)
	}
	ep.Connected(disconnector(conn))
	return ep, nil
}

// Close stops listening; requests not yet accepted are rejected.
func (x *Listener) Close() error {
	x.once.Do(func() {
		close(x.done)
		if x.l != nil {
			x.l.Close()
		}
		for {
			select {
			case c := <-x.reqs:
				_ = c.Reject(nil)
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}
