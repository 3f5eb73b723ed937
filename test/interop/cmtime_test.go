package interop

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmtime"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
)

// cmtimeConns is the cases' -c: twenty RC connections opened at once.
const cmtimeConns = 20

// testCmtime runs rdma-core's cmtime against ndkxdp's, each side as
// server and as client: twenty connections through rdma_cm at once, then
// their disconnects, in the peer's version of the protocol (Debian 13's
// syncs over TCP, peerFacts.cmtimeOOB). Pinned rxe behaviours: rxe's CM
// takes twenty REQs at once and answers each; the old version's server
// answers every DREQ and serves on until killed.
func testCmtime(t *testing.T, p *peer) {
	oob := factsOf(t, p.vm).cmtimeOOB
	cfg := cmtime.Config{Connections: cmtimeConns, OOB: oob}
	port := strconv.Itoa(cmtime.DefaultPort)
	t.Run("rxe_server", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, 2*time.Minute)
		proc, err := p.vm.Start(ctx, fmt.Sprintf("exec cmtime -b %v -c %d", GuestIPv4, cmtimeConns))
		if err != nil {
			t.Fatal(err)
		}
		defer proc.Kill()
		if err := p.vm.WaitListen(ctx, cmtime.DefaultPort); err != nil {
			t.Fatal(err)
		}
		var ours bytes.Buffer
		dial := func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort(GuestIPv4.String(), port))
		}
		cerr := p.vm.Host.Do(func() error {
			return cmtime.RunClient(ctx, cfg, &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4}, cmtime.DefaultPort, dial, &ours)
		})
		if !oob {
			_ = proc.Kill() // the old server serves until killed
		}
		out, errOut, code, err := proc.Wait(ctx)
		t.Logf("rxe's cmtime server (exit %d, %v):\n%s%sndkxdp's client:\n%s", code, err, out, errOut, ours.String())
		if cerr != nil {
			t.Fatalf("ndkxdp's client: %v", cerr)
		}
		if oob && (err != nil || code != 0 || !strings.Contains(out, fmt.Sprintf("Accept (%d) test - no QPs", cmtimeConns))) {
			t.Fatalf("rxe's server did not run its three rounds to the end")
		}
	})
	t.Run("rxe_client", func(t *testing.T) {
		p.capture(t)
		ctx := ctxFor(t, 2*time.Minute)
		var l *ndkverbs.Listener
		var ol net.Listener
		if err := p.vm.Host.Do(func() (err error) {
			if l, err = ndkverbs.Listen(p.dev, cmtime.DefaultPort, ndkverbs.Depths{Send: 1, Receive: 1}); err != nil {
				return err
			}
			if oob {
				ol, err = net.Listen("tcp4", net.JoinHostPort(HostIPv4.String(), port))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if ol != nil {
			defer ol.Close()
		}
		var ours bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- cmtime.RunServer(ctx, cfg, l, ol, &ours) }()
		out, errOut, code, err := p.vm.Run(ctx, fmt.Sprintf("cmtime -s %v -c %d", HostIPv4, cmtimeConns))
		var serr error
		select {
		case serr = <-done:
		case <-time.After(30 * time.Second):
			serr = fmt.Errorf("server did not finish")
		}
		t.Logf("rxe's cmtime client (exit %d, %v):\n%s%sndkxdp's server:\n%s", code, err, out, errOut, ours.String())
		if err != nil || code != 0 || serr != nil {
			t.Fatalf("rxe's client: exit %d (%v); ndkxdp's server: %v", code, err, serr)
		}
	})
}
