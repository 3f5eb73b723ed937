package interop

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmatose"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/rdmaecho"
)

// testUcmatose runs librdmacm's ucmatose against ndkxdp's, each side as
// server and as client: one connection of cmatose.c's defaults (10
// messages of 100 bytes each way) and three of 40 4 KiB messages. Both
// sides must end with "return status 0", ours after cmatose.c's lines.
func testUcmatose(t *testing.T, p *peer) {
	for _, c := range []struct {
		name string
		cfg  cmatose.Config
		args string
	}{
		{"defaults", cmatose.Config{}, ""},
		{"c3_C40_S4096", cmatose.Config{Connections: 3, Count: 40, Size: 4096}, "-c 3 -C 40 -S 4096"},
	} {
		t.Run(c.name+"/rxe_server", func(t *testing.T) {
			p.capture(t)
			ctx := ctxFor(t, 2*time.Minute)
			var ours bytes.Buffer
			out := p.guestServer(t, ctx, "ucmatose "+c.args, cmatose.DefaultPort, func() error {
				return cmatose.RunClient(ctx, c.cfg, &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4}, cmatose.DefaultPort, &ours)
			})
			t.Logf("rxe's ucmatose server:\n%sndkxdp's client:\n%s", out, ours.String())
			requireCmatose(t, out, ours.String(), "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n")
		})
		t.Run(c.name+"/rxe_client", func(t *testing.T) {
			p.capture(t)
			ctx := ctxFor(t, 2*time.Minute)
			var ours bytes.Buffer
			out := p.hostServer(t, ctx, cmatose.DefaultPort, func(ctx context.Context, l verbs.Listener) error {
				return cmatose.RunServer(ctx, c.cfg, l, &ours)
			}, fmt.Sprintf("ucmatose %s -s %v", c.args, HostIPv4))
			t.Logf("rxe's ucmatose client:\n%sndkxdp's server:\n%s", out, ours.String())
			requireCmatose(t, out, ours.String(), "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n")
		})
	}
}

// requireCmatose fails unless rxe's ucmatose reported success with its
// data transfers complete, and ours printed want.
func requireCmatose(t *testing.T, theirs, ours, want string) {
	t.Helper()
	if !strings.Contains(theirs, "data transfers complete\n") || !strings.HasSuffix(theirs, "return status 0\n") {
		t.Errorf("rxe's ucmatose did not complete its transfers with status 0:\n%s", theirs)
	}
	if ours != want {
		t.Errorf("ours printed:\n%swant:\n%s", ours, want)
	}
}

// testRdmaEcho runs librdmacm's rdma_server and rdma_client examples
// against ndkxdp's, each side as server and as client: one 16-byte SEND
// each way, and each prints "end 0".
func testRdmaEcho(t *testing.T, p *peer) {
	t.Run("rxe_server", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, time.Minute)
		var ours bytes.Buffer
		out := p.guestServer(t, ctx, fmt.Sprintf("rdma_server -s %v", GuestIPv4), rdmaecho.DefaultPort, func() error {
			return rdmaecho.RunClient(ctx, &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4}, rdmaecho.DefaultPort, &ours)
		})
		t.Logf("rxe's rdma_server:\n%sndkxdp's rdma_client:\n%s", out, ours.String())
		if out != "rdma_server: start\nrdma_server: end 0\n" || ours.String() != "rdma_client: start\nrdma_client: end 0\n" {
			t.Errorf("not both ended 0")
		}
	})
	t.Run("rxe_client", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, time.Minute)
		var ours bytes.Buffer
		out := p.hostServer(t, ctx, rdmaecho.DefaultPort, func(ctx context.Context, l verbs.Listener) error {
			return rdmaecho.RunServer(ctx, l, &ours)
		}, fmt.Sprintf("rdma_client -s %v", HostIPv4))
		t.Logf("rxe's rdma_client:\n%sndkxdp's rdma_server:\n%s", out, ours.String())
		if out != "rdma_client: start\nrdma_client: end 0\n" || ours.String() != "rdma_server: start\nrdma_server: end 0\n" {
			t.Errorf("not both ended 0")
		}
	})
	// rdma_xserver and rdma_xclient in their default RC mode: the
	// client's one SEND, the server's REP with 4 bytes of private data.
	t.Run("x/rxe_server", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, time.Minute)
		var ours bytes.Buffer
		out := p.guestServer(t, ctx, "rdma_xserver", rdmaecho.DefaultPort, func() error {
			return rdmaecho.RunXClient(ctx, &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4}, rdmaecho.DefaultPort, &ours)
		})
		t.Logf("rxe's rdma_xserver:\n%sndkxdp's rdma_xclient:\n%s", out, ours.String())
		if out != "rdma_xserver: start\nrdma_xserver: end 0\n" || ours.String() != "rdma_xclient: start\nrdma_xclient: end 0\n" {
			t.Errorf("not both ended 0")
		}
	})
	t.Run("x/rxe_client", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, time.Minute)
		var ours bytes.Buffer
		out := p.hostServer(t, ctx, rdmaecho.DefaultPort, func(ctx context.Context, l verbs.Listener) error {
			return rdmaecho.RunXServer(ctx, l, &ours)
		}, fmt.Sprintf("rdma_xclient -s %v", HostIPv4))
		t.Logf("rxe's rdma_xclient:\n%sndkxdp's rdma_xserver:\n%s", out, ours.String())
		if out != "rdma_xclient: start\nrdma_xclient: end 0\n" || ours.String() != "rdma_xserver: start\nrdma_xserver: end 0\n" {
			t.Errorf("not both ended 0")
		}
	})
}
