package interop

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
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
