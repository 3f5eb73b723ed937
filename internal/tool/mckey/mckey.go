// Package mckey is librdmacm's mckey over ndkxdp's UD multicast: each of
// Connections UD QPs (rdma_cm's RDMA_PS_UDP, Q_Key RDMA_UDP_QKEY) joins
// the multicast group; after a pause a sender sends Count datagrams of
// Size bytes to the group, each a SEND with immediate naming its QPN,
// and a receiver waits for Count of them on each of its QPs. Either side
// may be Linux mckey (rdma-core librdmacm/examples/mckey.c), whose
// output lines both print; the receiver is started first, since nothing
// resends a datagram nobody had joined for.
//
// As mckey, the sender joins the group too unless SendOnly (-o, a
// send-only full member, which joins nothing on the wire and takes no
// datagrams). A RoCE group has no LID and no service level: the join
// line names the group's GID (an IPv4 group as ::ffff:a.b.c.d), mlid 0
// and sl 0, as rdma_cm reports for RoCE.
//
// Example:
//
//	st, err := mckey.Run(ctx, adapter, mckey.Config{Group: netip.MustParseAddr("239.1.2.3")}, os.Stdout)
package mckey

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// Defaults as mckey's.
const (
	DefaultCount = 10
	DefaultSize  = 100
	// MaxConnections bounds -c.
	MaxConnections = 64
	// DefaultPause is mckey's pause between the join and the data
	// transfers ("to give SM chance to configure switches").
	DefaultPause = 3 * time.Second
)

// Config is a run's parameters; zero fields take mckey's defaults.
type Config struct {
	Group    netip.Addr
	Sender   bool
	SendOnly bool
	// NoLoopback is mckey's -l: the QPs do not take their own datagrams
	// (ndk.QPConfig.BlockSelfMulticastLoopback).
	NoLoopback  bool
	Connections int
	Count, Size int
	// Pause replaces DefaultPause where non-zero.
	Pause time.Duration
	// Joined, if set, hears that every QP joined (before the pause).
	Joined func()
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
	if c.Pause == 0 {
		c.Pause = DefaultPause
	}
}

// Stats is what a run saw.
type Stats struct {
	Sent, Received int
	// From is the address the last datagram received came from (its GRH).
	From netip.Addr
}

// node is one QP with its PD, CQ and memory: Count receive buffers of
// Size plus the GRH, one send buffer.
type node struct {
	pd      *ndk.PD
	cq      *ndk.CQ
	qp      *ndk.QP
	mem     []byte
	mr      *ndk.MR
	slot    int
	joined  bool
	results [8]ndk.ResultEx
}

func newNode(a *ndk.Adapter, cfg Config) (*node, error) {
	n := &node{slot: cfg.Size + ndk.UDGRHSize}
	var err error
	if n.pd, err = a.CreatePD(); err != nil {
		return nil, err
	}
	if n.cq, err = a.CreateCQ(2*cfg.Count, nil); err != nil {
		n.close(cfg)
		return nil, fmt.Errorf("mckey: unable to create CQ: %w", err)
	}
	if n.qp, err = n.pd.CreateUDQP(ndk.QPConfig{ReceiveCQ: n.cq, InitiatorCQ: n.cq, ReceiveQueueDepth: cfg.Count,
		InitiatorQueueDepth: cfg.Count, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1,
		BlockSelfMulticastLoopback: cfg.NoLoopback}, ndk.RDMAUDPQKey); err != nil {
		n.close(cfg)
		return nil, fmt.Errorf("mckey: unable to create QP: %w", err)
	}
	if n.mem, err = a.Memory(cfg.Count*n.slot + cfg.Size); err == nil {
		n.mr, err = n.pd.RegisterMR(n.mem, ndk.MRFlagAllowLocalWrite)
	}
	if err != nil {
		n.close(cfg)
		return nil, fmt.Errorf("mckey: failed to create messages: %w", err)
	}
	if !cfg.Sender {
		for i := 0; i < cfg.Count; i++ {
			sge, err := n.mr.SGE(i*n.slot, n.slot)
			if err == nil {
				err = n.qp.Receive(i, []ndk.SGE{sge})
			}
			if err != nil {
				n.close(cfg)
				return nil, fmt.Errorf("failed to post receives: %w", err)
			}
		}
	}
	return n, nil
}

func (n *node) close(cfg Config) {
	if n.qp != nil {
		_ = n.qp.Close()
	}
	if n.mr != nil {
		_ = n.mr.Deregister()
	}
	if n.cq != nil {
		n.cq.Close()
	}
	if n.pd != nil {
		n.pd.Close()
	}
}

// Run is mckey: join, pause, send or receive, leave.
func Run(ctx context.Context, a *ndk.Adapter, cfg Config, out io.Writer) (Stats, error) {
	cfg.fill()
	var st Stats
	group := cfg.Group.Unmap()
	dest, err := ndk.MulticastDestination(group, ndk.RDMAUDPQKey)
	if err != nil {
		return st, err
	}
	role := "server"
	if cfg.Sender {
		role = "client"
	}
	fmt.Fprintf(out, "mckey: starting %s\n", role)
	if mtu := a.PathMTU(); cfg.Size > mtu {
		return st, fmt.Errorf("mckey: message_size %d is larger than active mtu %d", cfg.Size, mtu)
	}
	fmt.Fprintln(out, "mckey: joining")
	nodes := make([]*node, 0, cfg.Connections)
	defer func() {
		for _, n := range nodes {
			if n.joined {
				if err := n.qp.LeaveMulticast(group); err != nil {
					fmt.Fprintf(out, "mckey: failure leaving: %v\n", err)
				}
			}
			n.close(cfg)
		}
	}()
	for i := 0; i < cfg.Connections; i++ {
		n, err := newNode(a, cfg)
		if err != nil {
			return st, err
		}
		nodes = append(nodes, n)
		if !cfg.SendOnly {
			if err := n.qp.JoinMulticast(group); err != nil {
				return st, fmt.Errorf("mckey: failure joining: %w", err)
			}
			n.joined = true
		}
		fmt.Fprintf(out, "mckey: joined dgid: %s mlid 0x0 sl 0\n", gid(group))
	}
	if cfg.Joined != nil {
		cfg.Joined()
	}
	select {
	case <-ctx.Done():
		return st, ctx.Err()
	case <-time.After(cfg.Pause):
	}
	if cfg.Sender {
		fmt.Fprintln(out, "initiating data transfers")
		for _, n := range nodes {
			sge, err := n.mr.SGE(cfg.Count*n.slot, cfg.Size)
			if err != nil {
				return st, err
			}
			for i := 0; i < cfg.Count; i++ {
				if err := n.qp.SendToWithImmediate(i, []ndk.SGE{sge}, dest, n.qp.QPN(), 0); err != nil {
					return st, fmt.Errorf("failed to post sends: %w", err)
				}
			}
			// mckey posts its sends unsignaled and destroys the QP;
			// waiting for their completions makes sure they left.
			if err := n.poll(ctx, cfg.Count, ndk.OpSend, nil); err != nil {
				return st, err
			}
			st.Sent += cfg.Count
		}
	} else {
		fmt.Fprintln(out, "receiving data transfers")
		for _, n := range nodes {
			err := n.poll(ctx, cfg.Count, ndk.OpReceive, func(buf []byte, r *ndk.ResultEx) {
				st.Received++
				st.From = ndk.UDSource(buf)
			})
			if err != nil {
				return st, err
			}
		}
	}
	fmt.Fprintln(out, "data transfers complete")
	return st, nil
}

// gid is the group's GID as rdma_cm gives RoCEv2 (an IPv4 group mapped,
// inet_ntop's AF_INET6 text).
func gid(group netip.Addr) string {
	return netip.AddrFrom16(group.As16()).String()
}

// poll waits for want completions of type typ.
func (n *node) poll(ctx context.Context, want int, typ ndk.OperationType, got func(buf []byte, r *ndk.ResultEx)) error {
	for done := 0; done < want; {
		k := n.cq.GetResultsEx(n.results[:])
		if k == 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("mckey: %d of %d %v completions: %w", done, want, typ, ctx.Err())
			case <-time.After(50 * time.Microsecond):
			}
			continue
		}
		for i := 0; i < k; i++ {
			r := &n.results[i]
			if r.Status != ndk.StatusSuccess || r.Type != typ {
				return fmt.Errorf("mckey: completion %v with status %#x, want %v", r.Type, uint32(r.Status), typ)
			}
			if got != nil {
				slot := r.RequestContext.(int)
				got(n.mem[slot*n.slot:(slot+1)*n.slot], r)
			}
			done++
		}
	}
	return nil
}
