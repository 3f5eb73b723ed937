// Package cmatose is the protocol logic of `ndkxdp ucmatose`: a client
// and a server that speak librdmacm's ucmatose (rdma-core
// librdmacm/examples/cmatose.c) over any verbs.Endpoint.
//
// The protocol, as cmatose.c runs it over -c RC connections set up by
// rdma_cm (port 7471 by default, RDMA_PS_TCP):
//
//   - Each connection's QP has send and receive queues of -C (message
//     count, 10) entries and one buffer of -S bytes (message size, 100);
//     every send is signaled (sq_sig_all). Both sides post -C receives
//     of the buffer before rdma_connect / rdma_accept. The client
//     connects with responder_resources 1, initiator_depth 1 and
//     retry_count 5; the server accepts with rdma_cm's defaults.
//   - Once every connection is established, the server posts -C SENDs
//     of -S bytes on each, waits for their completions, then for -C
//     receives on each. The client waits for -C receives on each, then
//     posts -C SENDs on each (not waiting for their completions).
//   - The server then disconnects every connection and waits for the
//     disconnects to complete; the client waits for the server's
//     disconnect of each and answers it.
//   - -S 0 or -C 0 moves no data: the sides connect and disconnect.
//
// Both print cmatose.c's progress lines and its "test complete" and
// "return status %d" (Lines).
package cmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Defaults of cmatose.c.
const (
	DefaultPort        = 7471
	DefaultConnections = 1
	DefaultCount       = 10
	DefaultSize        = 100
	// MaxCount bounds -C: each connection's queues hold that many.
	MaxCount = 4096
	// MaxConnections bounds -c.
	MaxConnections = 1024
	// MaxSize bounds -S, a SEND's length.
	MaxSize = 1 << 20
)

// Config is a run's parameters.
type Config struct {
	Connections int // -c
	Count       int // -C
	Size        int // -S
}

// Fill takes cmatose.c's defaults for zero fields (-S 0 and -C 0 are
// given as -1) and checks the bounds.
func (c *Config) Fill() error {
	if c.Connections == 0 {
		c.Connections = DefaultConnections
	}
	if c.Count == 0 {
		c.Count = DefaultCount
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Count < 0 {
		c.Count = 0
	}
	if c.Size < 0 {
		c.Size = 0
	}
	switch {
	case c.Connections < 1 || c.Connections > MaxConnections:
		return fmt.Errorf("ucmatose: -c %d: 1 to %d connections: %w", c.Connections, MaxConnections, verbs.ErrInvalid)
	case c.Count > MaxCount:
		return fmt.Errorf("ucmatose: -C %d: at most %d messages: %w", c.Count, MaxCount, verbs.ErrInvalid)
	case c.Size > MaxSize:
		return fmt.Errorf("ucmatose: -S %d: at most %d bytes: %w", c.Size, MaxSize, verbs.ErrInvalid)
	}
	if c.Size == 0 {
		c.Count = 0 // create_message: no size, no messages
	}
	return nil
}

// node is one connection and its buffer.
type node struct {
	ep  verbs.Endpoint
	seg verbs.Segment
	buf [8]verbs.Completion
	// sends and recvs count the completions seen so far.
	sends, recvs int
	idle         verbs.Backoff
}

// prepare registers the buffer and posts the receives (init_node,
// post_recvs), before the connection is established.
func (n *node) prepare(cfg Config) func(verbs.Endpoint) error {
	return func(ep verbs.Endpoint) error {
		n.ep = ep
		if cfg.Count == 0 {
			return nil
		}
		b, err := ep.Alloc(cfg.Size)
		if err != nil {
			return fmt.Errorf("failed message allocation: %w", err)
		}
		r, err := ep.Register(b, verbs.AccessLocalWrite)
		if err != nil {
			return fmt.Errorf("failed to reg MR: %w", err)
		}
		n.seg, _ = r.Seg(0, cfg.Size)
		for i := 0; i < cfg.Count; i++ {
			if err := ep.Receive(uint64(i), n.seg); err != nil {
				return fmt.Errorf("failed to post receives: %w", err)
			}
		}
		return nil
	}
}

// postSends is post_sends: Count signaled SENDs of the buffer.
func (n *node) postSends(cfg Config) error {
	for i := 0; i < cfg.Count; i++ {
		if err := n.ep.Send(uint64(i), n.seg, true); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// await waits until Count successful completions of op have come
// (poll_cqs for one CQ). cmatose.c's sends and receives complete on two
// CQs; here they share Poll, so completions of the other kind that come
// meanwhile are counted for their own wait. A failed one is an error.
func (n *node) await(ctx context.Context, cfg Config, op verbs.Op) error {
	for n.count(op) < cfg.Count {
		k, err := n.ep.Poll(n.buf[:])
		if err != nil {
			return fmt.Errorf("failed polling CQ after %d of %d %vs: %w", n.count(op), cfg.Count, op, err)
		}
		if k == 0 {
			if err := n.idle.Idle(ctx, n.ep); err != nil {
				return fmt.Errorf("failed polling CQ after %d of %d %vs: %w", n.count(op), cfg.Count, op, err)
			}
			continue
		}
		n.idle.Reset()
		for _, c := range n.buf[:k] {
			switch {
			case c.Err != nil:
				return fmt.Errorf("%v failed: %w", c.Op, c.Err)
			case c.Op == verbs.OpReceive:
				if c.Bytes != cfg.Size {
					return fmt.Errorf("received %d bytes, sent %d", c.Bytes, cfg.Size)
				}
				n.recvs++
			case c.Op == verbs.OpSend:
				n.sends++
			default:
				return fmt.Errorf("%v completion while waiting for %vs", c.Op, op)
			}
		}
	}
	return nil
}

func (n *node) count(op verbs.Op) int {
	if op == verbs.OpSend {
		return n.sends
	}
	return n.recvs
}

// awaitDisconnect drains the endpoint until the peer's disconnect.
func (n *node) awaitDisconnect(ctx context.Context) error {
	for {
		k, err := n.ep.Poll(n.buf[:])
		switch {
		case errors.Is(err, verbs.ErrDisconnected):
			return nil
		case err != nil:
			return err
		}
		for _, c := range n.buf[:k] {
			if c.Err != nil && !errors.Is(c.Err, verbs.ErrFlushed) {
				return fmt.Errorf("%v failed: %w", c.Op, c.Err)
			}
		}
		if k == 0 {
			if err := n.idle.Idle(ctx, n.ep); err != nil {
				return fmt.Errorf("waiting for the server's disconnect: %w", err)
			}
		}
	}
}

// closeAll closes the endpoints at once (each close waits for its DREP).
func closeAll(nodes []*node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n.ep != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.ep.Close()
			}()
		}
	}
	wg.Wait()
}

// connParams are the client's rdma_conn_param (route_handler).
func connParams(n *node, cfg Config) verbs.ConnParams {
	return verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5, Prepare: n.prepare(cfg)}
}

// RunServer is `ucmatose` without -s: it accepts cfg.Connections
// connections on l, sends, receives the replies and disconnects. It
// prints cmatose.c's lines to out, "return status" last.
func RunServer(ctx context.Context, cfg Config, l verbs.Listener, out io.Writer) error {
	if err := cfg.Fill(); err != nil {
		return err
	}
	fmt.Fprintln(out, "cmatose: starting server")
	err := runServer(ctx, cfg, l, out)
	return finish(out, err)
}

func runServer(ctx context.Context, cfg Config, l verbs.Listener, out io.Writer) error {
	nodes := make([]*node, cfg.Connections)
	defer closeAll(nodes)
	for i := range nodes {
		n := &node{}
		nodes[i] = n
		// rdma_accept(id, NULL): rdma_cm's defaults.
		ep, err := l.Accept(ctx, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, Prepare: n.prepare(cfg)})
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		n.ep = ep
	}
	if cfg.Count > 0 {
		fmt.Fprintln(out, "initiating data transfers")
		for _, n := range nodes {
			if err := n.postSends(cfg); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "completing sends")
		for _, n := range nodes {
			if err := n.await(ctx, cfg, verbs.OpSend); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "receiving data transfers")
		for _, n := range nodes {
			if err := n.await(ctx, cfg, verbs.OpReceive); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "data transfers complete")
	}
	fmt.Fprintln(out, "cmatose: disconnecting")
	closeAll(nodes)
	fmt.Fprintln(out, "disconnected")
	return nil
}

// RunClient is `ucmatose -s SERVER`: it opens cfg.Connections
// connections to port through c, receives, replies, and waits for the
// server's disconnects. It prints cmatose.c's lines to out.
func RunClient(ctx context.Context, cfg Config, c verbs.Connector, port uint16, out io.Writer) error {
	if err := cfg.Fill(); err != nil {
		return err
	}
	fmt.Fprintln(out, "cmatose: starting client")
	err := runClient(ctx, cfg, c, port, out)
	return finish(out, err)
}

func runClient(ctx context.Context, cfg Config, c verbs.Connector, port uint16, out io.Writer) error {
	fmt.Fprintln(out, "cmatose: connecting")
	nodes := make([]*node, cfg.Connections)
	defer closeAll(nodes)
	for i := range nodes {
		n := &node{}
		nodes[i] = n
		ep, err := c.Connect(ctx, port, connParams(n, cfg))
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		n.ep = ep
	}
	if cfg.Count > 0 {
		fmt.Fprintln(out, "receiving data transfers")
		for _, n := range nodes {
			if err := n.await(ctx, cfg, verbs.OpReceive); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "sending replies")
		for _, n := range nodes {
			if err := n.postSends(cfg); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "data transfers complete")
	}
	for i, n := range nodes {
		if err := n.awaitDisconnect(ctx); err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
	}
	return nil
}

// finish prints main()'s last lines: "return status" is 0 or, as
// cmatose.c's negative errno is not ours to give, -1.
func finish(out io.Writer, err error) error {
	fmt.Fprintln(out, "test complete")
	status := 0
	if err != nil {
		status = -1
	}
	fmt.Fprintf(out, "return status %d\n", status)
	if err != nil {
		return fmt.Errorf("ucmatose: %w", err)
	}
	return nil
}
