package perftest

import (
	"context"
	"fmt"
	"io"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// -c UD (perftest's connection type UD, v4.5-0.17 perftest_communication.c
// and perftest_resources.c): the control connection stays RC, and the
// data connection is made in rdma_cm's UDP port space on the same port
// (rdma_cm_allocate_nodes: RDMA_PS_UDP), that is SIDR: the client learns
// the server's QPN and Q_Key from the SIDR_REP and sends its datagrams
// there (rdma_cm_establish_ud_connection); the server accepts with its
// QPN. Every receive is UD_ADDITION (40) bytes longer than the message, for
// the GRH. A message is at most the path MTU: without -s the size becomes
// the MTU, with a larger -s the run is refused (check_mtu: "Max message
// size in UD cannot be greater than MTU"). ib_send_bw and ib_send_lat
// run; the latency test's server learns where to answer from a first
// 4-byte datagram the client sends once it resolved the server
// (rdma_cm_send_ud_connection_parameters; verbs.ConnParams.UDAnnounce).
// With -a the sizes run from 2 to the MTU. -b and --use-srq with UD are
// not built.

func (p *Params) normalizeUD() error {
	if !p.UD {
		return nil
	}
	switch {
	case p.Verb != Send:
		return fmt.Errorf("perftest: -c UD runs ib_send_bw and ib_send_lat only, not %v %s: %w", p.Verb, kindName(p.Kind), ErrUnsupported)
	case p.UseSRQ:
		return fmt.Errorf("perftest: -c UD with --use-srq: %w", ErrUnsupported)
	}
	// -a's buffer (MaxSize) shrinks to the MTU too, and its sizes stop
	// there (send_bw.c, send_lat.c: size_max_pow from the MTU for UD).
	p.udSizeIsMTU = p.udSizeIsMTU || p.Size == 0 || p.AllSizes
	return nil
}

// fitUD is check_mtu's UD rule, once the path MTU is agreed.
func (p *Params) fitUD(mtu int, out io.Writer) error {
	if !p.UD || p.Size <= mtu {
		return nil
	}
	if !p.udSizeIsMTU {
		return fmt.Errorf("max message size in UD cannot be greater than MTU %d (-s %d): %w", mtu, p.Size, verbs.ErrInvalid)
	}
	fmt.Fprintf(out, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu)
	p.Size = mtu
	return nil
}

// udConnector opens the data connection of -c UD through a
// verbs.UDConnector.
type udConnector struct{ c verbs.UDConnector }

func (u udConnector) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	return u.c.ConnectUD(ctx, port, p)
}

// dataConnector is what opens the data connection: c, or for -c UD its
// UD side.
func dataConnector(p *Params, c verbs.Connector) (verbs.Connector, error) {
	if !p.UD {
		return c, nil
	}
	uc, ok := c.(verbs.UDConnector)
	if !ok {
		return nil, fmt.Errorf("perftest: -c UD: %T has no UD endpoints: %w", c, ErrUnsupported)
	}
	return udConnector{uc}, nil
}

// dataAcceptor is what accepts the data connection: l.Accept, or for -c
// UD l's AcceptUD.
func dataAcceptor(p *Params, l verbs.Listener) (func(context.Context, verbs.ConnParams) (verbs.Endpoint, error), error) {
	if !p.UD {
		return l.Accept, nil
	}
	ul, ok := l.(verbs.UDListener)
	if !ok {
		return nil, fmt.Errorf("perftest: -c UD: %T has no UD endpoints: %w", l, ErrUnsupported)
	}
	return ul.AcceptUD, nil
}
