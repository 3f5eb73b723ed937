package baseline

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/internal/rawxdp"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// xdpQPN is the destination QP of baseline frames: the steering program
// redirects them like any RoCEv2 frame for a known QP.
const xdpQPN = 0x0000b5

// RoCEFrame returns a valid RoCEv2 RC SEND_ONLY frame from src to dst of
// exactly size bytes: the largest payload that fits, and Ethernet trailer
// bytes (as a NIC pads short frames) for the rest.
func RoCEFrame(src, dst *vethpair.Host, qpn uint32, size int) ([]byte, error) {
	h := rocev2.Headers{
		Eth: rocev2.EthernetFields{Dst: rocev2.MAC(dst.MAC), Src: rocev2.MAC(src.MAC)},
		IP:  rocev2.NewIPFields(src.IPv4, dst.IPv4),
		UDP: rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, qpn, qpn)},
		BTH: rocev2.BTHFields{Opcode: rocev2.RCSendOnly, PKey: rocev2.DefaultPKey, DestQP: qpn},
	}
	payload := (size - h.FrameLen(0)) &^ 3
	if payload < 0 {
		return nil, fmt.Errorf("a RoCEv2 frame needs at least %d bytes, not %d", h.FrameLen(0), size)
	}
	buf := make([]byte, size)
	if _, err := h.Encode(buf, make([]byte, payload)); err != nil {
		return nil, err
	}
	return buf, nil
}

// openXDPPair attaches the steering program on both hosts, binds one socket
// on queue 0 of each and steers xdpQPN to it.
func openXDPPair(p *vethpair.Pair, multiBuffer bool) (a, b *rawxdp.Endpoint, err error) {
	cfg := rawxdp.Config{Attach: loader.AttachAuto, MultiBuffer: multiBuffer, BusyPoll: true}
	if a, err = rawxdp.Open(p.A, cfg); err != nil {
		return nil, nil, err
	}
	if b, err = rawxdp.Open(p.B, cfg); err != nil {
		a.Close()
		return nil, nil, err
	}
	for _, e := range []*rawxdp.Endpoint{a, b} {
		if err := e.XDP.AddQP(xdpQPN, 0); err != nil {
			a.Close()
			b.Close()
			return nil, nil, err
		}
	}
	return a, b, nil
}

// txFrames copies frame into n UMEM frames of e and returns their
// descriptors (one per frame; frames larger than a UMEM frame are not
// supported here).
func txFrames(e *rawxdp.Endpoint, frame []byte, n int) ([]afxdp.Desc, error) {
	if len(frame) > int(e.UMEM.FrameSize()) {
		return nil, fmt.Errorf("%d-byte frame larger than a UMEM frame", len(frame))
	}
	descs := make([]afxdp.Desc, 0, n)
	for range n {
		addr, ok := e.Frames().Alloc()
		if !ok {
			break
		}
		copy(e.UMEM.Frame(addr), frame)
		descs = append(descs, afxdp.Desc{Addr: addr, Len: uint32(len(frame))})
	}
	if len(descs) == 0 {
		return nil, errors.New("no UMEM frames for transmission")
	}
	return descs, nil
}

// XDPRate sends frames of the given size from A's AF_XDP socket to B's for
// d and returns the rate B's RX ring delivered. Both sides busy-poll.
func XDPRate(p *vethpair.Pair, size int, d time.Duration) (Rate, error) {
	return xdpRate(context.Background(), p, size, d)
}

func xdpRate(ctx context.Context, p *vethpair.Pair, size int, d time.Duration) (Rate, error) {
	a, b, err := openXDPPair(p, false)
	if err != nil {
		return Rate{}, err
	}
	defer a.Close()
	defer b.Close()
	frame, err := RoCEFrame(p.A, p.B, xdpQPN, size)
	if err != nil {
		return Rate{}, err
	}
	pool, err := txFrames(a, frame, 1024)
	if err != nil {
		return Rate{}, err
	}

	var received atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rxErr, txErr error
	wg.Add(2)
	go func() { // receiver: count packets, recycle frames into the fill ring
		defer wg.Done()
		runtime.LockOSThread()
		rx, fill, frames := b.Sock.RX(), b.Sock.Fill(), b.Frames()
		for spins := 0; ; spins++ {
			if spins&1023 == 0 {
				select {
				case <-stop:
					return
				default:
				}
			}
			start, got := rx.Peek(64)
			if got == 0 {
				politeSpin(spins)
				if fill.NeedWakeup() {
					if err := b.Sock.WakeupRX(); err != nil {
						rxErr = err
						return
					}
				}
				continue
			}
			for i := range got {
				_ = frames.Free(rx.Get(start + i).Addr)
			}
			rx.Release(got)
			fill.FillFrom(frames, got)
			received.Add(uint64(got))
		}
	}()
	go func() { // sender: keep the TX ring full
		defer wg.Done()
		runtime.LockOSThread()
		tx, comp := a.Sock.TX(), a.Sock.Completion()
		free := append([]afxdp.Desc(nil), pool...)
		byAddr := make(map[uint64]afxdp.Desc, len(pool))
		for _, d := range pool {
			byAddr[d.Addr] = d
		}
		for spins := 0; ; spins++ {
			if spins&255 == 0 {
				select {
				case <-stop:
					return
				default:
				}
			}
			if start, got := comp.Peek(comp.Size()); got > 0 {
				for i := range got {
					free = append(free, byAddr[comp.Get(start+i)&^uint64(a.UMEM.FrameSize()-1)])
				}
				comp.Release(got)
			}
			if len(free) > 0 {
				start, got := tx.Reserve(uint32(min(len(free), 64)))
				for i := range got {
					tx.Set(start+i, free[len(free)-1-int(i)])
				}
				free = free[:len(free)-int(got)]
				tx.Submit()
			}
			if err := a.Sock.Kick(); err != nil && !errors.Is(err, afxdp.ErrTxBusy) {
				txErr = err
				return
			}
		}
	}()
	r, ok := countWindow(ctx, &received, d, size)
	close(stop)
	wg.Wait()
	if err := errors.Join(rxErr, txErr); err != nil {
		return Rate{}, fmt.Errorf("af_xdp rate: %w", err)
	}
	if !ok {
		return Rate{}, errors.New("af_xdp: no frame reached the receiver within 2s")
	}
	return r, nil
}

// XDPPingPong bounces a frame of the given size between the AF_XDP sockets
// of A and B and returns the round trips of up to count exchanges
// (stopping after d). Each side waits as ndkxdp's adaptive engines do:
// it spins on its RX ring for a while, then sleeps in poll(2) on the
// socket. Two threads that only spin (with an occasional yield) took 8.7
// ms a round trip at p50 on this 2-core machine with other processes
// running, and would make the ceiling depend on the load.
func XDPPingPong(p *vethpair.Pair, size, count int, d time.Duration) (Latency, error) {
	return xdpPingPong(context.Background(), p, size, count, d)
}

func xdpPingPong(ctx context.Context, p *vethpair.Pair, size, count int, d time.Duration) (Latency, error) {
	a, b, err := openXDPPair(p, false)
	if err != nil {
		return Latency{}, err
	}
	defer a.Close()
	defer b.Close()
	ping, err := RoCEFrame(p.A, p.B, xdpQPN, size)
	if err != nil {
		return Latency{}, err
	}
	pong, err := RoCEFrame(p.B, p.A, xdpQPN, size)
	if err != nil {
		return Latency{}, err
	}
	pingDesc, err := txFrames(a, ping, 1)
	if err != nil {
		return Latency{}, err
	}
	pongDesc, err := txFrames(b, pong, 1)
	if err != nil {
		return Latency{}, err
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var echoErr error
	wg.Add(1)
	go func() { // B: echo every frame
		defer wg.Done()
		runtime.LockOSThread()
		for spins := 0; ; spins++ {
			if spins&1023 == 0 {
				select {
				case <-stop:
					return
				default:
				}
			}
			if !recvOne(b) {
				waitRX(b, spins)
				continue
			}
			if err := sendOne(b, pongDesc[0]); err != nil {
				echoErr = err
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	samples := make([]time.Duration, 0, count)
	deadline := time.Now().Add(d)
	for i := 0; i < count+warmup && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if err := sendOne(a, pingDesc[0]); err != nil {
			return Latency{}, fmt.Errorf("af_xdp ping: %w", err)
		}
		limit := t0.Add(5 * time.Second)
		for spins := 1; !recvOne(a); spins++ {
			waitRX(a, spins)
			if time.Now().After(limit) {
				return Latency{}, errors.Join(fmt.Errorf("af_xdp pong %d lost", i), echoErr)
			}
		}
		if i >= warmup {
			samples = append(samples, time.Since(t0))
		}
	}
	return Summarize(samples), echoErr
}

// sendOne queues the prebuilt frame d, kicks, and waits for its completion
// so the same frame can be sent again.
func sendOne(e *rawxdp.Endpoint, d afxdp.Desc) error {
	tx, comp := e.Sock.TX(), e.Sock.Completion()
	start, got := tx.Reserve(1)
	if got != 1 {
		return errors.New("TX ring full")
	}
	tx.Set(start, d)
	tx.Submit()
	if err := e.Sock.Kick(); err != nil {
		return err
	}
	limit := time.Now().Add(time.Second)
	for {
		if start, got := comp.Peek(1); got == 1 {
			_ = comp.Get(start)
			comp.Release(1)
			return nil
		}
		if time.Now().After(limit) {
			return errors.New("TX completion did not arrive within 1s")
		}
		if err := e.Sock.Kick(); err != nil && !errors.Is(err, afxdp.ErrTxBusy) {
			return err
		}
	}
}

// recvOne takes at most one frame from e's RX ring and recycles it.
func recvOne(e *rawxdp.Endpoint) bool {
	rx := e.Sock.RX()
	start, got := rx.Peek(1)
	if got == 0 {
		if e.Sock.Fill().NeedWakeup() {
			_ = e.Sock.WakeupRX()
		}
		return false
	}
	_ = e.Frames().Free(rx.Get(start).Addr)
	rx.Release(1)
	e.Sock.Fill().FillFrom(e.Frames(), 1)
	return true
}

// rxSpins is how many empty looks at the RX ring a ping-pong side takes
// before it sleeps in poll(2): about 20 us on this machine.
const rxSpins = 400

// waitRX is a ping-pong side's wait after an empty look at e's RX ring:
// a polite spin, then a poll(2) for input of at most a millisecond (the
// callers bound their loops).
func waitRX(e *rawxdp.Endpoint, spins int) {
	if spins < rxSpins {
		politeSpin(spins)
		return
	}
	pfd := []unix.PollFd{{Fd: int32(e.Sock.FD()), Events: unix.POLLIN}}
	_, _ = unix.Poll(pfd, 1)
}

// politeSpin yields the CPU now and then while a busy-poll loop finds
// nothing. In copy mode the kernel moves frames in softirq context, which
// under load runs in ksoftirqd: a thread spinning without pause on a small
// machine can starve it and so delay the very frame it waits for.
func politeSpin(spins int) {
	if spins&255 == 0 {
		runtime.Gosched()
		_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}
