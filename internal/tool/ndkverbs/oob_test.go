package ndkverbs

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// side is one ndkxdp host of the veth pair with a Device on it.
type side struct {
	h   *harness.Host
	dev *Device
}

func newSides(t *testing.T, mtu int) (*side, *side) {
	t.Helper()
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: mtu, StaticNeighbours: true})
	open := func(h *harness.Host) *side {
		var a *ndk.Adapter
		if err := h.Do(func() (err error) { a, err = ndk.Open(h.Link, ndk.Options{}); return err }); err != nil {
			t.Fatalf("open %s: %v", h.Name, err)
		}
		t.Cleanup(a.Close)
		d, err := New(a)
		if err != nil {
			t.Fatal(err)
		}
		return &side{h: h, dev: d}
	}
	return open(p.A), open(p.B)
}

// oobNet is a verbs.Connector (on the client side) and verbs.Listener (on
// the server side) that connect ndk QPs out of band, the way a CM would:
// the server's QP is ready to receive before the client's connect returns,
// and closing either endpoint tells the other the peer has gone. Ports
// nobody listens on reject with REJ reason 8.
type oobNet struct {
	client, server *side
	mu             sync.Mutex
	ports          map[uint16]chan oobReq
	eps            []*Endpoint // every endpoint made, client and server
	serverMem      [][]byte    // every region the server's endpoints registered
}

type oobReq struct {
	ep    *Endpoint
	cp    verbs.ConnParams
	reply chan *Endpoint
	done  chan error
}

func (n *oobNet) track(e *Endpoint) {
	n.mu.Lock()
	n.eps = append(n.eps, e)
	n.mu.Unlock()
}

func connectOpts(mine, theirs verbs.ConnParams) ndk.ConnectOptions {
	// A side may have outstanding what the other grants (rdma_cm: the
	// initiator depth is capped by the peer's responder resources).
	out := int(min(mine.InitiatorDepth, theirs.ResponderResources))
	in := int(mine.ResponderResources)
	return ndk.ConnectOptions{InboundReadLimit: max(in, 1), OutboundReadLimit: max(out, 1)}
}

func (n *oobNet) prepared(s *side, cp verbs.ConnParams) (*Endpoint, error) {
	ep, err := s.dev.Endpoint(Depths{})
	if err != nil {
		return nil, err
	}
	n.track(ep)
	if cp.Prepare != nil {
		if err := cp.Prepare(ep); err != nil {
			ep.Close()
			return nil, fmt.Errorf("prepare: %w", err)
		}
	}
	if s == n.server {
		n.mu.Lock()
		for _, mr := range ep.mrs {
			n.serverMem = append(n.serverMem, mr.Bytes())
		}
		n.mu.Unlock()
	}
	return ep, nil
}

// Connect implements verbs.Connector.
func (n *oobNet) Connect(ctx context.Context, port uint16, cp verbs.ConnParams) (verbs.Endpoint, error) {
	n.mu.Lock()
	ch := n.ports[port]
	n.mu.Unlock()
	if ch == nil {
		return nil, &verbs.RejectError{Reason: verbs.RejectInvalidServiceID}
	}
	ep, err := n.prepared(n.client, cp)
	if err != nil {
		return nil, err
	}
	req := oobReq{ep: ep, cp: cp, reply: make(chan *Endpoint, 1), done: make(chan error, 1)}
	select {
	case ch <- req:
	case <-ctx.Done():
		ep.Close()
		return nil, ctx.Err()
	}
	var srv *Endpoint
	select {
	case srv = <-req.reply:
		if srv == nil {
			ep.Close()
			return nil, fmt.Errorf("the server could not accept")
		}
	case <-ctx.Done():
		ep.Close()
		return nil, ctx.Err()
	}
	opts := connectOpts(cp, req.cp)
	err = n.client.h.Do(func() error { return ep.QP().ConnectOOB(srv.QP().LocalEndpoint(), opts) })
	req.done <- err
	if err != nil {
		ep.Close()
		return nil, err
	}
	ep.Connected(func() error { srv.PeerDisconnected(); return nil })
	return ep, nil
}

// listen binds port for Accept.
func (n *oobNet) listen(port uint16) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ports == nil {
		n.ports = map[uint16]chan oobReq{}
	}
	n.ports[port] = make(chan oobReq)
}

type oobListener struct {
	n    *oobNet
	port uint16
}

// Accept implements verbs.Listener.
func (l oobListener) Accept(ctx context.Context, cp verbs.ConnParams) (verbs.Endpoint, error) {
	n := l.n
	n.mu.Lock()
	ch := n.ports[l.port]
	n.mu.Unlock()
	var req oobReq
	select {
	case req = <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ep, err := n.prepared(n.server, cp)
	if err != nil {
		req.reply <- nil
		return nil, err
	}
	// The passive side is ready before the active side's connect returns.
	opts := connectOpts(cp, req.cp)
	if err := n.server.h.Do(func() error { return ep.QP().ConnectOOB(req.ep.QP().LocalEndpoint(), opts) }); err != nil {
		ep.Close()
		return nil, err
	}
	req.reply <- ep
	if err := <-req.done; err != nil {
		ep.Close()
		return nil, err
	}
	cli := req.ep
	ep.Connected(func() error { cli.PeerDisconnected(); return nil })
	return ep, nil
}

func (l oobListener) Close() error { return nil }
