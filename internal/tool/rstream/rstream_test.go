package rstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestFormats: common.c's size_str and cnt_str, and show_perf's line.
func TestFormats(t *testing.T) {
	for size, want := range map[int64]string{64: "64", 1000: "1000", 1024: "1k", 1536: "1.5k", 6144: "6k", 68 << 10: "68k",
		70000: "68k", 1 << 20: "1m", 3 << 19: "1.5m", 12800000: "12m", 8 << 30: "8g"} {
		if got := SizeString(size); got != want {
			t.Errorf("SizeString(%d) = %q, want %q", size, got, want)
		}
	}
	for n, want := range map[int64]string{1: "1", 999: "999", 1000: "1k", 100000: "100k", 2500000: "2m", 3e9: "3b"} {
		if got := countString(n); got != want {
			t.Errorf("countString(%d) = %q, want %q", n, got, want)
		}
	}
	r := Result{Name: "64_lat", Size: 64, Count: 1, Iterations: 100000, Elapsed: 6790 * time.Millisecond}
	if got, want := r.String(), "64_lat    64      1       100k    12m         6.79s      0.02      33.95\n"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	if Header != "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n" {
		t.Errorf("header %q", Header)
	}
	lat, bw := defaultTests(Config{})
	if len(lat) != 4 || len(bw) != 4 || lat[3].Name != "1m_lat" || bw[1] != (Result{Name: "4k_bw", Size: 4096, Count: 10000, Iterations: 1}) {
		t.Errorf("default tests %v %v", lat, bw)
	}
	if lat, _ = defaultTests(Config{AllSizes: true}); len(lat) != len(sizes) || lat[len(lat)-1].Name != "6m_lat" {
		t.Errorf("-S all: %d tests, the last %v", len(lat), lat[len(lat)-1])
	}
}

// pipeStream is one end of an in-memory duplex stream.
type pipeStream struct {
	r      *io.PipeReader
	w      *io.PipeWriter
	closed chan struct{}
	once   sync.Once
}

func pipePair() (*pipeStream, *pipeStream) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return &pipeStream{r: ar, w: aw, closed: make(chan struct{})}, &pipeStream{r: br, w: bw, closed: make(chan struct{})}
}

func (p *pipeStream) Write(_ context.Context, b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeStream) Read(_ context.Context, b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipeStream) ReadFull(_ context.Context, b []byte) error {
	_, err := io.ReadFull(p.r, b)
	return err
}
func (p *pipeStream) Shutdown(context.Context) error { return p.w.Close() }
func (p *pipeStream) Close() error {
	p.once.Do(func() { close(p.closed) })
	return p.w.Close()
}

// counting counts what its stream's writes carry.
type counting struct {
	*pipeStream
	written int
}

func (c *counting) Write(ctx context.Context, b []byte) (int, error) {
	c.written += len(b)
	return c.pipeStream.Write(ctx, b)
}

// TestRunCustom runs a client and a server on an in-memory stream: the
// 16-byte sync each way, then 3 x (5 transfers each way) of 1000 bytes,
// the data pattern checked; each side prints the header and one line.
func TestRunCustom(t *testing.T) {
	ctx := context.Background()
	a, b := pipePair()
	ca, cb := &counting{pipeStream: a}, &counting{pipeStream: b}
	cfg := Config{Custom: true, Iterations: 3, Count: 5, Size: 1000, Verify: true}
	var sout bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, func(context.Context, bool) (Stream, error) { return cb, nil }, &sout)
	}()
	cli := cfg
	cli.Client = true
	var cout bytes.Buffer
	if err := Run(ctx, cli, func(context.Context, bool) (Stream, error) { return ca, nil }, &cout); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ca.written != 16+3*5*1000 || cb.written != 16+3*5*1000 {
		t.Errorf("the client wrote %d bytes, the server %d; want %d each", ca.written, cb.written, 16+3*5*1000)
	}
	for _, out := range []string{cout.String(), sout.String()} {
		if !strings.HasPrefix(out, Header+"custom    1000    5       3       29k     ") {
			t.Errorf("printed %q", out)
		}
	}
}

// TestVerifyCatchesCorruption: the receiver's check names the first
// wrong byte, counted over everything received.
func TestVerifyCatchesCorruption(t *testing.T) {
	var out, in pattern
	b := make([]byte, 100)
	out.format(b)
	if err := in.verify(b); err != nil {
		t.Fatal(err)
	}
	out.format(b)
	b[42] ^= 1
	if err := in.verify(b); err == nil || err.Error() != "data verification failed byte 142" {
		t.Fatalf("corrupted byte: %v", err)
	}
}

// TestCopy runs rcopy's client and server on an in-memory stream: the
// file arrives with its mode and both print rcopy's lines; a copy into a
// missing directory fails on the client with the server's errno.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := bytes.Repeat([]byte("rcopy!"), 300000)
	if err := os.WriteFile(src, data, 0o751); err != nil {
		t.Fatal(err)
	}
	run := func(dst string) (string, string, error, error) {
		a, b := pipePair()
		var sout, cout bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, b, &sout) }()
		_, cerr := CopyTo(ctx, a, src, dst, &cout)
		b.Close()
		serr := <-done
		return cout.String(), sout.String(), cerr, serr
	}
	dst := filepath.Join(dir, "dst")
	cout, sout, cerr, serr := run(dst)
	if cerr != nil || serr != nil || cout != "opening...transferring...closing...done\n" ||
		sout != "opening: "+dst+", transferring...1800000 bytes...closing...done\n" {
		t.Fatalf("copy: client %v %q, server %v %q", cerr, cout, serr, sout)
	}
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("destination: %d bytes, %v", len(got), err)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o751 {
		t.Errorf("destination mode %v, want 0751", st.Mode())
	}
	_, sout, cerr, serr = run(filepath.Join(dir, "none", "x"))
	var rerr *RcopyError
	if !errors.As(cerr, &rerr) || rerr.Errno != syscall.ENOENT || !strings.HasSuffix(sout, "unable to open destination file\n") {
		t.Fatalf("missing directory: client %v, server %v %q", cerr, serr, sout)
	}
}
