package interop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rsocket"
	"github.com/ndkxdp/ndkxdp/internal/tool/rstream"
)

// rstreamRow is rstream's report line: name, bytes, xfers, iters, total.
var rstreamRow = regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+$`)

// testRstream runs librdmacm's rstream against ndkxdp's, each side as
// server and as client, in rstream's custom mode with its data checked
// (-T v): the rsocket protocol's connection data, RDMA WRITEs with
// immediate into the buffer the peer offers, credits and offers coming
// back, and RS_CTRL_DISCONNECT. The sizes: many small transfers, 100 KB
// transfers that rsocket splits at 64 KiB, and 5000-byte transfers
// through 32 KiB buffers (-B 16384), where every half of the receive
// buffer is offered again many times over and transfers stop at an
// offer's end.
func testRstream(t *testing.T, p *peer) {
	for _, c := range []struct {
		name      string
		buffer    int
		iters     int
		count     int
		size      int
		wantBytes string
	}{
		{"S64_I200", 0, 200, 1, 64, "25k"},
		{"S100000_C20_I2", 0, 2, 20, 100000, "7.6m"},
		{"B16384_S5000_C100", 16384, 1, 100, 5000, "976k"},
	} {
		args := fmt.Sprintf("-T v -I %d -C %d -S %d", c.iters, c.count, c.size)
		if c.buffer != 0 {
			args += fmt.Sprintf(" -B %d", c.buffer)
		}
		cfg := rstream.Config{Custom: true, Iterations: c.iters, Count: c.count, Size: c.size, Verify: true}
		sock := rstream.RsocketConfig(c.buffer, 0)
		check := func(t *testing.T, theirs, ours string) {
			t.Helper()
			for side, out := range map[string]string{"rxe's": theirs, "ours": ours} {
				m := rstreamRow.FindAllStringSubmatch(out, -1)
				if len(m) != 1 || m[0][1] != "custom" || m[0][3] != fmt.Sprint(c.count) || m[0][4] != fmt.Sprint(c.iters) || m[0][5] != c.wantBytes {
					t.Errorf("%s rstream did not report one custom test of %d x %d transfers, %s in all:\n%s", side, c.iters, c.count, c.wantBytes, out)
				}
			}
		}
		t.Run(c.name+"/rxe_server", func(t *testing.T) {
			p.capture(t)
			ctx := ctxFor(t, 2*time.Minute)
			var ours bytes.Buffer
			cfg := cfg
			cfg.Client = true
			conn := &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4, Depths: ndkverbs.Depths{Send: rsocket.DefaultQueue, Receive: rsocket.DefaultQueue}}
			out := p.guestServer(t, ctx, "rstream -b "+GuestIPv4.String()+" "+args, rstream.DefaultPort, func() error {
				return rstream.Run(ctx, cfg, rstream.Dialer(conn, rstream.DefaultPort, sock), &ours)
			})
			t.Logf("rxe's rstream server:\n%sndkxdp's client:\n%s", out, ours.String())
			check(t, out, ours.String())
		})
		t.Run(c.name+"/rxe_client", func(t *testing.T) {
			p.capture(t)
			ctx := ctxFor(t, 2*time.Minute)
			var ours bytes.Buffer
			out := p.hostServer(t, ctx, rstream.DefaultPort, func(ctx context.Context, l verbs.Listener) error {
				return rstream.Run(ctx, cfg, rstream.Acceptor(l, sock), &ours)
			}, fmt.Sprintf("rstream -s %v %s", HostIPv4, args))
			t.Logf("rxe's rstream client:\n%sndkxdp's server:\n%s", out, ours.String())
			check(t, out, ours.String())
		})
	}
}

// testRcopy runs librdmacm's rcopy against ndkxdp's, each side as server
// and as client: a 2 MB file of random bytes over an rsocket stream,
// compared by SHA-256 where it landed.
func testRcopy(t *testing.T, p *peer) {
	const size = 2_000_000
	t.Run("rxe_server", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, 2*time.Minute)
		src := filepath.Join(t.TempDir(), "src")
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rand.Uint32())
		}
		if err := os.WriteFile(src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		proc, err := p.vm.Start(ctx, "cd /tmp && exec rcopy")
		if err != nil {
			t.Fatal(err)
		}
		defer proc.Kill()
		if err := p.vm.WaitListen(ctx, rstream.RcopyPort); err != nil {
			t.Fatal(err)
		}
		var ours bytes.Buffer
		cerr := p.vm.Host.Do(func() error {
			conn := &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4, Depths: ndkverbs.Depths{Send: rsocket.DefaultQueue, Receive: rsocket.DefaultQueue}}
			s, err := rsocket.Dial(ctx, conn, rstream.RcopyPort, rsocket.Config{})
			if err != nil {
				return err
			}
			_, err = rstream.CopyTo(ctx, s, src, "rcopy.dst", &ours)
			return err
		})
		sum, _, code, err := p.vm.Run(ctx, "sha256sum /tmp/rcopy.dst")
		_ = proc.Kill() // rcopy's server serves until killed
		out, errOut, _, _ := proc.Wait(ctx)
		t.Logf("rxe's rcopy server:\n%s%sndkxdp's client:\n%s", out, errOut, ours.String())
		if cerr != nil {
			t.Fatalf("ndkxdp's client: %v", cerr)
		}
		if want := fmt.Sprintf("%x", sha256.Sum256(data)); err != nil || code != 0 || !strings.HasPrefix(sum, want) {
			t.Fatalf("the guest's copy: %q (exit %d, %v), want SHA-256 %s", sum, code, err, want)
		}
		if !strings.Contains(out, "opening: rcopy.dst, transferring...2000000 bytes...closing...done") {
			t.Errorf("rxe's rcopy server did not report the copy")
		}
	})
	t.Run("rxe_client", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, 2*time.Minute)
		sum, _, code, err := p.vm.Run(ctx, fmt.Sprintf("head -c %d /dev/urandom > /tmp/rcopy.src && sha256sum /tmp/rcopy.src", size))
		if err != nil || code != 0 {
			t.Fatalf("make the guest's file: exit %d, %v", code, err)
		}
		dst := filepath.Join(t.TempDir(), "dst")
		var ours bytes.Buffer
		out := p.hostServer(t, ctx, rstream.RcopyPort, func(ctx context.Context, l verbs.Listener) error {
			s, err := rsocket.Accept(ctx, l, rsocket.Config{})
			if err != nil {
				return err
			}
			err = rstream.Serve(ctx, s, &ours)
			s.Close()
			return err
		}, fmt.Sprintf("rcopy /tmp/rcopy.src %v:%s", HostIPv4, dst))
		t.Logf("rxe's rcopy client:\n%sndkxdp's server:\n%s", out, ours.String())
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%x", sha256.Sum256(got)); len(got) != size || !strings.HasPrefix(sum, want) {
			t.Fatalf("our copy: %d bytes with SHA-256 %s; the guest's file: %q", len(got), want, sum)
		}
		if !strings.Contains(out, "2000000 bytes in ") {
			t.Errorf("rxe's rcopy client did not report the copy")
		}
	})
}

// testRiostream runs librdmacm's riostream against ndkxdp's, each side as
// server and as client, in its custom mode with the data checked: each
// side maps its buffer for the other (RS_OP_IOMAP_SGL into the iomap
// table the connection data sized, RDMA_IOMAPSIZE 1), then the transfers
// are RDMA WRITEs into it, the last of each round setting the marker the
// receiver watches for.
func testRiostream(t *testing.T, p *peer) {
	const iters, count, size = 30, 3, 70000
	args := fmt.Sprintf("-T v -I %d -C %d -S %d", iters, count, size)
	cfg := rstream.Config{Custom: true, Iterations: iters, Count: count, Size: size, Verify: true}
	sock := rstream.RsocketConfig(0, 0)
	sock.IOMap = rstream.IOMapSize
	check := func(t *testing.T, theirs, ours string) {
		t.Helper()
		for side, out := range map[string]string{"rxe's": theirs, "ours": ours} {
			if m := rstreamRow.FindAllStringSubmatch(out, -1); len(m) != 1 || strings.Join(m[0][1:], " ") != "custom 68k 3 30 12m" {
				t.Errorf("%s riostream did not report one custom test of 30 x 3 transfers of 70000 bytes:\n%s", side, out)
			}
		}
	}
	ioOpen := func(open rstream.Open) rstream.IOOpen {
		return func(ctx context.Context, latency bool) (*rsocket.Conn, error) {
			s, err := open(ctx, latency)
			if err != nil {
				return nil, err
			}
			return s.(*rsocket.Conn), nil
		}
	}
	t.Run("rxe_server", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, 2*time.Minute)
		var ours bytes.Buffer
		cfg := cfg
		cfg.Client = true
		conn := &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4, Depths: ndkverbs.Depths{Send: rsocket.DefaultQueue, Receive: rsocket.DefaultQueue}}
		out := p.guestServer(t, ctx, "riostream -b "+GuestIPv4.String()+" "+args, rstream.DefaultPort, func() error {
			return rstream.RunIO(ctx, cfg, ioOpen(rstream.Dialer(conn, rstream.DefaultPort, sock)), &ours)
		})
		t.Logf("rxe's riostream server:\n%sndkxdp's client:\n%s", out, ours.String())
		check(t, out, ours.String())
	})
	t.Run("rxe_client", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, 2*time.Minute)
		var ours bytes.Buffer
		out := p.hostServer(t, ctx, rstream.DefaultPort, func(ctx context.Context, l verbs.Listener) error {
			return rstream.RunIO(ctx, cfg, ioOpen(rstream.Acceptor(l, sock)), &ours)
		}, fmt.Sprintf("riostream -s %v %s", HostIPv4, args))
		t.Logf("rxe's riostream client:\n%sndkxdp's server:\n%s", out, ours.String())
		check(t, out, ours.String())
	})
}
