// Package cmtime is the protocol logic of `ndkxdp cmtime`: librdmacm's
// cmtime (rdma-core librdmacm/examples/cmtime.c), which times rdma_cm's
// connection setup and teardown over many RC connections at once, over
// any verbs.Endpoint.
//
// Two versions of cmtime are on the wire:
//
//   - rdma-core 51 and older (Debian 12's 44): the client opens
//     Connections connections to the server's port (7471, RDMA_PS_TCP),
//     all at once, with responder_resources and initiator_depth 1, then
//     disconnects them all; the server accepts every request with a QP
//     and answers every disconnect with its own, until it is killed.
//   - rdma-core 52 and later (OOB, Debian 13's 56): the sides also hold a
//     TCP connection to the same port number, the client's, over which
//     each side waits for the other as each round starts, after its
//     connects and after its disconnects (one byte, echoed back: 0, 12
//     and 14, cmtime.c's reset_test, STEP_CONNECT, STEP_DISCONNECT); there are
//     three rounds: a warm-up of one connection, Connections with QPs,
//     and Connections whose REQs name QPs that do not exist (ndkxdp
//     connects real ones then too: nothing on the wire tells).
//
// ndkxdp's server serves a given number of connections (Connections, or
// 1 + 2 x Connections with OOB) and then ends, where cmtime's server of
// the old version serves until it is killed. Both sides print cmtime's
// progress lines and a table of what ndkxdp times: the whole connect and
// the disconnect of each connection (rdma_cm's address and route
// resolution and the QP's creation are inside ndk's Connect).
package cmtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Defaults of cmtime.c.
const (
	DefaultPort        = 7471
	DefaultConnections = 100
	// MaxConnections bounds -c: ndkverbs' listen backlog, which a client
	// opening them all at once fills.
	MaxConnections = 256
)

// oobDialTime bounds a client's tries at the server's OOB port.
const oobDialTime = 10 * time.Second

// OOB sync bytes: 0 as a round starts (cmtime.c's reset_test), then
// its STEP_CONNECT and STEP_DISCONNECT.
const (
	stepStart      = 0
	stepConnect    = 12
	stepDisconnect = 14
)

// Config is a run's parameters.
type Config struct {
	Connections int // -c
	// OOB is rdma-core 52 and later's protocol: a TCP connection to the
	// same port syncs the sides, over three rounds.
	OOB bool
	// Serving, if set, hears that a server listens (on rdma_cm, and on
	// TCP with OOB).
	Serving func()
}

// Fill takes cmtime.c's default for a zero Connections and checks it.
func (c *Config) Fill() error {
	if c.Connections == 0 {
		c.Connections = DefaultConnections
	}
	if c.Connections < 1 || c.Connections > MaxConnections {
		return fmt.Errorf("cmtime: -c %d: 1 to %d connections: %w", c.Connections, MaxConnections, verbs.ErrInvalid)
	}
	return nil
}

// rounds are the connection counts of a run's rounds.
func (c *Config) rounds() []int {
	if c.OOB {
		return []int{1, c.Connections, c.Connections}
	}
	return []int{c.Connections}
}

// roundName is what the OOB version prints before a round.
func roundName(client bool, i, n int) string {
	switch {
	case i == 0 && client:
		return "Client warmup"
	case i == 0:
		return "Server warmup"
	case client && i == 1:
		return fmt.Sprintf("Connect (%d) QPs test", n)
	case client:
		return fmt.Sprintf("Connect (%d) test - no QPs", n)
	case i == 1:
		return fmt.Sprintf("Accept (%d) QPs test", n)
	}
	return fmt.Sprintf("Accept (%d) test - no QPs", n)
}

// times are one round's per-connection spans of a step, in ns.
type times struct {
	first, last time.Time // the step's start and end, all connections
	each        []time.Duration
}

// time runs f and adds its span.
func (t *times) time(mu *sync.Mutex, f func()) {
	start := time.Now()
	f()
	t.add(start, time.Now(), mu)
}

func (t *times) add(start, end time.Time, mu *sync.Mutex) {
	mu.Lock()
	defer mu.Unlock()
	if t.first.IsZero() || start.Before(t.first) {
		t.first = start
	}
	if end.After(t.last) {
		t.last = end
	}
	t.each = append(t.each, end.Sub(start))
}

// printTable prints cmtime.c's table (rdma-core 51's columns) of the
// steps ndkxdp times.
func printTable(out io.Writer, n int, steps []string, ts []*times) {
	fmt.Fprintln(out, "step              total ms     max ms     min us  us / conn")
	for i, t := range ts {
		lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
		for _, d := range t.each {
			lo, hi = min(lo, d), max(hi, d)
		}
		if len(t.each) == 0 {
			lo = 0
		}
		total := t.last.Sub(t.first)
		us := float64(total) / 1e3
		fmt.Fprintf(out, "%-13s: %11.2f%11.2f%11.2f%11.2f\n", steps[i], us/1000, float64(hi)/1e6, float64(lo)/1e3, us/float64(n))
	}
}

// RunClient is `cmtime -s SERVER`: each round connects its connections
// to port through c all at once, then disconnects them all. dial, for
// OOB, opens the TCP connection to the server's port.
func RunClient(ctx context.Context, cfg Config, c verbs.Connector, port uint16, dial func(ctx context.Context) (net.Conn, error), out io.Writer) error {
	if err := cfg.Fill(); err != nil {
		return err
	}
	var oob net.Conn
	if cfg.OOB {
		var err error
		// cmtime's server listens on TCP just after rdma_cm: a dial
		// refused meanwhile is tried again, for at most oobDialTime.
		for deadline := time.Now().Add(oobDialTime); ; {
			if oob, err = dial(ctx); err == nil || ctx.Err() != nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("cmtime: oob connection: %w", err)
		}
		defer oob.Close()
		defer context.AfterFunc(ctx, func() { oob.Close() })()
	}
	for i, n := range cfg.rounds() {
		if cfg.OOB {
			fmt.Fprintln(out, roundName(true, i, n))
		}
		if err := clientRound(ctx, cfg, c, port, n, oob, out); err != nil {
			return err
		}
	}
	return nil
}

func clientRound(ctx context.Context, cfg Config, c verbs.Connector, port uint16, n int, oob net.Conn, out io.Writer) error {
	if oob != nil {
		if err := sendRecv(oob, stepStart); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	var conn, disc times
	eps := make([]verbs.Endpoint, n)
	defer func() {
		for _, ep := range eps {
			if ep != nil {
				ep.Close()
			}
		}
	}()
	fmt.Fprintln(out, "\tConnecting")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn.time(&mu, func() {
				eps[i], errs[i] = c.Connect(ctx, port, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1})
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cmtime: connect: %w", err)
	}
	if oob != nil {
		if err := sendRecv(oob, stepConnect); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "\tDisconnecting")
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			disc.time(&mu, func() { errs[i] = ep.Close() }) // rdma_disconnect; the close waits for the DREP
		}()
	}
	wg.Wait()
	clear(eps)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cmtime: disconnect: %w", err)
	}
	if oob != nil {
		if err := sendRecv(oob, stepDisconnect); err != nil {
			return err
		}
	}
	printTable(out, n, []string{"connect", "disconnect"}, []*times{&conn, &disc})
	return nil
}

// RunServer is cmtime without -s: it accepts each round's connections on
// l, each with a QP, and answers each peer's disconnect with its own.
// With OOB, ol listens on TCP on the server's port: RunServer takes the
// client's connection from it.
func RunServer(ctx context.Context, cfg Config, l verbs.Listener, ol net.Listener, out io.Writer) error {
	if err := cfg.Fill(); err != nil {
		return err
	}
	if cfg.Serving != nil {
		cfg.Serving()
	}
	var oob net.Conn
	if cfg.OOB {
		stop := context.AfterFunc(ctx, func() { ol.Close() })
		var err error
		oob, err = ol.Accept()
		stop()
		if err != nil {
			return fmt.Errorf("cmtime: oob connection: %w", err)
		}
		defer oob.Close()
		defer context.AfterFunc(ctx, func() { oob.Close() })()
	}
	for i, n := range cfg.rounds() {
		if cfg.OOB {
			fmt.Fprintln(out, roundName(false, i, n))
		}
		if err := serverRound(ctx, l, n, oob, out); err != nil {
			return err
		}
	}
	return nil
}

func serverRound(ctx context.Context, l verbs.Listener, n int, oob net.Conn, out io.Writer) error {
	if oob != nil {
		if err := recvSend(oob, stepStart); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	var conn, disc times
	var wg sync.WaitGroup
	errs := make([]error, n)
	// A failed round ends the waits for the disconnects it started, and
	// returns once their goroutines have closed their endpoints.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) error {
		cancel()
		wg.Wait()
		return err
	}
	for i := 0; i < n; i++ {
		start := time.Now()
		ep, err := l.Accept(ctx, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1})
		if err != nil {
			return fail(fmt.Errorf("cmtime: accept %d of %d: %w", i+1, n, err))
		}
		end := time.Now()
		conn.add(start, end, &mu)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = awaitDisconnect(rctx, ep)
			disc.time(&mu, func() { ep.Close() })
		}()
	}
	if oob != nil {
		if err := recvSend(oob, stepConnect); err != nil {
			return fail(err)
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cmtime: %w", err)
	}
	if oob != nil {
		if err := recvSend(oob, stepDisconnect); err != nil {
			return err
		}
	}
	printTable(out, n, []string{"accept", "disconnect"}, []*times{&conn, &disc})
	return nil
}

// awaitDisconnect drains ep until its peer disconnects.
func awaitDisconnect(ctx context.Context, ep verbs.Endpoint) error {
	var buf [4]verbs.Completion
	var idle verbs.Backoff
	for {
		k, err := ep.Poll(buf[:])
		switch {
		case errors.Is(err, verbs.ErrDisconnected):
			return nil
		case err != nil:
			return err
		}
		if k == 0 {
			if err := idle.Idle(ctx, ep); err != nil {
				return fmt.Errorf("waiting for the client's disconnect: %w", err)
			}
		}
	}
}

// sendRecv is common.c's oob_sendrecv: send val, read it back.
func sendRecv(c net.Conn, val byte) error {
	if _, err := c.Write([]byte{val}); err != nil {
		return fmt.Errorf("cmtime: oob send: %w", err)
	}
	return expect(c, val)
}

// recvSend is oob_recvsend: read val, send it back.
func recvSend(c net.Conn, val byte) error {
	if err := expect(c, val); err != nil {
		return err
	}
	if _, err := c.Write([]byte{val}); err != nil {
		return fmt.Errorf("cmtime: oob send: %w", err)
	}
	return nil
}

func expect(c net.Conn, val byte) error {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("cmtime: oob receive: %w", err)
	}
	if b[0] != val {
		return fmt.Errorf("cmtime: oob sync: got step %d, want %d: %w", b[0], val, verbs.ErrInvalid)
	}
	return nil
}
