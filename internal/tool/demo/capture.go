package demo

import (
	"bytes"
	"io"
	"net"
	"sync"
)

// pcapRecordHeader is the length of a pcap record's header (timestamp,
// captured and original length) before the frame.
const pcapRecordHeader = 16

// sharedCapture records the demo's two hosts into one pcap file, each
// frame once: as its sender sent it. Each adapter writes a pcap stream of
// its own (ndk.Options.Capture: a file header in one Write, then one
// Write per frame, sent or received); only the first file header reaches
// the file, and of each stream only the frames whose Ethernet source is
// that adapter's, so a frame does not appear again as its receiver got it.
type sharedCapture struct {
	mu     sync.Mutex
	w      io.Writer
	header bool  // a file header is written
	frames int   // frames written
	err    error // the first write error
}

// stream returns the writer for the stream of the adapter whose MAC is
// mac.
func (c *sharedCapture) stream(mac net.HardwareAddr) io.Writer {
	return &captureStream{c: c, mac: mac}
}

// Err returns the first write error.
func (c *sharedCapture) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Frames returns how many frames the file holds.
func (c *sharedCapture) Frames() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

type captureStream struct {
	c       *sharedCapture
	mac     net.HardwareAddr
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
	} else if len(b) < pcapRecordHeader+12 || !bytes.Equal(b[pcapRecordHeader+6:pcapRecordHeader+12], s.mac) {
		return len(b), nil // a frame this adapter received
	} else {
		c.frames++
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
