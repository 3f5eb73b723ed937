package perftest

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// TCPLat is the baseline the latency tests are held against: the
// ping-pong of send_lat over a kernel TCP connection (Go's net, blocking
// reads in the runtime's netpoller), timed and reported exactly as
// send_lat is, so its columns compare one to one. The client sends
// first; each side writes p.Size bytes once it has read the peer's. Only
// Size and Iterations of p are used (defaults as send_lat's).
func TCPLat(ctx context.Context, conn net.Conn, p Params, client bool, out io.Writer) (LatStats, error) {
	p.Verb, p.Kind = Send, Lat
	if err := p.normalize(); err != nil {
		return LatStats{}, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		if err := tc.SetNoDelay(true); err != nil {
			return LatStats{}, fmt.Errorf("tcp_lat: TCP_NODELAY: %w", err)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return LatStats{}, fmt.Errorf("tcp_lat: %w", err)
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, p.Size)
	posted := make([]uint64, p.Iterations)
	clk := clock{time.Now()}
	for i := range posted {
		if i > 0 || !client {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return LatStats{}, tcpErr(ctx, "read", i, err)
			}
		}
		posted[i] = clk.now()
		if _, err := conn.Write(buf); err != nil {
			return LatStats{}, tcpErr(ctx, "write", i, err)
		}
	}
	if client { // the server's last answer
		if _, err := io.ReadFull(conn, buf); err != nil {
			return LatStats{}, tcpErr(ctx, "read", len(posted), err)
		}
	}
	st := latReport(&p, posted)
	PrintLatHeader(out)
	PrintLat(out, st)
	PrintFooter(out)
	return st, nil
}

func tcpErr(ctx context.Context, op string, i int, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return fmt.Errorf("tcp_lat: %s %d: %w", op, i, err)
}
