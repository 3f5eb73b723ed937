package ndkverbs

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

var (
	_ verbs.Direct   = (*Connector)(nil)
	_ verbs.Direct   = (*Listener)(nil)
	_ verbs.DirectUD = (*Connector)(nil)
	_ verbs.DirectUD = (*Listener)(nil)
	_ verbs.OOB      = (*Endpoint)(nil)
)

// Unconnected implements verbs.Direct on the connector's device.
func (c *Connector) Unconnected(p verbs.ConnParams) (verbs.OOB, error) {
	return c.Dev.unconnected(c.Depths, p)
}

// PeerAddress is the address the connector connects to: where a tool
// that exchanges addresses over TCP first (perftest without -R) dials.
func (c *Connector) PeerAddress() netip.Addr { return c.Peer }

// LocalAddress is the adapter's address, which such a tool dials from.
func (c *Connector) LocalAddress() netip.Addr { return c.Dev.Adapter.LocalAddress() }

// Unconnected implements verbs.Direct on the listener's device.
func (x *Listener) Unconnected(p verbs.ConnParams) (verbs.OOB, error) {
	return x.dev.unconnected(x.depths, p)
}

// UnconnectedUD implements verbs.DirectUD on the connector's device.
func (c *Connector) UnconnectedUD(p verbs.ConnParams, qkey uint32) (verbs.OOB, error) {
	return c.Dev.unconnectedUD(c.Depths, p, qkey)
}

// UnconnectedUD implements verbs.DirectUD on the listener's device.
func (x *Listener) UnconnectedUD(p verbs.ConnParams, qkey uint32) (verbs.OOB, error) {
	return x.dev.unconnectedUD(x.depths, p, qkey)
}

func (d *Device) unconnected(q Depths, p verbs.ConnParams) (verbs.OOB, error) {
	srq, err := d.srqOf(p)
	if err != nil {
		return nil, err
	}
	ep, err := d.endpoint(q, srq, p.UC)
	if err != nil {
		return nil, err
	}
	return prepared(ep, p)
}

func (d *Device) unconnectedUD(q Depths, p verbs.ConnParams, qkey uint32) (verbs.OOB, error) {
	if p.SRQ != nil || p.UDAnnounce {
		return nil, fmt.Errorf("ndkverbs: a UD endpoint connected out of band takes no SRQ and announces nothing: %w", verbs.ErrInvalid)
	}
	ep, err := d.udEndpointQKey(q, qkey)
	if err != nil {
		return nil, err
	}
	return prepared(ep, p)
}

// prepared runs p.Prepare on a new endpoint.
func prepared(ep *Endpoint, p verbs.ConnParams) (verbs.OOB, error) {
	ep.unordered = p.Unordered
	if p.Prepare != nil {
		if err := p.Prepare(ep); err != nil {
			ep.Close()
			return nil, fmt.Errorf("prepare endpoint: %w", err)
		}
	}
	return ep, nil
}

// Local implements verbs.OOB: the QP's number, its first PSN (drawn when
// it was made) and the adapter's address as a GID (IPv4-mapped for IPv4,
// as RoCE v2 GIDs are).
func (e *Endpoint) Local() verbs.Address {
	l := e.qp.LocalEndpoint()
	return verbs.Address{QPN: l.QPN, PSN: l.PSN, GID: e.GID()}
}

// ConnectTo implements verbs.OOB. The next hop's MAC comes from the
// adapter's own route and neighbour lookup (as Connect's), which a
// daemon makes in its own namespace.
func (e *Endpoint) ConnectTo(ctx context.Context, peer verbs.Address, o verbs.OOBParams) error {
	ip := netip.AddrFrom16(peer.GID).Unmap()
	mine := e.dev.Adapter.LocalAddress()
	if ip.Is4() != mine.Is4() || ip.IsUnspecified() {
		return fmt.Errorf("peer's GID %v is not an address of our adapter's family (ours %v): %w", netip.AddrFrom16(peer.GID), mine, verbs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ah, err := e.dev.Adapter.UDDestinationTo(ip, peer.QPN, e.udQKey)
	if err != nil {
		return fmt.Errorf("address of %v: %w", ip, err)
	}
	if e.udQKey != 0 {
		// A UD endpoint sends its datagrams to the peer's QP from now on
		// (perftest's ibv_create_ah from the RTR's address vector).
		e.ud = &ah
		return nil
	}
	retry, rnr := o.RetryCount, o.RNRRetry
	err = e.qp.ConnectOOB(ndk.Endpoint{IP: ip, MAC: ah.MAC[:], QPN: peer.QPN, PSN: peer.PSN}, ndk.ConnectOptions{
		PathMTU:          o.MTU,
		InboundReadLimit: max(o.InboundReads, 1), OutboundReadLimit: max(o.OutboundReads, 1),
		AckTimeout:  o.AckTimeout,
		RetryCount:  &retry,
		RNRRetry:    &rnr,
		MinRNRTimer: o.MinRNRTimer,
	})
	if err != nil {
		return fmt.Errorf("connect to QP %#x at %v: %w", peer.QPN, ip, err)
	}
	e.Connected(nil)
	return nil
}
