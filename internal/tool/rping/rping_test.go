package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

func TestInfoWireLayout(t *testing.T) {
	// Frame 4 of rping.pcap: the client's first SEND (rxe, -S 64).
	want := []byte{0x00, 0x00, 0x5b, 0x26, 0x93, 0x82, 0xe5, 0xe0, 0x00, 0x00, 0x20, 0x95, 0x00, 0x00, 0x00, 0x40}
	in := Info{Addr: 0x00005b269382e5e0, RKey: 0x2095, Size: 64}
	var got [InfoLen]byte
	if err := in.Put(got[:]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:], want) {
		t.Fatalf("Put = % x, want % x", got, want)
	}
	back, err := DecodeInfo(want)
	if err != nil || back != in {
		t.Fatalf("DecodeInfo = %+v, %v; want %+v", back, err, in)
	}
	for _, n := range []int{0, 8, 15, 17, 64} {
		if _, err := DecodeInfo(make([]byte, n)); !errors.Is(err, ErrBogus) {
			t.Errorf("DecodeInfo(%d bytes) error %v, want ErrBogus", n, err)
		}
	}
	if err := in.Put(make([]byte, 15)); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("Put into 15 bytes: %v", err)
	}
}

func TestFillPing(t *testing.T) {
	tests := []struct {
		name  string
		size  int
		n     int
		start byte
		want  string
		next  byte
	}{
		// Frame 7 of rping.pcap: the READ response of ping 0.
		{"capture ping 0", 64, 0, 'A', "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\x00", 'B'},
		{"wrap", 30, 7, 'y', "rdma-ping-7: yzABCDEFGHIJKLMN\x00", 'z'},
		{"start wraps", 26, 1, 'z', "rdma-ping-1: zABCDEFGHIJK\x00", 'A'},
		{"long number truncated by snprintf", 26, 2147483647, 'A', "rdma-ping-2147483647: ABC\x00", 'B'},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, tt.size)
			next := FillPing(buf, tt.n, tt.start)
			if string(buf) != tt.want {
				t.Errorf("buf = %q, want %q", buf, tt.want)
			}
			if next != tt.next {
				t.Errorf("next start = %q, want %q", next, tt.next)
			}
		})
	}
}

func TestConfigLimits(t *testing.T) {
	tests := []struct {
		cfg  Config
		fail bool
	}{
		{Config{}, false},
		{Config{Size: MinSize}, false},
		{Config{Size: MaxSize}, false},
		{Config{Size: MinSize - 1}, true},
		{Config{Size: MaxSize + 1}, true},
		{Config{Count: -1}, true},
	}
	for _, tt := range tests {
		c := tt.cfg
		err := c.check()
		if (err != nil) != tt.fail {
			t.Errorf("%+v: error %v, want failure %v", tt.cfg, err, tt.fail)
		}
		if err == nil && c.Size == 0 {
			t.Errorf("%+v: size not defaulted", tt.cfg)
		}
		if err != nil && !strings.Contains(err.Error(), "valid range is 26 to 65535") && tt.cfg.Count >= 0 {
			t.Errorf("error %q does not name the range", err)
		}
	}
}

// run starts a server and a client on an in-memory network.
func run(t *testing.T, ccfg, scfg Config, wrap func(verbs.Listener) verbs.Listener) (Stats, error, Stats, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n verbstest.Network
	l, err := n.Listen(DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var sl verbs.Listener = l
	if wrap != nil {
		sl = wrap(l)
	}
	var wg sync.WaitGroup
	var sst Stats
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sst, serr = RunServer(ctx, scfg, sl)
	}()
	cst, cerr := RunClient(ctx, ccfg, &n, DefaultPort)
	wg.Wait()
	return cst, cerr, sst, serr
}

func TestClientServer(t *testing.T) {
	for _, size := range []int{MinSize, DefaultSize, 4096, MaxSize} {
		for _, count := range []int{1, 10} {
			t.Run(fmt.Sprintf("S%d_C%d", size, count), func(t *testing.T) {
				var cout, sout bytes.Buffer
				cst, cerr, sst, serr := run(t,
					Config{Size: size, Count: count, Validate: true, Verbose: &cout},
					Config{Size: size, Verbose: &sout}, nil)
				if cerr != nil || serr != nil {
					t.Fatalf("client %v, server %v", cerr, serr)
				}
				if cst.Pings != count || sst.Pings != count {
					t.Fatalf("pings client %d server %d, want %d", cst.Pings, sst.Pings, count)
				}
				clines := strings.Split(strings.TrimSuffix(cout.String(), "\n"), "\n")
				slines := strings.Split(strings.TrimSuffix(sout.String(), "\n"), "\n")
				if len(clines) != count || len(slines) != count {
					t.Fatalf("%d client and %d server lines, want %d", len(clines), len(slines), count)
				}
				start := byte('A')
				for i := range count {
					buf := make([]byte, size)
					start = FillPing(buf, i, start)
					ping := string(buf[:size-1])
					if clines[i] != "ping data: "+ping {
						t.Errorf("client line %d = %.40q..., want ping %q...", i, clines[i], ping[:20])
					}
					if slines[i] != "server ping data: "+ping {
						t.Errorf("server line %d = %.40q...", i, slines[i])
					}
				}
			})
		}
	}
}

// TestTimedPerPing: the client's Timed hook hears of every ping, in
// order, once it was echoed and compared, with a positive round time; a
// ping that fails the comparison is not reported.
func TestTimedPerPing(t *testing.T) {
	var pings []int
	var rtts []time.Duration
	timed := func(ping int, rtt time.Duration) {
		pings = append(pings, ping)
		rtts = append(rtts, rtt)
	}
	_, cerr, _, serr := run(t, Config{Count: 7, Validate: true, Timed: timed}, Config{}, nil)
	if cerr != nil || serr != nil {
		t.Fatalf("client %v, server %v", cerr, serr)
	}
	if len(pings) != 7 {
		t.Fatalf("Timed heard of pings %v, want 0..6", pings)
	}
	for i := range pings {
		if pings[i] != i || rtts[i] <= 0 {
			t.Errorf("Timed call %d: ping %d, round time %v; want ping %d and a positive time", i, pings[i], rtts[i], i)
		}
	}
	pings = nil
	corrupt := func(l verbs.Listener) verbs.Listener {
		return wrapping{l, func(ep verbs.Endpoint) verbs.Endpoint { return corrupting{ep} }}
	}
	if _, cerr, _, _ := run(t, Config{Count: 3, Validate: true, Timed: timed}, Config{}, corrupt); !errors.Is(cerr, ErrMismatch) || len(pings) != 0 {
		t.Errorf("corrupted pong: %v, Timed heard of %v; want ErrMismatch and no ping timed", cerr, pings)
	}
}

func TestServerLargerBufferAccepted(t *testing.T) {
	// rping's server READs the client's size into its own -S buffer; a
	// larger server buffer is fine, a smaller one is an error.
	_, cerr, sst, serr := run(t, Config{Size: 100, Count: 3, Validate: true}, Config{Size: 200}, nil)
	if cerr != nil || serr != nil || sst.Pings != 3 {
		t.Fatalf("client %v, server %v, pings %d", cerr, serr, sst.Pings)
	}
	_, _, _, serr = run(t, Config{Size: 200, Count: 1}, Config{Size: 100}, nil)
	if !errors.Is(serr, verbs.ErrInvalid) {
		t.Fatalf("server with a smaller buffer: %v, want ErrInvalid", serr)
	}
}

// corrupting flips the first byte of every WRITE the server posts.
type corrupting struct{ verbs.Endpoint }

func (c corrupting) Write(id uint64, local verbs.Segment, addr uint64, rkey uint32, signaled bool) error {
	local.Bytes()[0] ^= 0xFF
	return c.Endpoint.Write(id, local, addr, rkey, signaled)
}

// wrapping hands the server the endpoint of every connection it accepts
// wrapped by wrap, both in Prepare (where rping keeps it for polling) and
// as Accept's result (which it posts to).
type wrapping struct {
	verbs.Listener
	wrap func(verbs.Endpoint) verbs.Endpoint
}

func (l wrapping) Accept(ctx context.Context, p verbs.ConnParams) (verbs.Endpoint, error) {
	prepare := p.Prepare
	var wrapped verbs.Endpoint
	p.Prepare = func(ep verbs.Endpoint) error {
		wrapped = l.wrap(ep)
		return prepare(wrapped)
	}
	if _, err := l.Listener.Accept(ctx, p); err != nil {
		return nil, err
	}
	return wrapped, nil
}

func TestValidateDetectsMismatch(t *testing.T) {
	wrap := func(l verbs.Listener) verbs.Listener {
		return wrapping{l, func(ep verbs.Endpoint) verbs.Endpoint { return corrupting{ep} }}
	}
	cst, cerr, _, _ := run(t, Config{Count: 3, Validate: true}, Config{}, wrap)
	if !errors.Is(cerr, ErrMismatch) || cst.Pings != 0 {
		t.Fatalf("client: %v after %d pings, want ErrMismatch after 0", cerr, cst.Pings)
	}
	// Without -V the same corruption goes unnoticed, as in rping.
	cst, cerr, _, _ = run(t, Config{Count: 3}, Config{}, wrap)
	if cerr != nil || cst.Pings != 3 {
		t.Fatalf("client without -V: %v, %d pings", cerr, cst.Pings)
	}
}

func TestServerRejectsBogusMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n verbstest.Network
	l, _ := n.Listen(DefaultPort)
	done := make(chan error, 1)
	go func() {
		_, err := RunServer(ctx, Config{}, l)
		done <- err
	}()
	ep, err := n.Connect(ctx, DefaultPort, verbs.ConnParams{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := ep.Register(make([]byte, 8), 0)
	seg, _ := r.Seg(0, 8)
	if err := ep.Send(1, seg, false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrBogus) {
		t.Fatalf("server: %v, want ErrBogus", err)
	}
}

func TestClientBoundedByContext(t *testing.T) {
	// A server that accepts and never answers: the client's wait ends with
	// the context.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var n verbstest.Network
	l, _ := n.Listen(DefaultPort)
	go l.Accept(ctx, verbs.ConnParams{})
	start := time.Now()
	_, err := RunClient(ctx, Config{Count: 1}, &n, DefaultPort)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("client: %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("client took %v", d)
	}
}

func TestConnectRejected(t *testing.T) {
	var n verbstest.Network
	_, err := RunClient(context.Background(), Config{Count: 1}, &n, DefaultPort)
	var rej *verbs.RejectError
	if !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidServiceID {
		t.Fatalf("connect to an unbound port: %v, want REJ reason 8", err)
	}
}

// lingering is a connector whose endpoints never close: a client whose
// DREQ is lost, as far as the server can tell.
type lingering struct {
	net  *verbstest.Network
	mu   sync.Mutex
	kept []verbs.Endpoint
}

func (c *lingering) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	ep, err := c.net.Connect(ctx, port, p)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.kept = append(c.kept, ep)
	c.mu.Unlock()
	return noClose{ep}, nil
}

type noClose struct{ verbs.Endpoint }

func (noClose) Close() error { return nil }

// TestServerCountEndsWithoutDisconnect: with -C the server ends after its
// Count pings once the last go-ahead is acknowledged, without the client's
// disconnect (rping's client sends its DREQ once and leaves; under loss it
// may never arrive).
func TestServerCountEndsWithoutDisconnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n verbstest.Network
	l, _ := n.Listen(DefaultPort)
	defer l.Close()
	done := make(chan error, 1)
	var sst Stats
	var acct *accounting
	al := wrapping{l, func(ep verbs.Endpoint) verbs.Endpoint { acct = &accounting{Endpoint: ep}; return acct }}
	go func() {
		var err error
		sst, err = RunServer(ctx, Config{Count: 5}, al)
		done <- err
	}()
	c := &lingering{net: &n}
	cst, cerr := RunClient(ctx, Config{Count: 5, Validate: true}, c, DefaultPort)
	serr := <-done
	if cerr != nil || serr != nil || cst.Pings != 5 || sst.Pings != 5 {
		t.Fatalf("client %v (%d pings), server %v (%d pings); want both 5 pings and no error", cerr, cst.Pings, serr, sst.Pings)
	}
	if ctx.Err() != nil {
		t.Fatal("the server waited for the context")
	}
	// Close cancels what is outstanding: the server must have seen its
	// last go-ahead complete before it closed.
	if acct == nil || !acct.closed || acct.outstanding != 0 {
		t.Fatalf("server endpoint %+v: closed with SENDs outstanding", acct)
	}
	for _, ep := range c.kept {
		ep.Close()
	}
}

// unackedLast fails the server's last go-ahead (its 2n-th SEND completion)
// with a retry-exceeded error.
type unackedLast struct {
	verbs.Endpoint
	n, sends int
}

func (e *unackedLast) Poll(out []verbs.Completion) (int, error) {
	k, err := e.Endpoint.Poll(out)
	for i := range out[:k] {
		if out[i].Op == verbs.OpSend {
			if e.sends++; e.sends == 2*e.n {
				out[i].Err = verbs.ErrRetryExceeded
			}
		}
	}
	return k, err
}

func TestServerLastGoAheadUnacknowledged(t *testing.T) {
	wrap := func(l verbs.Listener) verbs.Listener {
		return wrapping{l, func(ep verbs.Endpoint) verbs.Endpoint { return &unackedLast{Endpoint: ep, n: 4} }}
	}
	_, cerr, sst, serr := run(t, Config{Count: 4, Validate: true}, Config{Count: 4}, wrap)
	if cerr != nil {
		t.Fatalf("client: %v", cerr)
	}
	if !errors.Is(serr, ErrLastGoAhead) || !errors.Is(serr, verbs.ErrRetryExceeded) || sst.Pings != 4 {
		t.Fatalf("server: %v after %d pings, want ErrLastGoAhead after 4", serr, sst.Pings)
	}
}

// accounting counts an endpoint's SENDs posted and completed, and what was
// outstanding when it closed.
type accounting struct {
	verbs.Endpoint
	posted, completed, outstanding int
	closed                         bool
}

func (e *accounting) Send(id uint64, local verbs.Segment, signaled bool) error {
	e.posted++
	return e.Endpoint.Send(id, local, signaled)
}

func (e *accounting) Poll(out []verbs.Completion) (int, error) {
	k, err := e.Endpoint.Poll(out)
	for _, c := range out[:k] {
		if c.Op == verbs.OpSend {
			e.completed++
		}
	}
	return k, err
}

func (e *accounting) Close() error {
	e.outstanding, e.closed = e.posted-e.completed, true
	return e.Endpoint.Close()
}

// slowLeaver is a client whose endpoint closes a while after RunClient
// asks, as rping's client does after printing its last ping.
type slowLeaver struct {
	net    *verbstest.Network
	delay  time.Duration
	closed chan time.Time
}

func (c *slowLeaver) Connect(ctx context.Context, port uint16, p verbs.ConnParams) (verbs.Endpoint, error) {
	ep, err := c.net.Connect(ctx, port, p)
	if err != nil {
		return nil, err
	}
	return &delayedClose{Endpoint: ep, c: c}, nil
}

type delayedClose struct {
	verbs.Endpoint
	c *slowLeaver
}

func (e *delayedClose) Close() error {
	time.Sleep(e.c.delay)
	e.c.closed <- time.Now()
	return e.Endpoint.Close()
}

// closeTimed records when an endpoint was closed.
type closeTimed struct {
	verbs.Endpoint
	at chan time.Time
}

func (e *closeTimed) Close() error {
	e.at <- time.Now()
	return e.Endpoint.Close()
}

// TestServerCountLetsTheClientLeaveFirst: a server with a Count, its
// pings done, waits for the client's disconnect rather than disconnecting
// first (rping's client, disconnected before it reads its last go-ahead,
// exits 0 without printing that ping), and ends soon after the client
// leaves, well before ClientLeaveGrace.
func TestServerCountLetsTheClientLeaveFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n verbstest.Network
	l, _ := n.Listen(DefaultPort)
	defer l.Close()
	serverClosed := make(chan time.Time, 1)
	al := wrapping{l, func(ep verbs.Endpoint) verbs.Endpoint { return &closeTimed{Endpoint: ep, at: serverClosed} }}
	done := make(chan error, 1)
	go func() {
		st, err := RunServer(ctx, Config{Count: 3}, al)
		if err == nil && st.Pings != 3 {
			err = fmt.Errorf("%d pings, want 3", st.Pings)
		}
		done <- err
	}()
	c := &slowLeaver{net: &n, delay: 300 * time.Millisecond, closed: make(chan time.Time, 1)}
	start := time.Now()
	if _, err := RunClient(ctx, Config{Count: 3, Validate: true}, c, DefaultPort); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	cAt, sAt := <-c.closed, <-serverClosed
	if sAt.Before(cAt) {
		t.Fatalf("the server disconnected %v before the client left", cAt.Sub(sAt))
	}
	if d := sAt.Sub(start); d >= ClientLeaveGrace {
		t.Fatalf("the server ended %v after the start: it did not see the client leave", d)
	}
}
