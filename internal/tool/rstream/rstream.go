// Package rstream runs librdmacm's rstream example (rdma-core
// librdmacm/examples/rstream.c) over any byte stream: its latency and
// bandwidth tests, its 16-byte sync before each, its data pattern and
// check (-T v) and its report, line for line.
//
// By default a client connects twice: once for the latency tests (each
// size's transfers sent, then as many received, size_to_count times) and
// once for the bandwidth tests (size_to_count transfers one way, then the
// other, once); -S all adds the sizes between the powers of two. With
// -I, -C or -S SIZE one connection runs that one test ("custom").
package rstream

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rsocket"
)

// DefaultPort is rstream's port (7471).
const DefaultPort = 7471

// Stream is one connection: an rsocket, or a TCP socket for -T s.
type Stream interface {
	Write(ctx context.Context, p []byte) (int, error)
	ReadFull(ctx context.Context, p []byte) error
	// Shutdown ends both directions (rshutdown SHUT_RDWR).
	Shutdown(ctx context.Context) error
	Close() error
}

// Open makes the next connection: the client connects, the server
// accepts. latency says which default phase it is for (rstream's
// opt_latency and opt_bandwidth, which only tune the inline size).
type Open func(ctx context.Context, latency bool) (Stream, error)

// Config is the test rstream's flags choose.
type Config struct {
	// Client is true with -s.
	Client bool
	// Custom runs one test of Iterations x Count transfers of Size bytes
	// (any of -I, -C, -S SIZE); otherwise the default sets run.
	Custom                  bool
	Iterations, Count, Size int
	// AllSizes is -S all: the default sets include every size.
	AllSizes bool
	// Verify is -T v: data carries rstream's byte pattern and is checked.
	Verify bool
}

// Defaults of rstream.c for the custom test.
const (
	DefaultIterations = 1
	DefaultCount      = 1000
	DefaultSize       = 1000
)

// sizes is rstream.c's test_size: the powers of two (option 0) run by
// default, the sizes between them (option 1) with -S all.
var sizes = []struct {
	size int
	all  bool
}{
	{1 << 6, false},
	{1 << 7, true}, {1<<7 + 1<<6, true},
	{1 << 8, true}, {1<<8 + 1<<7, true},
	{1 << 9, true}, {1<<9 + 1<<8, true},
	{1 << 10, true}, {1<<10 + 1<<9, true},
	{1 << 11, true}, {1<<11 + 1<<10, true},
	{1 << 12, false}, {1<<12 + 1<<11, true},
	{1 << 13, true}, {1<<13 + 1<<12, true},
	{1 << 14, true}, {1<<14 + 1<<13, true},
	{1 << 15, true}, {1<<15 + 1<<14, true},
	{1 << 16, false}, {1<<16 + 1<<15, true},
	{1 << 17, true}, {1<<17 + 1<<16, true},
	{1 << 18, true}, {1<<18 + 1<<17, true},
	{1 << 19, true}, {1<<19 + 1<<18, true},
	{1 << 20, false}, {1<<20 + 1<<19, true},
	{1 << 21, true}, {1<<21 + 1<<20, true},
	{1 << 22, true}, {1<<22 + 1<<21, true},
}

// MaxSize is the largest default test's transfer.
const MaxSize = 1<<22 + 1<<21

// sizeToCount is common.c's size_to_count.
func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// SizeString is common.c's size_str: 1.5k, 64k, 1m.
func SizeString(size int64) string {
	base, mag := int64(1), ""
	switch {
	case size >= 1<<30:
		base, mag = 1<<30, "g"
	case size >= 1<<20:
		base, mag = 1<<20, "m"
	case size >= 1<<10:
		base, mag = 1<<10, "k"
	}
	if size/base < 10 {
		if f := size % base * 10 / base; f != 0 {
			return fmt.Sprintf("%d.%d%s", size/base, f, mag)
		}
	}
	return fmt.Sprintf("%d%s", size/base, mag)
}

// countString is common.c's cnt_str.
func countString(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%db", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%dm", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprintf("%d", n)
}

// Header is the line rstream prints first.
var Header = fmt.Sprintf("%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")

// Result is one test's line.
type Result struct {
	Name                    string
	Size, Count, Iterations int
	Elapsed                 time.Duration
}

// Bytes is what moved both ways.
func (r Result) Bytes() int64 { return int64(r.Iterations) * int64(r.Count) * int64(r.Size) * 2 }

// String is show_perf's line.
func (r Result) String() string {
	usec := float64(r.Elapsed.Microseconds())
	if usec == 0 {
		usec = 1
	}
	b := r.Bytes()
	return fmt.Sprintf("%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", r.Name, SizeString(int64(r.Size)),
		countString(int64(r.Count)), countString(int64(r.Iterations)), SizeString(b),
		usec/1e6, float64(b)*8/(1000*usec), usec/float64(r.Iterations)/float64(r.Count*2))
}

// pattern is common.c's format_buf and verify_buf: one byte counter for
// everything a side sends, one for everything it receives.
type pattern struct {
	next  byte
	total int64
}

func (p *pattern) format(b []byte) {
	for i := range b {
		b[i] = p.next
		p.next++
	}
}

func (p *pattern) verify(b []byte) error {
	for i := range b {
		if b[i] != p.next {
			return fmt.Errorf("data verification failed byte %d", p.total+int64(i))
		}
		p.next++
	}
	p.total += int64(len(b))
	return nil
}

// defaultTests are the latency and the bandwidth tests of the default
// run (init_latency_test, init_bandwidth_test).
func defaultTests(cfg Config) (lat, bw []Result) {
	for _, s := range sizes {
		if s.all && !cfg.AllSizes {
			continue
		}
		name := SizeString(int64(s.size))
		if len(name) > 4 {
			name = name[:4] // rstream formats it into 5 bytes
		}
		lat = append(lat, Result{Name: name + "_lat", Size: s.size, Count: 1, Iterations: sizeToCount(s.size)})
		bw = append(bw, Result{Name: name + "_bw", Size: s.size, Count: sizeToCount(s.size), Iterations: 1})
	}
	return lat, bw
}

// runner is one side's state across the tests.
type runner struct {
	cfg     Config
	buf     []byte
	out, in pattern
	stream  Stream
}

// Run runs rstream's tests on connections from open, printing the header
// and each test's line to out.
func Run(ctx context.Context, cfg Config, open Open, out io.Writer) error {
	if cfg.Custom {
		if cfg.Iterations <= 0 || cfg.Count <= 0 || cfg.Size <= 0 {
			return fmt.Errorf("rstream: iterations %d, transfers %d and size %d must be positive", cfg.Iterations, cfg.Count, cfg.Size)
		}
	}
	size := MaxSize
	if cfg.Custom {
		size = max(cfg.Size, 16)
	}
	r := &runner{cfg: cfg, buf: make([]byte, size)}
	fmt.Fprint(out, Header)
	if cfg.Custom {
		return r.phase(ctx, open, false, out, []Result{{Name: "custom", Size: cfg.Size, Count: cfg.Count, Iterations: cfg.Iterations}})
	}
	lat, bw := defaultTests(cfg)
	if err := r.phase(ctx, open, true, out, lat); err != nil {
		return err
	}
	return r.phase(ctx, open, false, out, bw)
}

// phase runs tests on one connection, then shuts it down and closes it.
func (r *runner) phase(ctx context.Context, open Open, latency bool, out io.Writer, tests []Result) error {
	s, err := open(ctx, latency)
	if err != nil {
		return err
	}
	r.stream = s
	for _, t := range tests {
		if err := r.test(ctx, &t); err != nil {
			s.Close()
			return err
		}
		fmt.Fprint(out, t.String())
	}
	// rstream ignores rshutdown's result: the peer may be gone first.
	_ = s.Shutdown(ctx)
	return s.Close()
}

// test is run_test: the sync, then the timed transfers.
func (r *runner) test(ctx context.Context, t *Result) error {
	if err := r.sync(ctx); err != nil {
		return err
	}
	start := time.Now()
	for range t.Iterations {
		for range t.Count {
			if err := r.xfer(ctx, r.cfg.Client, t.Size); err != nil {
				return err
			}
		}
		for range t.Count {
			if err := r.xfer(ctx, !r.cfg.Client, t.Size); err != nil {
				return err
			}
		}
	}
	t.Elapsed = time.Since(start)
	return nil
}

// sync is sync_test: 16 bytes from the client, then 16 back.
func (r *runner) sync(ctx context.Context) error {
	if err := r.xfer(ctx, r.cfg.Client, 16); err != nil {
		return err
	}
	return r.xfer(ctx, !r.cfg.Client, 16)
}

// xfer sends (send_xfer) or receives (recv_xfer) size bytes.
func (r *runner) xfer(ctx context.Context, send bool, size int) error {
	b := r.buf[:size]
	if send {
		if r.cfg.Verify {
			r.out.format(b)
		}
		if _, err := r.stream.Write(ctx, b); err != nil {
			return fmt.Errorf("rsend: %w", err)
		}
		return nil
	}
	if err := r.stream.ReadFull(ctx, b); err != nil {
		return fmt.Errorf("rrecv: %w", err)
	}
	if r.cfg.Verify {
		return r.in.verify(b)
	}
	return nil
}

// DefaultBuffer is what rstream sets SO_SNDBUF and SO_RCVBUF to without
// -B; rsocket doubles it into its buffers.
const DefaultBuffer = 1 << 19

// RsocketConfig is the rsocket.Config rstream's set_options makes: -B
// (0: DefaultBuffer) for both buffers, -k's keepalive.
func RsocketConfig(buffer int, keepalive time.Duration) rsocket.Config {
	if buffer == 0 {
		buffer = DefaultBuffer
	}
	return rsocket.Config{RcvBuf: buffer << 1, SndBuf: buffer << 1, Keepalive: keepalive}
}

// Dialer makes each connection by connecting to port through c.
func Dialer(c verbs.Connector, port uint16, cfg rsocket.Config) Open {
	return func(ctx context.Context, _ bool) (Stream, error) {
		s, err := rsocket.Dial(ctx, c, port, cfg)
		if err != nil {
			return nil, fmt.Errorf("rconnect: %w", err)
		}
		return s, nil
	}
}

// Acceptor makes each connection by accepting the next on l.
func Acceptor(l verbs.Listener, cfg rsocket.Config) Open {
	return func(ctx context.Context, _ bool) (Stream, error) {
		s, err := rsocket.Accept(ctx, l, cfg)
		if err != nil {
			return nil, fmt.Errorf("raccept: %w", err)
		}
		return s, nil
	}
}
