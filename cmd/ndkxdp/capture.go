package main

import (
	"io"
	"sync"
)

// sharedCapture records both demo hosts into one pcap file. Each adapter
// writes a pcap stream of its own (ndk.Options.Capture: a file header in
// one Write, then one Write per frame); only the first file header
// reaches the file, and the frames of both streams follow it in the order
// they were written.
type sharedCapture struct {
	mu     sync.Mutex
	w      io.Writer
	header bool  // a file header is written
	err    error // the first write error
}

// stream returns the writer for one adapter's stream.
func (c *sharedCapture) stream() io.Writer { return &captureStream{c: c} }

// Err returns the first write error.
func (c *sharedCapture) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

type captureStream struct {
	c       *sharedCapture
	started bool // the stream's file header went by
}

func (s *captureStream) Write(b []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.started {
		s.started = true
		if c.header {
			return len(b), nil
		}
		c.header = true
	}
	if c.err != nil {
		return 0, c.err
	}
	if _, err := c.w.Write(b); err != nil {
		c.err = err
		return 0, err
	}
	return len(b), nil
}
