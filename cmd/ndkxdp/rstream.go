package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rsocket"
	"github.com/ndkxdp/ndkxdp/internal/tool/rstream"
	"github.com/ndkxdp/ndkxdp/ndk"
)

const rstreamUsage = `usage: ndkxdp rstream [-s SERVER] [-b ADDR] [-f ip|ipv6|name] [-B SIZE] [-i SIZE] [-I ITERS] [-C COUNT] [-S SIZE|all] [-p PORT] [-k SECONDS] [-T OPT]... [-capture FILE] -dev IFNAME
       ndkxdp rstream ... -daemon SOCKET
       ndkxdp rstream -T s ...`

const riostreamUsage = `usage: ndkxdp riostream [-s SERVER] [-b ADDR] [-f ip|ipv6|name] [-B SIZE] [-i SIZE] [-I ITERS] [-C COUNT] [-S SIZE|all] [-p PORT] [-T a|b|n|v]... [-capture FILE] -dev IFNAME
       ndkxdp riostream ... -daemon SOCKET`

const riostreamSynopsis = riostreamUsage + `

librdmacm's riostream over ndkxdp on IFNAME, or through the ndkxdp daemon
serving at SOCKET: rstream's tests over an rsocket, but each side maps
its buffer for the other's direct writes (riomap, RDMA_IOMAPSIZE 1) and
the transfers are RDMA WRITEs into it (riowrite), the receiver watching
the buffer's last byte. -T v checks the data pattern of each round's last
write. Either side may be Linux riostream.`

const rstreamSynopsis = rstreamUsage + `

librdmacm's rstream over ndkxdp on IFNAME, or through the ndkxdp daemon
serving at SOCKET: an rsocket stream (rdma_cm port space TCP, data by RDMA
WRITE with immediate, rsocket.c's credits and buffer offers) between a
client (-s) and a server, timed as rstream times it. By default the client
connects twice, for the latency tests (64 B to 1 MiB, each size sent then
answered size_to_count times) and then the bandwidth tests; -S all adds
the sizes between; -I, -C or -S SIZE run one custom test instead. -T v
checks rstream's data pattern, -T s runs over kernel TCP sockets instead
(no adapter needed). Either side may be Linux rstream.`

type rstreamFlags struct {
	name                                       string // rstream or riostream
	server, bind, format, dev, daemon, capture string
	buffer, inline, keepalive                  int
	iterations, count                          int
	sizeArg                                    string
	port                                       uint
	tests                                      rstreamTests
	cfg                                        rstream.Config
	timeout                                    time.Duration
}

// rstreamTests collects -T options, which rstream takes one per -T.
type rstreamTests struct {
	sockets, verify bool
	given           []string
}

func (t *rstreamTests) String() string { return strings.Join(t.given, ",") }

// Set is rstream.c's set_test_opt. Async, blocking and nonblocking
// choose how rstream's own calls wait, and resolve rdma_getaddrinfo:
// nothing of them reaches the wire, and this rstream always waits by
// polling, then blocking.
func (t *rstreamTests) Set(v string) error {
	t.given = append(t.given, v)
	word := strings.ToLower(v)
	is := func(letter, name string, n int) bool {
		return word == letter || len(word) > 1 && strings.HasPrefix(word, name[:n])
	}
	switch {
	case is("s", "socket", 6):
		t.sockets = true
	case is("v", "verify", 6):
		t.verify = true
	case is("f", "fork", 4):
		return fmt.Errorf("%s: fork server processing (a child per connection) is not served", v)
	case is("a", "async", 5), is("b", "block", 5), is("n", "nonblock", 8), is("r", "resolve", 7):
	default:
		return fmt.Errorf("%s: test options are s|sockets, a|async, b|blocking, f|fork, n|nonblocking, r|resolve, v|verify", v)
	}
	return nil
}

func parseRstream(args []string, stdout, stderr io.Writer) (rstreamFlags, error) {
	return parseStreamTool("rstream", args, stdout, stderr)
}

// parseStreamTool parses rstream's flags, or riostream's: the same but
// -T s, r and f and -k.
func parseStreamTool(name string, args []string, stdout, stderr io.Writer) (rstreamFlags, error) {
	usage, synopsis := rstreamUsage, rstreamSynopsis
	if name == "riostream" {
		usage, synopsis = riostreamUsage, riostreamSynopsis
	}
	fs := cmdline.NewFlagSet(name, synopsis, stderr)
	f := rstreamFlags{name: name}
	fs.StringVar(&f.server, "s", "", "the server's address or host name (without it: be the server)")
	fs.StringVar(&f.bind, "b", "", "the local address to bind (one of the interface's)")
	fs.StringVar(&f.format, "f", "", "address format: ip, ipv6 or name (gid, AF_IB, is InfiniBand's)")
	fs.IntVar(&f.buffer, "B", 0, "socket buffer size in bytes (SO_SNDBUF and SO_RCVBUF; default 512 KiB, rstream's)")
	fs.IntVar(&f.inline, "i", 64, "inline size for the latency tests (a verbs send option; ndkxdp has no inline limit)")
	fs.IntVar(&f.iterations, "I", 0, "iterations of one custom test")
	fs.IntVar(&f.count, "C", 0, "transfers each way per iteration of one custom test")
	fs.StringVar(&f.sizeArg, "S", "", "transfer size in bytes of one custom test, or all: every size in the default tests")
	fs.UintVar(&f.port, "p", rstream.DefaultPort, "port (rdma_cm's TCP port space, or TCP's with -T s)")
	fs.IntVar(&f.keepalive, "k", 0, "keepalive time in seconds (SO_KEEPALIVE, TCP_KEEPIDLE)")
	fs.Var(&f.tests, "T", "test option, one per -T: s|sockets, a|async, b|blocking, n|nonblocking, r|resolve, v|verify")
	fs.StringVar(&f.dev, "dev", "", "network interface to attach to (in this network namespace)")
	fs.StringVar(&f.daemon, "daemon", "", "use the ndkxdp daemon serving at this unix socket instead of attaching to -dev")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame the adapter sends or receives to this pcap file")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	if name == "riostream" {
		for _, v := range f.tests.given {
			if w := strings.ToLower(v); w == "s" || w == "r" || strings.HasPrefix(w, "socket") || strings.HasPrefix(w, "resolve") {
				return f, cmdline.Usagef("-T %s: riostream's test options are a|async, b|blocking, n|nonblocking, v|verify", v)
			}
		}
		if f.keepalive != 0 {
			return f, cmdline.Usagef("-k: riostream has no keepalive option")
		}
	}
	c := &f.cfg
	c.Client, c.Verify = f.server != "", f.tests.verify
	c.Iterations, c.Count, c.Size = rstream.DefaultIterations, rstream.DefaultCount, rstream.DefaultSize
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["I"] {
		c.Custom, c.Iterations = true, f.iterations
	}
	if set["C"] {
		c.Custom, c.Count = true, f.count
	}
	if set["S"] {
		if strings.HasPrefix(strings.ToLower(f.sizeArg), "all") {
			c.AllSizes = true
		} else if n, err := strconv.Atoi(f.sizeArg); err != nil || n < 1 {
			return f, cmdline.Usagef("-S %s: a transfer size in bytes, or all", f.sizeArg)
		} else {
			c.Custom, c.Size = true, n
		}
	}
	switch strings.ToLower(f.format) {
	case "", "ip", "ipv6", "name":
	case "gid":
		return f, cmdline.Usagef("-f gid: AF_IB addresses are InfiniBand's; RoCE peers are named by IP address (-f ip)")
	default:
		fmt.Fprintln(stderr, "Warning: unknown address format")
	}
	switch {
	case c.Custom && (c.Iterations < 1 || c.Count < 1):
		return f, cmdline.Usagef("-I %d -C %d: both must be positive", c.Iterations, c.Count)
	case c.Custom && c.Size > 1<<30:
		return f, cmdline.Usagef("-S %d: at most 1 GiB", c.Size)
	case f.buffer < 0 || f.buffer > 1<<29:
		return f, cmdline.Usagef("-B %d: a buffer size up to 512 MiB", f.buffer)
	case f.buffer != 0 && f.buffer < 2048:
		return f, cmdline.Usagef("-B %d: at least 2048 bytes (rsocket's low-water mark)", f.buffer)
	case f.keepalive < 0:
		return f, cmdline.Usagef("-k %d: keepalive time in seconds must be positive", f.keepalive)
	case f.port == 0 || f.port > 0xFFFF:
		return f, cmdline.Usagef("-p %d: not a port", f.port)
	case f.timeout <= 0:
		return f, cmdline.Usagef("-timeout %v: must be positive", f.timeout)
	}
	if f.tests.sockets {
		if f.dev != "" || f.daemon != "" || f.capture != "" {
			return f, cmdline.Usagef("-T s runs over kernel TCP sockets: -dev, -daemon and -capture are for rsockets")
		}
		return f, nil
	}
	return f, checkAdapterFlags(f.dev, f.daemon, f.capture, usage)
}

// bufferSize is what rstream sets SO_SNDBUF and SO_RCVBUF to.
func (f *rstreamFlags) bufferSize() int {
	if f.buffer != 0 {
		return f.buffer
	}
	return rstream.DefaultBuffer
}

// runRstream is librdmacm's rstream on an ndkxdp adapter, or over kernel
// TCP with -T s.
func runRstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runStreamTool(ctx, "rstream", args, stdout, stderr)
}

// runRiostream is librdmacm's riostream on an ndkxdp adapter.
func runRiostream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runStreamTool(ctx, "riostream", args, stdout, stderr)
}

func runStreamTool(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	f, err := parseStreamTool(name, args, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	peer, bind, err := lookupEnds(ctx, f.server, f.bind, f.dev)
	if err != nil {
		return err
	}
	keepalive := func() {
		if f.keepalive > 0 {
			fmt.Fprintf(stdout, "Keepalive: ON\n  time: %d\n", f.keepalive)
		}
	}
	var open rstream.Open
	if f.tests.sockets {
		open, err = tcpStreams(ctx, &f, peer, bind, keepalive)
	} else {
		var done func()
		open, done, err = rsocketStreams(ctx, &f, peer, bind, keepalive)
		if done != nil {
			defer done()
		}
	}
	if err != nil {
		return err
	}
	if name == "rstream" {
		return stepTimedOut(ctx, rstream.Run(ctx, f.cfg, open, stdout), f.timeout, name)
	}
	ioOpen := func(ctx context.Context, latency bool) (*rsocket.Conn, error) {
		s, err := open(ctx, latency)
		if err != nil {
			return nil, err
		}
		c, ok := s.(*rsocket.Conn)
		if !ok {
			s.Close()
			return nil, fmt.Errorf("riostream: %T is no rsocket", s)
		}
		return c, nil
	}
	return stepTimedOut(ctx, rstream.RunIO(ctx, f.cfg, ioOpen, stdout), f.timeout, name)
}

// rsocketStreams opens the adapter and returns how the next rsocket
// connection is made.
func rsocketStreams(ctx context.Context, f *rstreamFlags, peer, bind netip.Addr, keepalive func()) (rstream.Open, func(), error) {
	var opts ndk.Options
	if f.bind != "" && f.dev != "" {
		opts.Address = bind
	}
	d, closeDevice, err := cmdline.OpenTool(ctx, f.dev, f.daemon, f.capture, opts)
	if err != nil {
		return nil, nil, err
	}
	if f.daemon != "" && f.bind != "" && bind != d.Adapter.LocalAddress() {
		closeDevice()
		return nil, nil, cmdline.Usagef("-b %v: cannot assign requested address (EADDRNOTAVAIL): the daemon at %s serves %v", bind, f.daemon, d.Adapter.LocalAddress())
	}
	cfg := rstream.RsocketConfig(f.buffer, time.Duration(f.keepalive)*time.Second)
	if f.name == "riostream" {
		cfg.IOMap = rstream.IOMapSize
	}
	depths := ndkverbs.Depths{Send: rsocket.DefaultQueue, Receive: rsocket.DefaultQueue}
	if f.cfg.Client {
		dial := rstream.Dialer(&ndkverbs.Connector{Dev: d, Peer: peer, Depths: depths}, uint16(f.port), cfg)
		return func(ctx context.Context, latency bool) (rstream.Stream, error) {
			keepalive()
			return dial(ctx, latency)
		}, closeDevice, nil
	}
	l, err := ndkverbs.ListenAddr(d, netip.AddrPortFrom(bind, uint16(f.port)), depths)
	if err != nil {
		closeDevice()
		return nil, nil, fmt.Errorf("rlisten: %w", err)
	}
	accept := rstream.Acceptor(l, cfg)
	return func(ctx context.Context, latency bool) (rstream.Stream, error) {
			keepalive()
			s, err := accept(ctx, latency)
			if err == nil {
				keepalive()
			}
			return s, err
		}, func() {
			l.Close()
			closeDevice()
		}, nil
}

// tcpStreams returns how the next TCP connection is made (-T s): the
// server's listening socket is made now.
func tcpStreams(ctx context.Context, f *rstreamFlags, peer, bind netip.Addr, keepalive func()) (rstream.Open, error) {
	size := f.bufferSize()
	tune := func(c *net.TCPConn) {
		_ = c.SetReadBuffer(size)
		_ = c.SetWriteBuffer(size)
		_ = c.SetNoDelay(true)
		if f.keepalive > 0 {
			_ = c.SetKeepAlive(true)
			_ = c.SetKeepAlivePeriod(time.Duration(f.keepalive) * time.Second)
		}
		keepalive()
	}
	if f.cfg.Client {
		d := net.Dialer{}
		if f.bind != "" {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(bind, 0))
		}
		return func(ctx context.Context, _ bool) (rstream.Stream, error) {
			c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(peer, uint16(f.port)).String())
			if err != nil {
				return nil, fmt.Errorf("connect: %w", err)
			}
			tune(c.(*net.TCPConn))
			return tcpStream{c.(*net.TCPConn)}, nil
		}, nil
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(bind, uint16(f.port)).String())
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	context.AfterFunc(ctx, func() { l.Close() })
	return func(ctx context.Context, _ bool) (rstream.Stream, error) {
		stop := context.AfterFunc(ctx, func() { l.Close() })
		defer stop()
		c, err := l.Accept()
		if err != nil {
			return nil, fmt.Errorf("accept: %w", err)
		}
		tune(c.(*net.TCPConn))
		return tcpStream{c.(*net.TCPConn)}, nil
	}, nil
}

// tcpStream is a TCP connection as an rstream.Stream; ctx's deadline
// bounds each call.
type tcpStream struct{ c *net.TCPConn }

func (s tcpStream) deadline(ctx context.Context) {
	d, _ := ctx.Deadline()
	_ = s.c.SetDeadline(d)
}

func (s tcpStream) Write(ctx context.Context, p []byte) (int, error) {
	s.deadline(ctx)
	return s.c.Write(p)
}

func (s tcpStream) ReadFull(ctx context.Context, p []byte) error {
	s.deadline(ctx)
	_, err := io.ReadFull(s.c, p)
	return err
}

func (s tcpStream) Shutdown(context.Context) error {
	_ = s.c.CloseWrite()
	return s.c.CloseRead()
}

func (s tcpStream) Close() error { return s.c.Close() }
