package baseline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/vethpair"
)

// Header bytes in front of a UDP or TCP payload in an Ethernet frame (no
// VLAN, IPv4 without options).
const (
	udpOverhead = 14 + 20 + 8
	tcpOverhead = 14 + 20 + 20 // without TCP options; Linux adds 12 for timestamps
)

const basePort = 47000

func payloadSize(frame, overhead int) (int, error) {
	n := frame - overhead
	if n < 1 {
		return 0, fmt.Errorf("frame size %d leaves no payload after %d header bytes", frame, overhead)
	}
	return n, nil
}

// listenUDP opens a UDP socket inside host h.
func listenUDP(h *vethpair.Host, port int) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := h.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.IPv4, uint16(port))))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("udp listen in %s: %w", h.Name, err)
	}
	return c, nil
}

// UDPRate sends frames of the given size from A to B for d and returns the
// rate B received. The sender is unpaced; what the receiver sees is the rate
// the path sustains.
func UDPRate(p *vethpair.Pair, frame int, d time.Duration) (Rate, error) {
	return udpRate(context.Background(), p, frame, d)
}

func udpRate(ctx context.Context, p *vethpair.Pair, frame int, d time.Duration) (Rate, error) {
	n, err := payloadSize(frame, udpOverhead)
	if err != nil {
		return Rate{}, err
	}
	rx, err := listenUDP(p.B, basePort)
	if err != nil {
		return Rate{}, err
	}
	defer rx.Close()
	_ = rx.SetReadBuffer(8 << 20)
	tx, err := listenUDP(p.A, basePort)
	if err != nil {
		return Rate{}, err
	}
	defer tx.Close()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.B.IPv4, basePort))
	rbuf, msg := make([]byte, 65536), make([]byte, n)
	r, ok, sendErr := flood(ctx, d, frame,
		func() error { _, err := rx.Read(rbuf); return err },
		func() error {
			for range 64 {
				// ENOBUFS under load is normal; anything else is not.
				if _, err := tx.WriteToUDP(msg, dst); err != nil && !errors.Is(err, net.ErrClosed) && !isTransient(err) {
					return err
				}
			}
			return nil
		},
		func() {}, func() { rx.Close() })
	if sendErr != nil {
		return Rate{}, fmt.Errorf("udp send: %w", sendErr)
	}
	if !ok {
		return Rate{}, errors.New("udp: no frame reached the receiver within 2s")
	}
	return r, nil
}

// UDPPingPong bounces a frame of the given size between A and B and returns
// the round-trip times of up to count exchanges, stopping early after d.
func UDPPingPong(p *vethpair.Pair, frame, count int, d time.Duration) (Latency, error) {
	return udpPingPong(context.Background(), p, frame, count, d)
}

func udpPingPong(ctx context.Context, p *vethpair.Pair, frame, count int, d time.Duration) (Latency, error) {
	n, err := payloadSize(frame, udpOverhead)
	if err != nil {
		return Latency{}, err
	}
	srv, err := listenUDP(p.B, basePort+1)
	if err != nil {
		return Latency{}, err
	}
	defer srv.Close()
	cli, err := listenUDP(p.A, basePort+1)
	if err != nil {
		return Latency{}, err
	}
	defer cli.Close()
	go func() {
		buf := make([]byte, 65536)
		for {
			m, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if _, err := srv.WriteToUDPAddrPort(buf[:m], from); err != nil {
				return
			}
		}
	}()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.B.IPv4, basePort+1))
	msg, buf := make([]byte, n), make([]byte, 65536)
	samples := make([]time.Duration, 0, count)
	deadline := time.Now().Add(d)
	for i := 0; i < count+warmup && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if _, err := cli.WriteToUDP(msg, dst); err != nil {
			return Latency{}, fmt.Errorf("udp ping: %w", err)
		}
		_ = cli.SetReadDeadline(t0.Add(time.Second))
		if _, err := cli.Read(buf); err != nil {
			return Latency{}, fmt.Errorf("udp pong %d: %w", i, err)
		}
		if i >= warmup {
			samples = append(samples, time.Since(t0))
		}
	}
	return Summarize(samples), nil
}

// warmup exchanges are not counted: they fill caches and wake the scheduler.
const warmup = 100

// tcpPair opens a connection from A to B and returns both ends.
func tcpPair(p *vethpair.Pair, port int) (client, server *net.TCPConn, err error) {
	var ln *net.TCPListener
	if err := p.B.Do(func() error {
		var err error
		ln, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(p.B.IPv4, uint16(port))))
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("tcp listen in %s: %w", p.B.Name, err)
	}
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		_ = ln.SetDeadline(time.Now().Add(5 * time.Second))
		c, err := ln.AcceptTCP()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- c
	}()
	if err := p.A.Do(func() error {
		var err error
		d := net.Dialer{Timeout: 5 * time.Second}
		var c net.Conn
		c, err = d.Dial("tcp4", netip.AddrPortFrom(p.B.IPv4, uint16(port)).String())
		if err == nil {
			client = c.(*net.TCPConn)
		}
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("tcp dial from %s: %w", p.A.Name, err)
	}
	select {
	case server = <-accepted:
	case err := <-acceptErr:
		client.Close()
		return nil, nil, fmt.Errorf("tcp accept in %s: %w", p.B.Name, err)
	}
	for _, c := range []*net.TCPConn{client, server} {
		if err := c.SetNoDelay(true); err != nil {
			client.Close()
			server.Close()
			return nil, nil, err
		}
	}
	return client, server, nil
}

// TCPRate streams messages of the given frame size from A to B with
// TCP_NODELAY and returns the message rate B received.
func TCPRate(p *vethpair.Pair, frame int, d time.Duration) (Rate, error) {
	return tcpRate(context.Background(), p, frame, d)
}

func tcpRate(ctx context.Context, p *vethpair.Pair, frame int, d time.Duration) (Rate, error) {
	n, err := payloadSize(frame, tcpOverhead)
	if err != nil {
		return Rate{}, err
	}
	cli, srv, err := tcpPair(p, basePort+2)
	if err != nil {
		return Rate{}, err
	}
	defer cli.Close()
	defer srv.Close()
	rbuf, msg := make([]byte, n), make([]byte, n)
	r, ok, sendErr := flood(ctx, d, frame,
		func() error { _, err := io.ReadFull(srv, rbuf); return err },
		func() error { _, err := cli.Write(msg); return err },
		func() { cli.Close() }, func() { srv.Close() })
	if sendErr != nil && !errors.Is(sendErr, net.ErrClosed) {
		return Rate{}, fmt.Errorf("tcp send: %w", sendErr)
	}
	if !ok {
		return Rate{}, errors.New("tcp: no message reached the receiver within 2s")
	}
	return r, nil
}

// TCPPingPong bounces a message of the given frame size over a TCP
// connection with TCP_NODELAY.
func TCPPingPong(p *vethpair.Pair, frame, count int, d time.Duration) (Latency, error) {
	return tcpPingPong(context.Background(), p, frame, count, d)
}

func tcpPingPong(ctx context.Context, p *vethpair.Pair, frame, count int, d time.Duration) (Latency, error) {
	n, err := payloadSize(frame, tcpOverhead)
	if err != nil {
		return Latency{}, err
	}
	cli, srv, err := tcpPair(p, basePort+3)
	if err != nil {
		return Latency{}, err
	}
	defer cli.Close()
	defer srv.Close()
	go func() {
		buf := make([]byte, n)
		for {
			if _, err := io.ReadFull(srv, buf); err != nil {
				return
			}
			if _, err := srv.Write(buf); err != nil {
				return
			}
		}
	}()
	msg, buf := make([]byte, n), make([]byte, n)
	samples := make([]time.Duration, 0, count)
	deadline := time.Now().Add(d)
	for i := 0; i < count+warmup && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if _, err := cli.Write(msg); err != nil {
			return Latency{}, fmt.Errorf("tcp ping: %w", err)
		}
		_ = cli.SetReadDeadline(t0.Add(time.Second))
		if _, err := io.ReadFull(cli, buf); err != nil {
			return Latency{}, fmt.Errorf("tcp pong %d: %w", i, err)
		}
		if i >= warmup {
			samples = append(samples, time.Since(t0))
		}
	}
	return Summarize(samples), nil
}

// countWindow waits (up to 2s, or until ctx ends) for the first message to arrive, so that
// start-up is not measured, then returns what arrived during d. It reports
// false if nothing arrived.
func countWindow(ctx context.Context, received *atomic.Uint64, d time.Duration, frame int) (Rate, bool) {
	for deadline := time.Now().Add(2 * time.Second); received.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return Rate{}, false
		}
	}
	start, c0 := time.Now(), received.Load()
	window := time.NewTimer(d)
	select {
	case <-window.C:
	case <-ctx.Done():
		window.Stop()
	}
	m, elapsed := received.Load()-c0, time.Since(start)
	return Rate{Messages: m, Bytes: m * uint64(frame), Elapsed: elapsed}, true
}

// flood runs recv in a loop on one goroutine and send on another for the
// measuring window of countWindow, and returns the rate of successful
// receives, whether any arrived, and the error that stopped send (nil if
// the window ended first). stopSend and stopRecv unblock the two loops
// afterwards, in that order.
func flood(ctx context.Context, d time.Duration, frame int, recv, send func() error, stopSend, stopRecv func()) (Rate, bool, error) {
	var received atomic.Uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for recv() == nil {
			received.Add(1)
		}
	}()
	stop := make(chan struct{})
	var sendErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := send(); err != nil {
				sendErr = err
				return
			}
		}
	}()
	r, ok := countWindow(ctx, &received, d, frame)
	close(stop)
	stopSend()
	wg.Wait()
	stopRecv()
	<-done
	return r, ok, sendErr
}
