package interop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Frame is one frame seen on the tap.
type Frame struct {
	Time time.Time
	// Outgoing is true for frames the host sent towards the VM, false for
	// frames the VM sent.
	Outgoing bool
	Data     []byte
}

// Capture records every frame crossing the tap, in both directions, from
// an AF_PACKET socket in the host namespace. It holds at most maxFrames
// frames; later ones are counted in Dropped.
type Capture struct {
	fd   int
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	frames  []Frame
	dropped int
	err     error
	notify  chan struct{} // closed and replaced on every new frame
}

const (
	maxFrames      = 100000
	captureSnaplen = 10240 // a 9000-byte MTU frame with headers
)

// StartCapture opens the capture. Stop it when done.
func (h *Host) StartCapture() (*Capture, error) {
	proto := htons(unix.ETH_P_ALL)
	var fd int
	err := h.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: h.Ifindex}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind AF_PACKET to %s: %w", h.Tap, err)
		}
		// The read loop wakes this often to see whether to stop.
		tv := unix.Timeval{Usec: 100_000}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return fmt.Errorf("set receive timeout: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("interop: capture on %s: %w", h.Tap, err)
	}
	c := &Capture{fd: fd, stop: make(chan struct{}), done: make(chan struct{}), notify: make(chan struct{})}
	go c.loop()
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *Capture) loop() {
	defer close(c.done)
	defer unix.Close(c.fd)
	buf := make([]byte, captureSnaplen)
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("capture: %w", err)
			c.mu.Unlock()
			return
		}
		f := Frame{Time: time.Now(), Data: append([]byte(nil), buf[:n]...)}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok {
			f.Outgoing = ll.Pkttype == unix.PACKET_OUTGOING
		}
		c.mu.Lock()
		if len(c.frames) < maxFrames {
			c.frames = append(c.frames, f)
			close(c.notify)
			c.notify = make(chan struct{})
		} else {
			c.dropped++
		}
		c.mu.Unlock()
	}
}

// Frames returns the frames captured so far.
func (c *Capture) Frames() []Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Frame(nil), c.frames...)
}

// Dropped is the number of frames not kept because the capture was full.
func (c *Capture) Dropped() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// WaitFor returns the first captured frame, earlier or later, for which
// match is true, or an error when ctx ends first.
func (c *Capture) WaitFor(ctx context.Context, match func(Frame) bool) (Frame, error) {
	seen := 0
	for {
		c.mu.Lock()
		frames, notify, err := c.frames[seen:], c.notify, c.err
		c.mu.Unlock()
		for _, f := range frames {
			if match(f) {
				return f, nil
			}
		}
		seen += len(frames)
		if err != nil {
			return Frame{}, err
		}
		select {
		case <-notify:
		case <-c.done:
			c.mu.Lock()
			more := len(c.frames) > seen
			c.mu.Unlock()
			if !more {
				return Frame{}, fmt.Errorf("capture stopped before a matching frame (%d frames seen)", seen)
			}
		case <-ctx.Done():
			return Frame{}, fmt.Errorf("no matching frame among %d captured: %w", seen, context.Cause(ctx))
		}
	}
}

// Stop ends the capture and returns every frame it recorded.
func (c *Capture) Stop() []Frame {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	return c.Frames()
}
