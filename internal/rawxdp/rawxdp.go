package rawxdp

import (
	"errors"
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/loader"
)

// Config selects how the endpoint is built.
type Config struct {
	Queue       uint32
	Attach      loader.AttachMode // driver, generic, or auto
	MultiBuffer bool              // bind with XDP_USE_SG (needed above one frame)
	BusyPoll    bool              // SO_PREFER_BUSY_POLL and friends on the socket
	NumFrames   uint32            // UMEM frames; default 4096
}

// Endpoint is an attached program plus one AF_XDP socket.
type Endpoint struct {
	Host   *vethpair.Host
	XDP    *loader.XDP
	UMEM   *afxdp.UMEM
	Sock   *afxdp.Socket
	frames *afxdp.FrameAllocator

	rxChain []afxdp.Desc
}

// Open attaches the steering program to h's veth, binds a socket on
// cfg.Queue and registers it in the socket map. The fill ring is filled with
// half the frames; the other half serves transmission.
func Open(h *vethpair.Host, cfg Config) (*Endpoint, error) {
	e := &Endpoint{Host: h}
	err := h.Do(func() error {
		var err error
		if e.XDP, err = loader.Attach(h.Link, loader.Options{Mode: cfg.Attach}); err != nil {
			return err
		}
		if e.UMEM, err = afxdp.NewUMEM(afxdp.UMEMConfig{NumFrames: cfg.NumFrames}); err != nil {
			return err
		}
		sc := afxdp.SocketConfig{Ifindex: h.Ifindex, Queue: cfg.Queue, MultiBuffer: cfg.MultiBuffer}
		if cfg.BusyPoll {
			sc.BusyPoll = &afxdp.BusyPollConfig{Timeout: 20 * time.Microsecond, Budget: 64, Prefer: true}
		}
		if e.Sock, err = afxdp.NewSocket(e.UMEM, sc); err != nil {
			return err
		}
		return e.XDP.RegisterSocket(cfg.Queue, e.Sock.FD())
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("rawxdp: open on %s/%s: %w", h.Name, h.Link, err), e.Close())
	}
	e.frames = e.UMEM.Allocator()
	fill := e.Sock.Fill()
	fill.FillFrom(e.frames, min(fill.Size(), e.frames.Available()/2))
	return e, nil
}

// Close unregisters and closes everything Open created.
func (e *Endpoint) Close() error {
	var errs []error
	if e.Sock != nil {
		errs = append(errs, e.Sock.Close())
	}
	if e.UMEM != nil {
		errs = append(errs, e.UMEM.Close())
	}
	if e.XDP != nil {
		errs = append(errs, e.XDP.Close())
	}
	return errors.Join(errs...)
}

// Frames is the endpoint's frame allocator.
func (e *Endpoint) Frames() *afxdp.FrameAllocator { return e.frames }

// chunk is the payload room of one TX frame.
func (e *Endpoint) chunk() int { return int(e.UMEM.FrameSize()) }

// Send copies one frame into UMEM frames (a chain when it is larger than a
// frame), queues it on TX and kicks the kernel. It reclaims completed
// frames first.
func (e *Endpoint) Send(frame []byte) error {
	e.Reclaim()
	n := (len(frame) + e.chunk() - 1) / e.chunk()
	if n == 0 {
		return errors.New("rawxdp: empty frame")
	}
	if n > 1 && !e.Sock.MultiBuffer() {
		return fmt.Errorf("rawxdp: %d-byte frame needs %d descriptors but the socket is not multi-buffer", len(frame), n)
	}
	var descs [16]afxdp.Desc
	if n > len(descs) {
		return fmt.Errorf("rawxdp: %d-byte frame too large", len(frame))
	}
	for i := range n {
		addr, ok := e.frames.Alloc()
		if !ok {
			for _, d := range descs[:i] {
				_ = e.frames.Free(d.Addr)
			}
			return errors.New("rawxdp: out of UMEM frames")
		}
		part := frame[i*e.chunk() : min(len(frame), (i+1)*e.chunk())]
		copy(e.UMEM.Frame(addr), part)
		descs[i] = afxdp.Desc{Addr: addr, Len: uint32(len(part))}
	}
	tx := e.Sock.TX()
	start, got := tx.Reserve(uint32(n))
	if got < uint32(n) {
		tx.Cancel(got)
		for _, d := range descs[:n] {
			_ = e.frames.Free(d.Addr)
		}
		return errors.New("rawxdp: TX ring full")
	}
	tx.SetPacket(start, descs[:n])
	tx.Submit()
	return e.Sock.Kick()
}

// Reclaim returns completed TX frames to the allocator.
func (e *Endpoint) Reclaim() {
	_, _ = e.Sock.Completion().ReclaimTo(e.frames, e.Sock.Completion().Size())
}

// Receive waits up to timeout for one packet and returns a copy of its bytes
// and the number of descriptors it arrived in.
func (e *Endpoint) Receive(timeout time.Duration) ([]byte, int, error) {
	deadline := time.Now().Add(timeout)
	rx := e.Sock.RX()
	for {
		start, got := rx.Peek(rx.Size())
		if got > 0 {
			n := rx.NextPacket(start, got)
			if n > 0 {
				var out []byte
				for i := range n {
					d := rx.Get(start + i)
					out = append(out, e.UMEM.Data(d)...)
					_ = e.frames.Free(d.Addr)
				}
				rx.Cancel(got - n)
				rx.Release(n)
				e.Sock.Fill().FillFrom(e.frames, n)
				return out, int(n), nil
			}
			rx.Cancel(got)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, 0, fmt.Errorf("rawxdp: no packet on %s queue %d within %v", e.Host.Link, e.Sock.Queue(), timeout)
		}
		if _, err := e.Sock.Poll(min(left, 50*time.Millisecond)); err != nil {
			return nil, 0, err
		}
	}
}
