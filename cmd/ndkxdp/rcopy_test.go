package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestRcopyFlags: rcopy's two forms, SERVER:DESTINATION, and refusals.
func TestRcopyFlags(t *testing.T) {
	f, err := parseRcopy([]string{"/etc/hosts", "198.18.0.2:/tmp/x", "-p", "7000", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.src != "/etc/hosts" || f.server != "198.18.0.2" || f.dst != "/tmp/x" || f.port != 7000 {
		t.Errorf("client form: %+v, %v", f, err)
	}
	f, err = parseRcopy([]string{"-dev", "lo", "a", "host"}, io.Discard, io.Discard)
	if err != nil || f.dst != "a" || f.server != "host" {
		t.Errorf("no destination: %+v, %v; want SOURCE's name", f, err)
	}
	for _, args := range [][]string{{"a", "-dev", "lo"}, {"-n", "2", "a", "b", "-dev", "lo"}, {"-p", "0", "-dev", "lo"}} {
		if _, err := parseRcopy(args, io.Discard, io.Discard); err == nil {
			t.Errorf("rcopy %q accepted", args)
		}
	}
}

// TestRcopy copies a 3 MB file of random bytes between two ndkxdp
// adapters over a veth pair: the destination holds the same bytes and
// mode, each side prints rcopy's lines; a second copy into a directory
// that does not exist fails on the client with the server's errno (ENOENT).
func TestRcopy(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := make([]byte, 3<<20+123)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sout, serr bytes.Buffer
	var srvErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srvErr = p.B.Do(func() error { return run(ctx, []string{"rcopy", "-n", "2", "-dev", p.B.Link}, &sout, &serr) })
	}()
	time.Sleep(300 * time.Millisecond)
	var cout, cerr bytes.Buffer
	if err := p.A.Do(func() error {
		return run(ctx, []string{"rcopy", src, p.B.IPv4.String() + ":" + dst, "-dev", p.A.Link}, &cout, &cerr)
	}); err != nil {
		t.Fatalf("client: %v\n%s%s", err, cout.String(), cerr.String())
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("destination: %d bytes, %v; want the source's %d", len(got), err, len(data))
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("destination mode %v, %v; want 0640", st.Mode(), err)
	}
	if out := cout.String(); !strings.HasPrefix(out, "opening...transferring...closing...done\n3145851 bytes in ") || !strings.HasSuffix(out, " Gb/sec\n") {
		t.Errorf("client printed %q", out)
	}
	cout.Reset()
	err = p.A.Do(func() error {
		return run(ctx, []string{"rcopy", src, p.B.IPv4.String() + ":" + filepath.Join(dir, "none", "x"), "-dev", p.A.Link}, &cout, &cerr)
	})
	if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("copy into a missing directory: %v, want the server's ENOENT", err)
	}
	wg.Wait()
	want := "waiting for connection...client: " + p.A.IPv4.String() + "\nopening: " + dst + ", transferring...3145851 bytes...closing...done\n" +
		"waiting for connection...client: " + p.A.IPv4.String() + "\nopening: " + filepath.Join(dir, "none", "x") + ", unable to open destination file\n"
	if srvErr != nil || sout.String() != want {
		t.Errorf("server: %v, printed\n%s\nwant\n%s", srvErr, sout.String(), want)
	}
}
