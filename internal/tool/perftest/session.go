package perftest

import (
	"context"
	"errors"
	"fmt"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// waiter collects completions of one endpoint without allocating.
type waiter struct {
	ep    verbs.Endpoint
	buf   [16]verbs.Completion
	queue []verbs.Completion
	idle  verbs.Backoff
}

// next returns the next completion, polling (verbs.Backoff) until one
// arrives or ctx ends.
func (w *waiter) next(ctx context.Context) (verbs.Completion, error) {
	for {
		if len(w.queue) > 0 {
			c := w.queue[0]
			w.queue = w.queue[1:]
			return c, nil
		}
		n, err := w.ep.Poll(w.buf[:])
		if err != nil {
			return verbs.Completion{}, err
		}
		if n > 0 {
			w.queue = w.buf[:n]
			w.idle.Reset()
			continue
		}
		if err := w.idle.Idle(ctx, w.ep); err != nil {
			return verbs.Completion{}, err
		}
	}
}

// wait returns the next completion of op; failed completions are errors.
func (w *waiter) wait(ctx context.Context, op verbs.Op) (verbs.Completion, error) {
	c, err := w.next(ctx)
	if err != nil {
		return c, fmt.Errorf("waiting for %v: %w", op, err)
	}
	if c.Err != nil {
		return c, fmt.Errorf("%v failed: %w", c.Op, c.Err)
	}
	if c.Op != op {
		return c, fmt.Errorf("%v completion while waiting for %v: %w", c.Op, op, ErrProtocol)
	}
	return c, nil
}

// control is the rdma_cm control connection of perftest (create_comm_struct:
// an RC QP with tx and rx depth 1 and one 56-byte buffer). Every message is
// one SEND that the sender waits to complete (rdma_write_data); the
// receiver reposts its single receive at once (rdma_read_data).
//
// Without -R (sock set) the same messages go over TCP (socket.go). oob,
// where set, makes the data QPs, connected out of band (without -R, and
// with -z).
type control struct {
	w      waiter
	client bool
	sock   *sockChannel
	oob    func(verbs.ConnParams) (verbs.OOB, error)
	send   verbs.Region
	recv   verbs.Region
	in     [DestLen]byte
}

const idControl = 1 // SYNC_SPEC_ID in perftest; any ID will do on our side

// prepareControl registers the buffers and posts the first receive, before
// the connection is established (rdma_client_connect, rdma_server_connect:
// post_one_recv_wqe before rdma_connect / rdma_accept).
func prepareControl(c *control) func(verbs.Endpoint) error {
	return func(ep verbs.Endpoint) error {
		c.w.ep = ep
		// One allocation for both: a daemon maps a bounded number of
		// memory segments per client.
		buf, err := ep.Alloc(2 * DestLen)
		if err != nil {
			return fmt.Errorf("allocate control buffers: %w", err)
		}
		if c.send, err = ep.Register(buf[:DestLen:DestLen], 0); err != nil {
			return fmt.Errorf("register control send buffer: %w", err)
		}
		if c.recv, err = ep.Register(buf[DestLen:], verbs.AccessLocalWrite); err != nil {
			return fmt.Errorf("register control receive buffer: %w", err)
		}
		return c.postRecv()
	}
}

func (c *control) postRecv() error {
	seg, _ := c.recv.Seg(0, DestLen)
	if err := c.w.ep.Receive(idControl, seg); err != nil {
		return fmt.Errorf("post control receive: %w", err)
	}
	return nil
}

func (c *control) sendMsg(ctx context.Context, b []byte) error {
	copy(c.send.Buf, b)
	seg, _ := c.send.Seg(0, len(b))
	if err := c.w.ep.Send(idControl, seg, true); err != nil {
		return fmt.Errorf("control send: %w", err)
	}
	if _, err := c.w.wait(ctx, verbs.OpSend); err != nil {
		return fmt.Errorf("control send: %w", err)
	}
	return nil
}

func (c *control) recvMsg(ctx context.Context, want int) ([]byte, error) {
	comp, err := c.w.wait(ctx, verbs.OpReceive)
	if err != nil {
		return nil, fmt.Errorf("control receive: %w", err)
	}
	n := copy(c.in[:], c.recv.Buf[:comp.Bytes])
	if err := c.postRecv(); err != nil {
		return nil, err
	}
	if n != want {
		return nil, fmt.Errorf("control message of %d bytes, expected %d: %w", n, want, ErrProtocol)
	}
	return c.in[:n], nil
}

// xchg is ctx_xchg_data: the client writes first, then reads; the server
// reads, then writes. It returns the peer's message (valid until the next call).
func (c *control) xchg(ctx context.Context, mine []byte) ([]byte, error) {
	if c.sock != nil {
		return c.sock.xchg(ctx, c.client, mine)
	}
	if c.client {
		if err := c.sendMsg(ctx, mine); err != nil {
			return nil, err
		}
		return c.recvMsg(ctx, len(mine))
	}
	theirs, err := c.recvMsg(ctx, len(mine))
	if err != nil {
		return nil, err
	}
	return theirs, c.sendMsg(ctx, mine)
}

// handshake is ctx_hand_shake over rdma_cm: one pingpong_dest each way.
func (c *control) handshake(ctx context.Context, mine *Dest) (Dest, error) {
	if c.sock != nil {
		return c.sock.handshake(ctx, c.client, mine)
	}
	var b [DestLen]byte
	if err := mine.Put(b[:]); err != nil {
		return Dest{}, err
	}
	theirs, err := c.xchg(ctx, b[:])
	if err != nil {
		return Dest{}, fmt.Errorf("handshake: %w", err)
	}
	return DecodeDest(theirs)
}

// closingHandshake is the last handshake of a test. Each side disconnects
// as soon as it is done with it (the client once it holds the server's
// message, the server once its own is sent), so the ACK of the last SEND
// either side makes may be lost for good: the peer is gone before a
// retransmission arrives. Depending on the transport, the disconnect then
// completes that SEND flushed or leaves it pending while Poll reports the
// disconnect. perftest's C code does not stop for that either. The
// client still needs the server's message; the server, once it has the
// client's, needs nothing more.
func (c *control) closingHandshake(ctx context.Context, mine *Dest) error {
	if c.sock != nil {
		return c.sock.closing(ctx, c.client, mine)
	}
	var b [DestLen]byte
	if err := mine.Put(b[:]); err != nil {
		return err
	}
	if !c.client {
		if _, err := c.recvMsg(ctx, len(b)); err != nil {
			return err
		}
	}
	return c.closingSend(ctx, b[:], c.client)
}

// closingSend sends msg and, with await, takes the peer's message too, in
// whichever order their completions come. The SEND may complete flushed,
// or never once the peer disconnected; a missing message is an error.
func (c *control) closingSend(ctx context.Context, msg []byte, await bool) error {
	copy(c.send.Buf, msg)
	seg, _ := c.send.Seg(0, len(msg))
	if err := c.w.ep.Send(idControl, seg, true); err != nil {
		return fmt.Errorf("control send: %w", err)
	}
	sent, got := false, !await
	for !sent || !got {
		comp, err := c.w.next(ctx)
		switch {
		case err != nil && got && errors.Is(err, verbs.ErrDisconnected):
			return nil
		case err != nil:
			return fmt.Errorf("closing handshake: %w", err)
		case comp.Op == verbs.OpSend && (comp.Err == nil || errors.Is(comp.Err, verbs.ErrFlushed)):
			sent = true
		case comp.Op == verbs.OpReceive && comp.Err == nil && !got:
			if comp.Bytes != len(msg) {
				return fmt.Errorf("closing handshake: message of %d bytes, expected %d: %w", comp.Bytes, len(msg), ErrProtocol)
			}
			got = true
		case comp.Err != nil:
			return fmt.Errorf("closing handshake: %v failed: %w", comp.Op, comp.Err)
		default:
			return fmt.Errorf("closing handshake: %v completion: %w", comp.Op, ErrProtocol)
		}
	}
	return nil
}

// prologue is what every test's main() exchanges right after the control
// connection: exchange_versions (16 bytes), check_sys_data (cycle buffer
// and cache line size, big-endian int32 each, peers >= 5.32) and check_mtu
// ("%d" of enum ibv_mtu, 2 bytes, peers >= 5.31). It returns the peer's
// version, the agreed cycle buffer and the agreed MTU enum.
func (c *control) prologue(ctx context.Context, p *Params) (string, int, int, error) {
	var v [VersionLen]byte
	if err := putVersion(v[:], p.Version); err != nil {
		return "", 0, 0, err
	}
	theirs, err := c.xchg(ctx, v[:])
	if err != nil {
		return "", 0, 0, fmt.Errorf("exchange versions: %w", err)
	}
	peer, pv, err := parseVersion(theirs)
	if err != nil {
		return "", 0, 0, err
	}
	if pv < minPeerVersion {
		return peer, 0, 0, fmt.Errorf("peer runs perftest %s; like perftest we need 5.70 or newer: %w", peer, ErrProtocol)
	}
	cycle := DefaultCycleBuf
	for _, mine := range []int{DefaultCycleBuf, DefaultCacheLine} {
		var b [4]byte
		putBE32(b[:], uint32(mine))
		theirs, err := c.xchg(ctx, b[:])
		if err != nil {
			return peer, 0, 0, fmt.Errorf("exchange system data: %w", err)
		}
		if mine == DefaultCycleBuf {
			// check_sys_data keeps the larger of the two.
			cycle = max(cycle, int(be32(theirs)))
		}
	}
	myMTU, _ := mtuEnum(p.MTU)
	m := [mtuLen]byte{byte('0' + myMTU), 0}
	theirs, err = c.xchg(ctx, m[:])
	if err != nil {
		return peer, 0, 0, fmt.Errorf("exchange MTU: %w", err)
	}
	mtu := myMTU
	if r := int(theirs[0] - '0'); theirs[1] == 0 && r >= 1 && r <= 5 && r < mtu {
		mtu = r // check_mtu takes the smaller valid one
	}
	if cycle > MaxSize {
		return peer, 0, 0, fmt.Errorf("peer's cycle buffer %d is implausible: %w", cycle, ErrProtocol)
	}
	return peer, cycle, mtu, nil
}

// reports is xchg_bw_reports: five 8-byte exchanges.
func (c *control) reports(ctx context.Context, mine Report) (Report, error) {
	f := mine.fields()
	var got [5]uint64
	for i, v := range f {
		var b [ReportLen]byte
		putBE64(b[:], v)
		theirs, err := c.xchg(ctx, b[:])
		if err != nil {
			return Report{}, fmt.Errorf("exchange reports: %w", err)
		}
		got[i] = be64(theirs)
	}
	return reportFrom(got), nil
}

// connectData opens a connection, retrying on REJ reason 8 as
// configured. params gives each attempt's parameters: an SRQ's receives
// outlive a failed attempt's endpoint and its memory, so each attempt
// needs an SRQ of its own.
func connectData(ctx context.Context, c verbs.Connector, p *Params, params func() (verbs.ConnParams, error)) (verbs.Endpoint, error) {
	for attempt := 0; ; attempt++ {
		cp, err := params()
		if err != nil {
			return nil, err
		}
		ep, err := c.Connect(ctx, p.Port, cp)
		var rej *verbs.RejectError
		if err == nil || !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidServiceID || attempt >= p.ConnectRetry.Attempts {
			if err != nil && attempt > 0 {
				err = fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return ep, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("retrying rejected connection: %w", ctx.Err())
		case <-afterFunc(p.ConnectRetry.Interval):
		}
	}
}
