// Package rdmaecho is the protocol logic of `ndkxdp rdma_server` and
// `ndkxdp rdma_client`: librdmacm's smallest examples (rdma-core
// librdmacm/examples/rdma_server.c, rdma_client.c) over any
// verbs.Endpoint.
//
// One RC connection through rdma_cm (port 7471 by default, RDMA_PS_TCP,
// rdma_connect and rdma_accept with rdma_cm's defaults), queues of one
// request each, every send signaled. Each side posts one 16-byte
// receive before it connects or accepts. The client SENDs 16 zero bytes
// and waits for that send's completion, then for its receive; the
// server waits for its receive, then SENDs 16 zero bytes and waits for
// the completion. Each then disconnects. Both print "NAME: start" and
// "NAME: end STATUS" around the run, STATUS 0 on success.
//
// rdma_xserver and rdma_xclient (rdma_xserver.c, rdma_xclient.c) in their
// default RC mode are the same connection with one SEND, the client's:
// the server accepts with 4 bytes of private data (the SRQ number of the
// XRC mode, zero) and disconnects once it has received. Their XRC mode
// (-c x) is not served: ndkxdp has no XRC.
package rdmaecho

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// DefaultPort is the examples' port.
const DefaultPort = 7471

// MsgLen is the examples' message: static uint8_t send_msg[16].
const MsgLen = 16

// side is one end's buffers and the wait for completions.
type side struct {
	ep         verbs.Endpoint
	send, recv verbs.Segment
	buf        [4]verbs.Completion
	sent, got  bool
	idle       verbs.Backoff
	// sendOnly: no receive is posted (rdma_xclient posts none, and the
	// server's disconnect would flush one).
	sendOnly bool
}

// prepare registers the two messages and posts the receive (rdma_reg_msgs,
// rdma_post_recv), before the connection is established.
func (s *side) prepare(ep verbs.Endpoint) error {
	s.ep = ep
	b, err := ep.Alloc(2 * MsgLen)
	if err != nil {
		return fmt.Errorf("rdma_reg_msgs: %w", err)
	}
	r, err := ep.Register(b, verbs.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("rdma_reg_msgs: %w", err)
	}
	s.send, _ = r.Seg(0, MsgLen)
	s.recv, _ = r.Seg(MsgLen, MsgLen)
	if s.sendOnly {
		return nil
	}
	if err := ep.Receive(1, s.recv); err != nil {
		return fmt.Errorf("rdma_post_recv: %w", err)
	}
	return nil
}

func (s *side) params() verbs.ConnParams {
	return verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, Prepare: s.prepare}
}

// wait polls until the send (op OpSend) or the receive has completed
// (rdma_get_send_comp, rdma_get_recv_comp); the other's completion may
// come first and is kept.
func (s *side) wait(ctx context.Context, op verbs.Op) error {
	done := func() bool {
		if op == verbs.OpSend {
			return s.sent
		}
		return s.got
	}
	for !done() {
		n, err := s.ep.Poll(s.buf[:])
		if err != nil {
			return fmt.Errorf("rdma_get_%s_comp: %w", compName(op), err)
		}
		for _, c := range s.buf[:n] {
			switch {
			case c.Err != nil:
				return fmt.Errorf("rdma_get_%s_comp: %v failed: %w", compName(op), c.Op, c.Err)
			case c.Op == verbs.OpSend:
				s.sent = true
			case c.Op == verbs.OpReceive:
				if c.Bytes != MsgLen {
					return fmt.Errorf("rdma_get_recv_comp: %d bytes received, want %d", c.Bytes, MsgLen)
				}
				s.got = true
			}
		}
		if n == 0 {
			if err := s.idle.Idle(ctx, s.ep); err != nil {
				return fmt.Errorf("rdma_get_%s_comp: %w", compName(op), err)
			}
		}
	}
	return nil
}

func compName(op verbs.Op) string {
	if op == verbs.OpSend {
		return "send"
	}
	return "recv"
}

func (s *side) post() error {
	if err := s.ep.Send(2, s.send, true); err != nil {
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	return nil
}

// RunServer is rdma_server: one connection accepted on l.
func RunServer(ctx context.Context, l verbs.Listener, out io.Writer) error {
	return serve(ctx, l, out, "rdma_server", nil, true)
}

// RunXServer is rdma_xserver with its default -c r (RC): rdma_server's
// accept, with the 4 bytes of private data its XRC mode fills with the
// SRQ number (zero for RC), then one receive and no answer.
func RunXServer(ctx context.Context, l verbs.Listener, out io.Writer) error {
	return serve(ctx, l, out, "rdma_xserver", make([]byte, 4), false)
}

func serve(ctx context.Context, l verbs.Listener, out io.Writer, name string, private []byte, answer bool) error {
	fmt.Fprintf(out, "%s: start\n", name)
	err := func() error {
		s := &side{}
		p := s.params()
		p.PrivateData = private
		ep, err := l.Accept(ctx, p)
		if err != nil {
			return fmt.Errorf("rdma_get_request: %w", err)
		}
		defer ep.Close() // rdma_disconnect
		if err := s.wait(ctx, verbs.OpReceive); err != nil {
			return err
		}
		if !answer {
			return nil
		}
		if err := s.post(); err != nil {
			return err
		}
		return s.wait(ctx, verbs.OpSend)
	}()
	return end(out, name, err)
}

// RunClient is rdma_client: one connection to port through c.
func RunClient(ctx context.Context, c verbs.Connector, port uint16, out io.Writer) error {
	return connect(ctx, c, port, out, "rdma_client", true)
}

// RunXClient is rdma_xclient with its default -c r (RC): rdma_client's
// connection and SEND, and no answer to wait for.
func RunXClient(ctx context.Context, c verbs.Connector, port uint16, out io.Writer) error {
	return connect(ctx, c, port, out, "rdma_xclient", false)
}

func connect(ctx context.Context, c verbs.Connector, port uint16, out io.Writer, name string, answered bool) error {
	fmt.Fprintf(out, "%s: start\n", name)
	err := func() error {
		s := &side{sendOnly: !answered}
		ep, err := c.Connect(ctx, port, s.params())
		if err != nil {
			return fmt.Errorf("rdma_connect: %w", err)
		}
		defer ep.Close() // rdma_disconnect
		if err := s.post(); err != nil {
			return err
		}
		if err := s.wait(ctx, verbs.OpSend); err != nil {
			return err
		}
		if !answered {
			return nil
		}
		return s.wait(ctx, verbs.OpReceive)
	}()
	return end(out, name, err)
}

// end prints main()'s last line: "end 0", or -1 (the examples print
// the failing call's return, which is -1 with errno set).
func end(out io.Writer, name string, err error) error {
	status := 0
	if err != nil {
		status = -1
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("interrupted: %w", err)
		}
	}
	fmt.Fprintf(out, "%s: end %d\n", name, status)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
