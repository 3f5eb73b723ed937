// Package client is the control connection to the ndkxdp daemon:
// requests, replies with descriptors, events. Do sends a typed request of
// ndk/internal/proto and returns its typed reply; package ndk builds a
// daemon-backed adapter's objects with it, and ndk/daemon's Query and
// Dump (the operator's requests) use it too. The objects' data path (work
// rings, CQ rings, the doorbell) is shared memory that the replies bring
// (ndk/internal/proto, ndk/internal/shm).
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// ErrClosed is returned by calls on a connection that ended.
var ErrClosed = errors.New("connection to the ndkxdp daemon closed")

// GoneError is why a connection the client did not close ended: the
// daemon went away (it stopped or died, and the kernel hung its socket
// up), or sent what the client cannot read. errors.Is(err, ErrClosed)
// holds for it.
type GoneError struct {
	Socket string
	Cause  error
}

func (e *GoneError) Error() string {
	if e.Cause == errSessionEnded {
		return fmt.Sprintf("daemon %s %v", e.Socket, e.Cause)
	}
	return fmt.Sprintf("daemon %s went away (%v)", e.Socket, e.Cause)
}

func (e *GoneError) Unwrap() error { return e.Cause }

func (e *GoneError) Is(target error) bool { return target == ErrClosed }

// errHangup is the cause of a GoneError when the socket read its end.
var errHangup = errors.New("its socket hung up")

// Conn is a control connection to the daemon.
type Conn struct {
	c       *net.UnixConn
	path    string
	closing atomic.Bool // Close was called: the end is the client's
	wmu     sync.Mutex

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan reply
	err     error
	done    chan struct{}
	onEvent func(*proto.Message)
}

type reply struct {
	m   *proto.Message
	raw []byte // the message, for the typed reply
	fds []int
}

// ParseTarget turns "unix:///run/ndkxdp/eth0.sock" or a plain path into
// the socket's path.
func ParseTarget(target string) (string, error) {
	switch {
	case strings.HasPrefix(target, "unix://"):
		target = strings.TrimPrefix(target, "unix://")
	case strings.Contains(target, "://"):
		return "", fmt.Errorf("daemon address %q: only unix:// sockets", target)
	}
	if target == "" {
		return "", fmt.Errorf("empty daemon address")
	}
	return target, nil
}

// Dial connects to the daemon's socket at path. onEvent receives every
// event, on the connection's reader goroutine: it must not block.
func Dial(ctx context.Context, path string, onEvent func(*proto.Message)) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, err
	}
	c := &Conn{c: nc.(*net.UnixConn), path: path, pending: make(map[uint64]chan reply), done: make(chan struct{}), onEvent: onEvent}
	go c.read()
	return c, nil
}

func (c *Conn) read() {
	buf := make([]byte, proto.MaxMessage)
	var err error
	for {
		var n int
		var fds []int
		n, fds, err = shm.RecvFDs(c.c, buf, shm.MaxFDs)
		if (err == nil && n == 0) || errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) {
			err = errHangup
		}
		if err != nil {
			break
		}
		m := new(proto.Message)
		if err = json.Unmarshal(buf[:n], m); err != nil {
			closeFDs(fds)
			err = fmt.Errorf("daemon sent a bad message: %w", err)
			break
		}
		if m.Ev != "" {
			closeFDs(fds)
			c.onEvent(m)
			continue
		}
		c.mu.Lock()
		ch := c.pending[m.ID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch == nil {
			closeFDs(fds)
			continue
		}
		ch <- reply{m, append([]byte(nil), buf[:n]...), fds}
	}
	c.mu.Lock()
	if c.err == nil {
		if c.closing.Load() {
			c.err = ErrClosed
		} else {
			c.err = &GoneError{Socket: c.path, Cause: c.why(err)}
		}
	}
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

// errSessionEnded is the cause of a hangup from a daemon that still
// serves: it ended this client's session (for what the client did, which
// its log names), and did not stop.
var errSessionEnded = errors.New("ended this client's session and serves on: its log says why")

// why tells a hangup from a daemon that stopped (its socket is gone or
// answers no one) from one that ended only this session.
func (c *Conn) why(err error) error {
	if err != errHangup {
		return err
	}
	p, derr := net.DialTimeout("unixpacket", c.path, 100*time.Millisecond)
	if derr != nil {
		return err
	}
	defer p.Close()
	// A daemon that is exiting may hold its listener a while longer than
	// this session's socket (a process with many mappings and sockets
	// takes time to die), and the kernel queues a connection on it that
	// nobody accepts: only an answer shows a daemon that serves on. Any
	// request answers; the operator's status needs no hello.
	req, _ := proto.Encode(1, proto.OpAdminStatus, &proto.AdminStatus{})
	_ = p.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, werr := p.Write(req); werr != nil {
		return err
	}
	if n, rerr := p.Read(make([]byte, proto.MaxMessage)); rerr == nil && n > 0 {
		return errSessionEnded
	}
	return err
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Done is closed when the connection ends.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Refused is the daemon's answer refusing a request: Reply has its
// NTSTATUS (Status), the cause (Msg, Detail) and, for a connect or an
// accept the peer refused, the CM REJ.
type Refused struct {
	Op    string
	Reply *proto.Message
}

func (e *Refused) Error() string {
	msg := e.Reply.Msg
	if e.Reply.Detail != "" {
		msg = e.Reply.Detail + ": " + msg
	}
	return fmt.Sprintf("%s: %s (status %#x)", e.Op, msg, e.Reply.Status)
}

// deadline is a request that may block, and so carries the time its
// caller's context leaves it (proto.Deadline).
type deadline interface{ SetTimeout(ns int64) }

// Do sends req (with fds, which stay the caller's) and waits for its
// reply, of the type req names: a failure status is a *Refused. If ctx
// ends first the daemon is asked to give up the request and Do still
// waits for its answer, so that nothing it did is left unaccounted. The
// descriptors of the reply are the caller's to close.
func Do[P any](ctx context.Context, c *Conn, req proto.Call[P], fds ...int) (*P, []int, error) {
	if d, ok := req.(deadline); ok {
		if dl, ok := ctx.Deadline(); ok {
			d.SetTimeout(max(int64(time.Until(dl)), 1))
		}
	}
	op := req.Op()
	r, err := c.exchange(ctx, func(id uint64) ([]byte, error) { return proto.Encode(id, op, req) }, fds)
	if err != nil {
		return nil, nil, err
	}
	if r.m.Status != 0 {
		closeFDs(r.fds)
		return nil, nil, &Refused{Op: op, Reply: r.m}
	}
	p := new(P)
	if err := json.Unmarshal(r.raw, p); err != nil {
		closeFDs(r.fds)
		return nil, nil, fmt.Errorf("%s: daemon sent a bad reply: %w", op, err)
	}
	return p, r.fds, nil
}

// Call is Do for a request built by hand (any fields, any op), answered
// as a Message whatever its status: for tests and tools that speak the
// protocol below its types.
func (c *Conn) Call(ctx context.Context, req *proto.Request, fds ...int) (*proto.Message, []int, error) {
	if dl, ok := ctx.Deadline(); ok && req.Timeout == 0 {
		req.Timeout = max(int64(time.Until(dl)), 1)
	}
	r, err := c.exchange(ctx, func(id uint64) ([]byte, error) {
		req.ID = id
		return json.Marshal(req)
	}, fds)
	if err != nil {
		return nil, nil, err
	}
	return r.m, r.fds, nil
}

// exchange sends the message encode makes for a fresh ID and waits for
// the answer, cancelling the request if ctx ends first.
func (c *Conn) exchange(ctx context.Context, encode func(id uint64) ([]byte, error), fds []int) (reply, error) {
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return reply{}, err
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	b, err := encode(id)
	if err == nil {
		err = c.send(b, fds...)
	}
	if err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return reply{}, err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return reply{}, c.Err()
		}
		return r, nil
	case <-ctx.Done():
		if b, err := proto.Encode(0, proto.OpCancel, &proto.Cancel{Target: id}); err == nil {
			_ = c.send(b)
		}
		r, ok := <-ch
		if !ok {
			return reply{}, c.Err()
		}
		return r, nil
	}
}

func (c *Conn) send(b []byte, fds ...int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := shm.SendFDs(c.c, b, fds...); err != nil {
		if cerr := c.Err(); cerr != nil {
			return cerr
		}
		return &GoneError{Socket: c.path, Cause: err}
	}
	return nil
}

// Close ends the connection; the daemon frees everything the client had.
func (c *Conn) Close() {
	c.closing.Store(true)
	c.c.Close()
	<-c.done
}
