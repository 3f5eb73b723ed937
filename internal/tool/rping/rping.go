package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Protocol constants from librdmacm/examples/rping.c.
const (
	// DefaultPort is rping's rdma_cm port (cb->port = htobe16(7174)).
	DefaultPort = 7174
	// DefaultSize is the ping size without -S (cb->size = 64).
	DefaultSize = 64
	// MinSize is RPING_MIN_BUFSIZE: sizeof(stringify(INT_MAX)) +
	// sizeof(RPING_MSG_FMT) = 11 + 15, room for the longest "rdma-ping-N: "
	// prefix and its NUL.
	MinSize = 26
	// MaxSize is RPING_BUFSIZE - 1: -S accepts up to 64 KiB - 1.
	MaxSize = 64*1024 - 1
	// InfoLen is sizeof(struct rping_rdma_info).
	InfoLen = 16
	// msgPrefix is RPING_MSG_FMT.
	msgPrefix = "rdma-ping-"
)

// Info is struct rping_rdma_info {__be64 buf; __be32 rkey; __be32 size;}:
// what each SEND carries. The client advertises a buffer with it; the
// server's "go ahead" SENDs carry 16 zero bytes (rping never formats the
// server's send_buf).
type Info struct {
	Addr uint64
	RKey uint32
	Size uint32
}

// Put writes i big-endian into b[:InfoLen].
func (i Info) Put(b []byte) error {
	if len(b) < InfoLen {
		return fmt.Errorf("encode rping_rdma_info: %d-byte buffer, need %d: %w", len(b), InfoLen, verbs.ErrInvalid)
	}
	binary.BigEndian.PutUint64(b[0:], i.Addr)
	binary.BigEndian.PutUint32(b[8:], i.RKey)
	binary.BigEndian.PutUint32(b[12:], i.Size)
	return nil
}

// ErrBogus is a message that is not a 16-byte rping_rdma_info.
var ErrBogus = errors.New("rping: received bogus data")

// ErrMismatch is a pong that differs from its ping (-V).
var ErrMismatch = errors.New("rping: data mismatch")

// ErrLastGoAhead is a server that did its Count pings but never had its
// last go-ahead acknowledged: whether the client holds it is unknown. A
// client that leaves at once (rping disconnects and destroys its QP right
// after the last go-ahead) causes it when both its ACK and its DREQ are
// lost.
var ErrLastGoAhead = errors.New("rping: the last go-ahead was never acknowledged")

// DecodeInfo reads an rping_rdma_info. Like server_recv and client_recv it
// accepts exactly InfoLen bytes.
func DecodeInfo(b []byte) (Info, error) {
	if len(b) != InfoLen {
		return Info{}, fmt.Errorf("rping_rdma_info of %d bytes, want %d: %w", len(b), InfoLen, ErrBogus)
	}
	return Info{
		Addr: binary.BigEndian.Uint64(b[0:]),
		RKey: binary.BigEndian.Uint32(b[8:]),
		Size: binary.BigEndian.Uint32(b[12:]),
	}, nil
}

// FillPing writes ping number n as rping_test_client does: "rdma-ping-N: "
// then ASCII from start upward ('A'..'z', wrapping to 'A'), and a NUL in the
// last byte. It returns the start character for the next ping.
func FillPing(buf []byte, n int, start byte) byte {
	prefix := strconv.AppendInt(append(make([]byte, 0, 24), msgPrefix...), int64(n), 10)
	prefix = append(prefix, ':', ' ')
	// snprintf(start_buf, size, ...) keeps at most size-1 characters.
	cc := copy(buf[:len(buf)-1], prefix)
	c := start
	for i := cc; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > 122 {
			c = 65
		}
	}
	buf[len(buf)-1] = 0
	start++
	if start > 122 {
		start = 65
	}
	return start
}

// Config is what rping's command line sets.
type Config struct {
	// Size is -S, the ping size in bytes (MinSize..MaxSize); 0 means DefaultSize.
	Size int
	// Count is -C, the number of pings. 0 pings until ctx ends or, on the
	// server, until the client disconnects, as rping does. A server with a
	// Count waits for the last go-ahead's acknowledgement and then for the
	// client to disconnect, ClientLeaveGrace at most, before it
	// disconnects itself: it does not depend on the client's DREQ (which
	// a client that leaves at once sends only once), and it does not
	// disconnect first, which would end rping's client before it prints
	// its last ping.
	Count int
	// Validate is -V: the client compares each pong with its ping.
	Validate bool
	// Verbose is -v: the client prints "ping data: ..." and the server
	// "server ping data: ..." for every ping. Nil prints nothing.
	Verbose io.Writer
	// Phase, if set, is told each step of the run as it begins ("connect",
	// "accept", "pings"), for a command that reports where it was
	// interrupted or timed out.
	Phase func(string)
	// Timed, if set, is told each of the client's pings as it ends, with
	// its round time: from its first SEND to the server's second go-ahead
	// (and, with Validate, its comparison).
	Timed func(ping int, rtt time.Duration)
}

// Check reports what RunClient and RunServer would refuse in c, without
// changing it: a command checks its flags with it before it touches a
// device.
func (c Config) Check() error { return c.check() }

func (c *Config) phase(name string) {
	if c.Phase != nil {
		c.Phase(name)
	}
}

func (c *Config) check() error {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Size < MinSize || c.Size > MaxSize {
		return fmt.Errorf("rping: invalid size %d (valid range is %d to %d): %w", c.Size, MinSize, MaxSize, verbs.ErrInvalid)
	}
	if c.Count < 0 {
		return fmt.Errorf("rping: invalid count %d: %w", c.Count, verbs.ErrInvalid)
	}
	return nil
}

// connParams is rping_init_conn_param: one outstanding READ each way,
// retry_count 7, rnr_retry_count 7 (infinite).
func connParams(prepare func(verbs.Endpoint) error) verbs.ConnParams {
	return verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, Prepare: prepare}
}

// Work request IDs.
const (
	idRecv uint64 = iota + 1
	idSend
	idRDMA
)

// side holds one end's registrations (rping_setup_buffers).
type side struct {
	ep        verbs.Endpoint
	recv      verbs.Region // recv_buf: one rping_rdma_info
	send      verbs.Region // send_buf
	rdma      verbs.Region // rdma_buf: the server's READ sink and WRITE source, the client's pong sink
	start     verbs.Region // start_buf: the client's ping source
	recvSeg   verbs.Segment
	completed [8]verbs.Completion
	queue     []verbs.Completion
	idle      verbs.Backoff
}

func setup(ep verbs.Endpoint, size int, client bool) (*side, error) {
	s := &side{ep: ep}
	var err error
	if s.recv, err = register(ep, "recv_buf", InfoLen, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if s.send, err = register(ep, "send_buf", InfoLen, 0); err != nil {
		return nil, err
	}
	const rw = verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	if s.rdma, err = register(ep, "rdma_buf", size, rw); err != nil {
		return nil, err
	}
	if client {
		if s.start, err = register(ep, "start_buf", size, rw); err != nil {
			return nil, err
		}
	}
	s.recvSeg, _ = s.recv.Seg(0, InfoLen)
	if err := ep.Receive(idRecv, s.recvSeg); err != nil {
		return nil, fmt.Errorf("rping: post receive: %w", err)
	}
	return s, nil
}

// register allocates n bytes on ep and registers them.
func register(ep verbs.Endpoint, name string, n int, access verbs.Access) (verbs.Region, error) {
	buf, err := ep.Alloc(n)
	if err != nil {
		return verbs.Region{}, fmt.Errorf("rping: allocate %s: %w", name, err)
	}
	r, err := ep.Register(buf, access)
	if err != nil {
		return verbs.Region{}, fmt.Errorf("rping: register %s: %w", name, err)
	}
	return r, nil
}

// wait returns the next completion of op. Signaled SEND completions that
// come first are consumed, as rping's CQ handler only logs them; a failed
// completion is an error. A receive is reposted before it is returned, as
// rping_cq_event_handler does.
func (s *side) wait(ctx context.Context, op verbs.Op) (verbs.Completion, error) {
	for {
		for len(s.queue) > 0 {
			c := s.queue[0]
			s.queue = s.queue[1:]
			if c.Err != nil {
				return c, fmt.Errorf("rping: %v completion failed: %w", c.Op, c.Err)
			}
			if c.Op != op {
				if c.Op == verbs.OpSend {
					continue
				}
				return c, fmt.Errorf("rping: unexpected %v completion while waiting for %v", c.Op, op)
			}
			if op == verbs.OpReceive {
				if err := s.ep.Receive(idRecv, s.recvSeg); err != nil {
					return c, fmt.Errorf("rping: repost receive: %w", err)
				}
			}
			return c, nil
		}
		n, err := s.ep.Poll(s.completed[:])
		if err != nil {
			return verbs.Completion{}, fmt.Errorf("rping: waiting for %v: %w", op, err)
		}
		if n > 0 {
			s.queue = append(s.queue[:0], s.completed[:n]...)
			s.idle.Reset()
			continue
		}
		if err := s.idle.Idle(ctx, s.ep); err != nil {
			return verbs.Completion{}, fmt.Errorf("rping: waiting for %v: %w", op, err)
		}
	}
}

func (s *side) sendInfo(i Info) error {
	if err := i.Put(s.send.Buf); err != nil {
		return err
	}
	seg, _ := s.send.Seg(0, InfoLen)
	if err := s.ep.Send(idSend, seg, true); err != nil {
		return fmt.Errorf("rping: post send: %w", err)
	}
	return nil
}

// Stats is what a run did.
type Stats struct {
	Pings int
}

// RunClient connects through c to port and runs rping_test_client: for each
// ping it advertises start_buf (the server READs the ping from it), waits
// for the go-ahead, advertises rdma_buf (the server WRITEs the pong into
// it), waits for the second go-ahead, and with Validate compares the two.
// It disconnects at the end.
func RunClient(ctx context.Context, cfg Config, c verbs.Connector, port uint16) (Stats, error) {
	var st Stats
	if err := cfg.check(); err != nil {
		return st, err
	}
	var s *side
	cfg.phase("connect")
	ep, err := c.Connect(ctx, port, connParams(func(ep verbs.Endpoint) error {
		var err error
		s, err = setup(ep, cfg.Size, true)
		return err
	}))
	if err != nil {
		return st, fmt.Errorf("rping: connect to port %d: %w", port, err)
	}
	defer ep.Close()
	cfg.phase("pings")
	start := byte(65)
	for ping := 0; cfg.Count == 0 || ping < cfg.Count; ping++ {
		t0 := time.Now()
		start = FillPing(s.start.Buf, ping, start)
		if err := s.sendInfo(Info{Addr: s.start.Addr, RKey: s.start.RKey, Size: uint32(cfg.Size)}); err != nil {
			return st, err
		}
		if err := s.waitInfo(ctx); err != nil {
			return st, fmt.Errorf("%w (waiting for RDMA_WRITE_ADV, ping %d)", err, ping)
		}
		if err := s.sendInfo(Info{Addr: s.rdma.Addr, RKey: s.rdma.RKey, Size: uint32(cfg.Size)}); err != nil {
			return st, err
		}
		if err := s.waitInfo(ctx); err != nil {
			return st, fmt.Errorf("%w (waiting for RDMA_WRITE_COMPLETE, ping %d)", err, ping)
		}
		if cfg.Validate && !bytes.Equal(s.start.Buf, s.rdma.Buf) {
			return st, fmt.Errorf("ping %d: %w", ping, ErrMismatch)
		}
		if cfg.Timed != nil {
			cfg.Timed(ping, time.Since(t0))
		}
		if cfg.Verbose != nil {
			fmt.Fprintf(cfg.Verbose, "ping data: %s\n", cString(s.rdma.Buf))
		}
		st.Pings++
	}
	return st, nil
}

// waitInfo waits for the server's go-ahead and checks its length.
func (s *side) waitInfo(ctx context.Context) error {
	c, err := s.wait(ctx, verbs.OpReceive)
	if err != nil {
		return err
	}
	if c.Bytes != InfoLen {
		return fmt.Errorf("rping: go-ahead of %d bytes: %w", c.Bytes, ErrBogus)
	}
	return nil
}

// RunServer accepts one connection on l and runs rping_test_server until
// the client disconnects or Count pings are done: READ the ping from the
// client's source buffer, send a go-ahead, WRITE it back into the client's
// sink buffer, send a go-ahead.
func RunServer(ctx context.Context, cfg Config, l verbs.Listener) (Stats, error) {
	var st Stats
	if err := cfg.check(); err != nil {
		return st, err
	}
	var s *side
	cfg.phase("accept")
	ep, err := l.Accept(ctx, connParams(func(ep verbs.Endpoint) error {
		var err error
		s, err = setup(ep, cfg.Size, false)
		return err
	}))
	if err != nil {
		return st, fmt.Errorf("rping: accept: %w", err)
	}
	defer ep.Close()
	cfg.phase("pings")
	goAhead, _ := s.send.Seg(0, InfoLen) // 16 zero bytes
	for cfg.Count == 0 || st.Pings < cfg.Count {
		// RDMA_READ_ADV: the client's source buffer. A disconnect here is
		// the normal end (rping returns 0 in state DISCONNECTED).
		src, err := s.recvInfo(ctx)
		if errors.Is(err, verbs.ErrDisconnected) || errors.Is(err, verbs.ErrFlushed) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("%w (waiting for RDMA_READ_ADV)", err)
		}
		if int(src.Size) > len(s.rdma.Buf) {
			return st, fmt.Errorf("rping: client's ping is %d bytes, larger than our %d-byte buffer (-S): %w", src.Size, len(s.rdma.Buf), verbs.ErrInvalid)
		}
		sink, _ := s.rdma.Seg(0, int(src.Size))
		if err := ep.Read(idRDMA, sink, src.Addr, src.RKey, true); err != nil {
			return st, fmt.Errorf("rping: post read: %w", err)
		}
		if _, err := s.wait(ctx, verbs.OpRead); err != nil {
			return st, fmt.Errorf("%w (waiting for RDMA_READ_COMPLETE)", err)
		}
		if cfg.Verbose != nil {
			fmt.Fprintf(cfg.Verbose, "server ping data: %s\n", cString(s.rdma.Buf))
		}
		if err := ep.Send(idSend, goAhead, true); err != nil {
			return st, fmt.Errorf("rping: post go-ahead: %w", err)
		}
		dst, err := s.recvInfo(ctx)
		if err != nil {
			return st, fmt.Errorf("%w (waiting for RDMA_WRITE_ADV)", err)
		}
		// The echo is strlen(rdma_buf) + 1 bytes; a ping without a NUL
		// (not from rping) is echoed whole.
		n := bytes.IndexByte(sink.Bytes(), 0) + 1
		if n == 0 {
			n = sink.Len
		}
		if n > int(dst.Size) {
			return st, fmt.Errorf("rping: echo of %d bytes does not fit the client's %d-byte sink: %w", n, dst.Size, verbs.ErrInvalid)
		}
		echo, _ := s.rdma.Seg(0, n)
		if err := ep.Write(idRDMA, echo, dst.Addr, dst.RKey, true); err != nil {
			return st, fmt.Errorf("rping: post write: %w", err)
		}
		if _, err := s.wait(ctx, verbs.OpWrite); err != nil {
			return st, fmt.Errorf("%w (waiting for RDMA_WRITE_COMPLETE)", err)
		}
		if err := ep.Send(idSend, goAhead, true); err != nil {
			return st, fmt.Errorf("rping: post go-ahead: %w", err)
		}
		st.Pings++
	}
	// Count pings done: Close would cancel the last go-ahead if its first
	// copy was lost, so wait for its acknowledgement. The client
	// disconnecting instead ends the run as well (it only leaves once it
	// holds the go-ahead).
	_, err = s.wait(ctx, verbs.OpSend)
	switch {
	case errors.Is(err, verbs.ErrDisconnected) || errors.Is(err, verbs.ErrFlushed):
		return st, nil
	case errors.Is(err, verbs.ErrRetryExceeded):
		return st, fmt.Errorf("%w: %w (the client may have left with its ACK and DREQ lost)", ErrLastGoAhead, err)
	case err != nil:
		return st, fmt.Errorf("%w (waiting for the last go-ahead's acknowledgement)", err)
	}
	// rping's client reads its state after the last go-ahead's receive:
	// a disconnect that comes first ends it in state DISCONNECTED, exit
	// 0, without its last "ping data" line. So the client leaves first,
	// as against rping's server (which never disconnects first); one
	// that stays, or whose DREQ was lost, is left after the grace.
	gctx, cancel := context.WithTimeout(ctx, ClientLeaveGrace)
	defer cancel()
	_, _ = s.wait(gctx, verbs.OpReceive)
	return st, nil
}

// ClientLeaveGrace is how long a server with a Count, its pings done,
// waits for the client to disconnect before it disconnects itself.
const ClientLeaveGrace = 2 * time.Second

func (s *side) recvInfo(ctx context.Context) (Info, error) {
	c, err := s.wait(ctx, verbs.OpReceive)
	if err != nil {
		return Info{}, err
	}
	// The receive was reposted in wait; the 16 bytes stay until the peer's
	// next SEND, which only follows our next go-ahead.
	return DecodeInfo(s.recv.Buf[:c.Bytes])
}

func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
