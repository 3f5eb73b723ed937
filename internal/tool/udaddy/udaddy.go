// Package udaddy is librdmacm's udaddy over ndkxdp's UD extension: a
// client resolves the server's UD QP through rdma_cm's SIDR (RDMA_PS_UDP,
// port 7174 by default), sends Count datagrams of Size bytes, each a SEND
// with immediate naming its QPN, and waits for as many answers; the server
// serves the port, receives Count datagrams, answers the sender the first
// one's GRH and immediate name (ibv_create_ah_from_wc) with Count
// datagrams of its own, and waits for their completions. Either side may
// be Linux udaddy (rdma-core librdmacm/examples/udaddy.c), whose output
// lines both print.
//
// -c (Connections) makes the client resolve the port that many times,
// each from a UD QP of its own that sends Count datagrams and waits for
// Count answers; the server answers each resolution with its one QP
// (where udaddy's server makes a QP a request), waits for Count
// datagrams from each of Connections senders (told apart by the QPN
// their immediate names) and answers each with Count. -P ipoib is not
// served. -t (TOS)
// is the adapter's traffic class (ndkxdp udaddy -t): every datagram of
// the side carries it, but for the server's answers, which take the
// request's DSCP and ECN as the address handle ibv_create_ah_from_wc
// makes does (ndk.Adapter.UDReplyTo).
//
// Example:
//
//	st, err := udaddy.RunClient(ctx, adapter, netip.MustParseAddrPort("198.18.0.2:7174"), udaddy.Config{}, os.Stdout)
package udaddy

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// Defaults as udaddy's.
const (
	DefaultPort  = 7174
	DefaultCount = 10
	DefaultSize  = 100
)

// Config is a run's parameters; zero fields take udaddy's defaults.
type Config struct {
	Count, Size int
	// Connections is -c; 0 means 1.
	Connections int
	// Serving, if set, hears that a server serves its port.
	Serving func()
}

func (c *Config) fill() {
	if c.Count == 0 {
		c.Count = DefaultCount
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Connections == 0 {
		c.Connections = 1
	}
}

// MaxConnections bounds -c.
const MaxConnections = 64

// Stats is what a run saw.
type Stats struct {
	Sent, Received int
	// Peer is the UD QP the datagrams went to; PeerAddr where the
	// received ones came from (their GRH).
	Peer     ndk.UDDestination
	PeerAddr netip.Addr
}

// node is one side's UD QP and its memory: Count receive buffers of Size
// plus the GRH, and one send buffer.
type node struct {
	a       *ndk.Adapter
	pd      *ndk.PD
	cq      *ndk.CQ
	qp      *ndk.QP
	recv    []byte
	send    []byte
	rmr     *ndk.MR
	smr     *ndk.MR
	cfg     Config
	slot    int // receive buffer size
	results [8]ndk.ResultEx
	// early holds receive completions polled while sends were awaited:
	// sends and receives share the CQ, as in rdma-core's udaddy, and a
	// peer's answer can complete before our last send's completion is
	// seen (through a daemon, whose relay hands both over in its turns).
	early []ndk.ResultEx
}

// newNode makes a node for peers senders: Count receives and sends for
// each.
func newNode(a *ndk.Adapter, cfg Config, peers int) (*node, error) {
	n := &node{a: a, cfg: cfg, slot: cfg.Size + ndk.UDGRHSize}
	depth := cfg.Count * peers
	var err error
	if n.pd, err = a.CreatePD(); err != nil {
		return nil, err
	}
	if n.cq, err = a.CreateCQ(2*depth, nil); err != nil {
		n.close()
		return nil, err
	}
	if n.qp, err = n.pd.CreateUDQP(ndk.QPConfig{ReceiveCQ: n.cq, InitiatorCQ: n.cq,
		ReceiveQueueDepth: depth, InitiatorQueueDepth: depth, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}, ndk.RDMAUDPQKey); err != nil {
		n.close()
		return nil, err
	}
	if max := int(n.qp.UDMaxMessage()); cfg.Size > max {
		n.close()
		return nil, fmt.Errorf("udaddy: message_size %d is larger than active mtu %d", cfg.Size, max)
	}
	// Adapter.Memory: Go memory in process, memory the daemon maps
	// through one.
	if n.recv, err = a.Memory(depth * n.slot); err == nil {
		n.send, err = a.Memory(cfg.Size)
	}
	if err != nil {
		n.close()
		return nil, err
	}
	for i := range n.send {
		n.send[i] = byte(i)
	}
	if n.rmr, err = n.pd.RegisterMR(n.recv, ndk.MRFlagAllowLocalWrite); err != nil {
		n.close()
		return nil, err
	}
	if n.smr, err = n.pd.RegisterMR(n.send, 0); err != nil {
		n.close()
		return nil, err
	}
	for i := 0; i < depth; i++ {
		sge, err := n.rmr.SGE(i*n.slot, n.slot)
		if err == nil {
			err = n.qp.Receive(i, []ndk.SGE{sge})
		}
		if err != nil {
			n.close()
			return nil, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return n, nil
}

func (n *node) close() {
	if n.qp != nil {
		_ = n.qp.Close()
	}
	for _, m := range []*ndk.MR{n.smr, n.rmr} {
		if m != nil {
			_ = m.Deregister()
		}
	}
	if n.cq != nil {
		n.cq.Close()
	}
	if n.pd != nil {
		n.pd.Close()
	}
}

// sendAll sends Count datagrams to d, each naming our QPN in its
// immediate, and waits for their completions.
func (n *node) sendAll(ctx context.Context, d ndk.UDDestination) error {
	sge, err := n.smr.SGE(0, n.cfg.Size)
	if err != nil {
		return err
	}
	for i := 0; i < n.cfg.Count; i++ {
		if err := n.qp.SendToWithImmediate(i, []ndk.SGE{sge}, d, n.qp.QPN(), 0); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return n.poll(ctx, n.cfg.Count, ndk.OpSend, nil)
}

// poll waits for want completions of type typ, handing each receive's
// buffer to got. A receive completion that comes while sends are awaited
// is kept for the receive phase (rdma-core's udaddy polls the shared CQ
// for a count of completions of either type); any other type is an error.
func (n *node) poll(ctx context.Context, want int, typ ndk.OperationType, got func(buf []byte, r *ndk.ResultEx) error) error {
	done := 0
	if typ == ndk.OpReceive {
		early := n.early
		n.early = nil
		for i := range early {
			if err := n.take(&early[i], typ, got, &done); err != nil {
				return err
			}
		}
	}
	for done < want {
		k := n.cq.GetResultsEx(n.results[:])
		if k == 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("udaddy: %d of %d completions: %w", done, want, ctx.Err())
			case <-time.After(50 * time.Microsecond):
			}
			continue
		}
		for i := 0; i < k; i++ {
			if err := n.take(&n.results[i], typ, got, &done); err != nil {
				return err
			}
		}
	}
	return nil
}

// take is poll's handling of one completion r while completions of type
// typ are awaited: counted in done, a receive's buffer handed to got, or
// a receive kept for later while sends are awaited.
func (n *node) take(r *ndk.ResultEx, typ ndk.OperationType, got func(buf []byte, r *ndk.ResultEx) error, done *int) error {
	if r.Status != ndk.StatusSuccess {
		return fmt.Errorf("udaddy: completion failed: status %#x", uint32(r.Status))
	}
	if r.Type != typ {
		if typ == ndk.OpSend && r.Type == ndk.OpReceive && len(n.early) < n.cfg.Count*max(n.cfg.Connections, 1) {
			n.early = append(n.early, *r)
			return nil
		}
		return fmt.Errorf("udaddy: completion of type %v, want %v", r.Type, typ)
	}
	if got != nil {
		slot := r.RequestContext.(int)
		if err := got(n.recv[slot*n.slot:(slot+1)*n.slot], r); err != nil {
			return err
		}
	}
	*done++
	return nil
}

// RunClient is `udaddy -s ADDR`: resolve dst's UD QP (from each of
// Connections QPs), send, receive the answers.
func RunClient(ctx context.Context, a *ndk.Adapter, dst netip.AddrPort, cfg Config, out io.Writer) (Stats, error) {
	cfg.fill()
	var st Stats
	fmt.Fprintln(out, "udaddy: starting client")
	nodes := make([]*node, 0, cfg.Connections)
	defer func() {
		for _, n := range nodes {
			n.close()
		}
	}()
	for range cfg.Connections {
		n, err := newNode(a, cfg, 1)
		if err != nil {
			return st, err
		}
		nodes = append(nodes, n)
	}
	fmt.Fprintln(out, "udaddy: connecting")
	peers := make([]ndk.UDDestination, len(nodes))
	for i := range nodes {
		var err error
		if peers[i], err = a.ResolveUD(ctx, dst); err != nil {
			return st, fmt.Errorf("udaddy: resolving %v: %w", dst, err)
		}
	}
	st.Peer = peers[0]
	fmt.Fprintln(out, "initiating data transfers")
	for i, n := range nodes {
		if err := n.sendAll(ctx, peers[i]); err != nil {
			return st, err
		}
		st.Sent += cfg.Count
	}
	fmt.Fprintln(out, "receiving data transfers")
	for i, n := range nodes {
		peer := peers[i]
		if err := n.poll(ctx, cfg.Count, ndk.OpReceive, func(buf []byte, r *ndk.ResultEx) error {
			st.PeerAddr = ndk.UDSource(buf)
			switch {
			case int(r.BytesTransferred) != ndk.UDGRHSize+cfg.Size:
				return fmt.Errorf("udaddy: received %d bytes, want %d and the GRH", r.BytesTransferred, cfg.Size)
			case r.TypeSpecificCompletionOutput != uint64(peer.QPN) || st.PeerAddr != peer.IP:
				return fmt.Errorf("udaddy: datagram from QPN %#x at %v, want %#x at %v", r.TypeSpecificCompletionOutput, st.PeerAddr, peer.QPN, peer.IP)
			}
			st.Received++
			return nil
		}); err != nil {
			return st, err
		}
	}
	fmt.Fprintln(out, "data transfers complete")
	fmt.Fprintln(out, "test complete")
	return st, nil
}

// sender is a client QP the server answers.
type sender struct {
	ip  netip.Addr
	qpn uint32
}

// RunServer is `udaddy` (server): serve local's port with a UD QP,
// receive Count datagrams from each of Connections senders, answer each
// with Count of our own.
func RunServer(ctx context.Context, a *ndk.Adapter, local netip.AddrPort, cfg Config, out io.Writer) (Stats, error) {
	cfg.fill()
	var st Stats
	fmt.Fprintln(out, "udaddy: starting server")
	n, err := newNode(a, cfg, cfg.Connections)
	if err != nil {
		return st, err
	}
	defer n.close()
	svc, err := a.ServeUD(local, n.qp)
	if err != nil {
		return st, err
	}
	defer svc.Close()
	if cfg.Serving != nil {
		cfg.Serving()
	}
	fmt.Fprintln(out, "receiving data transfers")
	counts := map[sender]int{}
	var replies []ndk.UDDestination
	if err := n.poll(ctx, cfg.Count*cfg.Connections, ndk.OpReceive, func(buf []byte, r *ndk.ResultEx) error {
		if int(r.BytesTransferred) != ndk.UDGRHSize+cfg.Size {
			return fmt.Errorf("udaddy: received %d bytes, want %d and the GRH", r.BytesTransferred, cfg.Size)
		}
		// udaddy answers the QPN the immediate names (create_reply_ah);
		// the source QPN when there is none.
		qpn := uint32(r.TypeSpecificCompletionOutput)
		if r.Flags&ndk.ResultWithImmediate != 0 {
			qpn = r.Immediate
		}
		from := sender{ndk.UDSource(buf), qpn}
		if _, seen := counts[from]; !seen {
			if len(replies) == cfg.Connections {
				return fmt.Errorf("udaddy: datagrams from more than %d senders (-c): %v is one more", cfg.Connections, from)
			}
			d, err := a.UDReplyTo(buf[:ndk.UDGRHSize], qpn, n.qp.UDQKey())
			if err != nil {
				return fmt.Errorf("udaddy: failed to create reply AH: %w", err)
			}
			replies = append(replies, d)
		}
		counts[from]++
		st.Received++
		return nil
	}); err != nil {
		return st, err
	}
	for from, k := range counts {
		if k != cfg.Count {
			return st, fmt.Errorf("udaddy: %d datagrams from QPN %#x at %v, want %d from each of %d senders", k, from.qpn, from.ip, cfg.Count, cfg.Connections)
		}
	}
	st.Peer = replies[0]
	st.PeerAddr = st.Peer.IP
	fmt.Fprintln(out, "sending replies")
	for _, d := range replies {
		if err := n.sendAll(ctx, d); err != nil {
			return st, err
		}
		st.Sent += cfg.Count
	}
	fmt.Fprintln(out, "data transfers complete")
	fmt.Fprintln(out, "test complete")
	return st, nil
}
