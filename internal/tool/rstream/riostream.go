package rstream

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rsocket"
)

// IOMapSize is the iomap size riostream sets (RDMA_IOMAPSIZE 1): each
// side takes one window of the other's.
const IOMapSize = 1

// IOOpen makes riostream's next connection, as Open does rstream's.
type IOOpen func(ctx context.Context, latency bool) (*rsocket.Conn, error)

// RunIO runs librdmacm's riostream (examples/riostream.c) on connections
// from open: rstream's tests, report and sync, but the transfers are
// direct writes (riowrite) into the window the peer mapped at offset 0
// (riomap), and a receiver learns of the last one of each round by the
// window's last byte, which each round's last write sets to the round's
// marker. With Verify, the last write's other bytes carry the data
// pattern. Connections need Config.IOMap of at least IOMapSize.
func RunIO(ctx context.Context, cfg Config, open IOOpen, out io.Writer) error {
	if cfg.Custom && (cfg.Iterations <= 0 || cfg.Count <= 0 || cfg.Size <= 1) {
		return fmt.Errorf("riostream: iterations %d and transfers %d must be positive, the size %d above 1", cfg.Iterations, cfg.Count, cfg.Size)
	}
	fmt.Fprint(out, Header)
	var pats [2]pattern // the data counters run on across connections
	if cfg.Custom {
		return ioPhase(ctx, cfg, &pats, open, false, out, []Result{{Name: "custom", Size: cfg.Size, Count: cfg.Count, Iterations: cfg.Iterations}})
	}
	lat, bw := defaultTests(cfg)
	if err := ioPhase(ctx, cfg, &pats, open, true, out, lat); err != nil {
		return err
	}
	return ioPhase(ctx, cfg, &pats, open, false, out, bw)
}

type ioRunner struct {
	cfg     Config
	conn    *rsocket.Conn
	buf     verbs.Region
	out, in *pattern
}

func ioPhase(ctx context.Context, cfg Config, pats *[2]pattern, open IOOpen, latency bool, out io.Writer, tests []Result) error {
	c, err := open(ctx, latency)
	if err != nil {
		return err
	}
	size := MaxSize
	if cfg.Custom {
		size = max(cfg.Size, 16)
	}
	buf, err := c.AllocIO(size)
	if err != nil {
		c.Close()
		return fmt.Errorf("riomap: %w", err)
	}
	r := &ioRunner{cfg: cfg, conn: c, buf: buf, out: &pats[0], in: &pats[1]}
	for _, t := range tests {
		if err := r.test(ctx, &t); err != nil {
			c.Close()
			return err
		}
		fmt.Fprint(out, t.String())
	}
	_ = c.Shutdown(ctx) // as riostream, which ignores rshutdown's result
	return c.Close()
}

// test is riostream's run_test.
func (r *ioRunner) test(ctx context.Context, t *Result) error {
	window := verbs.Region{Buf: r.buf.Buf[:t.Size], Addr: r.buf.Addr, LKey: r.buf.LKey, RKey: r.buf.RKey}
	poll := t.Size - 1
	window.Buf[poll] = 0xFF
	if err := r.conn.MapIO(window, 0); err != nil {
		return fmt.Errorf("riomap: %w", err)
	}
	c := r.conn
	sync := make([]byte, 16)
	msg := func(send bool) error {
		if send {
			_, err := c.Write(ctx, sync)
			return err
		}
		return c.ReadFull(ctx, sync)
	}
	if err := msg(r.cfg.Client); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := msg(!r.cfg.Client); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	var marker byte
	send := func() error {
		for range t.Count - 1 {
			if err := r.write(ctx, window.Buf); err != nil {
				return err
			}
		}
		window.Buf[poll] = marker
		marker++
		if r.cfg.Verify {
			r.out.format(window.Buf[:poll])
		}
		return r.write(ctx, window.Buf)
	}
	recv := func() error {
		err := c.WaitByte(ctx, window, poll, marker)
		marker++
		if err != nil {
			return fmt.Errorf("wait for the peer's writes: %w", err)
		}
		if r.cfg.Verify {
			return r.in.verify(window.Buf[:poll])
		}
		return nil
	}
	start := time.Now()
	for range t.Iterations {
		first, second := send, recv
		if !r.cfg.Client {
			first, second = recv, send
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	t.Elapsed = time.Since(start)
	return c.UnmapIO(window)
}

// write is send_xfer: the whole window into the peer's, at offset 0.
func (r *ioRunner) write(ctx context.Context, b []byte) error {
	for off := 0; off < len(b); {
		n, err := r.conn.IOWrite(ctx, b[off:], uint64(off))
		if err != nil {
			return fmt.Errorf("riowrite: %w", err)
		}
		off += n
	}
	return nil
}
