package port

import (
	"errors"
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
)

// Capture wraps p so that every frame it receives and every frame it
// transmits is also written to w, which should be an Ethernet capture
// (pcapfile.LinkTypeEthernet). It serves `ndkxdp demo --capture FILE`.
//
// This is a debugging path: writing copies, locks and may block on w. It
// never changes the frames or the port's behaviour; a failed write stops
// nothing, and Close reports the first one. Transmitted frames are written
// when Transmit accepts them (the wire may still lose them), received ones
// when Receive returns them. Several ports may share one Writer.
func Capture(p Port, w *pcapfile.Writer) Port {
	return &capturePort{Port: p, w: w}
}

type capturePort struct {
	Port
	w     *pcapfile.Writer
	frame []byte // transmitted segments joined, reused
	err   error  // first write error
}

func (c *capturePort) Receive(out [][]byte) int {
	n := c.Port.Receive(out)
	if n > 0 {
		now := time.Now()
		for _, f := range out[:n] {
			c.record(now, f)
		}
	}
	return n
}

func (c *capturePort) Transmit(segs [][]byte) error {
	if err := c.Port.Transmit(segs); err != nil {
		return err
	}
	c.frame = c.frame[:0]
	for _, s := range segs {
		c.frame = append(c.frame, s...)
	}
	c.record(time.Now(), c.frame)
	return nil
}

func (c *capturePort) record(ts time.Time, f []byte) {
	if err := c.w.WritePacket(ts, f); err != nil && c.err == nil {
		c.err = fmt.Errorf("port: capture: %w", err)
	}
}

func (c *capturePort) Close() error {
	return errors.Join(c.Port.Close(), c.err)
}

// Unwrap returns the port the capture wraps.
func (c *capturePort) Unwrap() Port { return c.Port }

// Inner returns the port under any wrappers (Capture, Tap), for what needs
// the concrete port (an XSK's doorbell, its socket's statistics).
func Inner(p Port) Port {
	for {
		u, ok := p.(interface{ Unwrap() Port })
		if !ok {
			return p
		}
		p = u.Unwrap()
	}
}
