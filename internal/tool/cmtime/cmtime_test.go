package cmtime

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// TestRounds: over an in-memory network, a client and a server run
// cmtime's rounds, without OOB (one round of -c connections) and with it
// (a warm-up of one, then two of -c, synced over TCP), each printing a
// table per round.
func TestRounds(t *testing.T) {
	for _, oob := range []bool{false, true} {
		t.Run(map[bool]string{false: "rdma-core 44", true: "oob"}[oob], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n := &verbstest.Network{}
			l, err := n.Listen(DefaultPort)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ol, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ol.Close()
			cfg := Config{Connections: 7, OOB: oob}
			var sout, cout bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- RunServer(ctx, cfg, l, ol, &sout) }()
			dial := func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", ol.Addr().String())
			}
			cerr := RunClient(ctx, cfg, n, DefaultPort, dial, &cout)
			serr := <-done
			if cerr != nil || serr != nil {
				t.Fatalf("client %v\n%s\nserver %v\n%s", cerr, cout.String(), serr, sout.String())
			}
			rounds := 1
			if oob {
				rounds = 3
				for _, want := range []string{"Client warmup", "Connect (7) QPs test", "Connect (7) test - no QPs"} {
					if !strings.Contains(cout.String(), want) {
						t.Errorf("client's output lacks %q:\n%s", want, cout.String())
					}
				}
				for _, want := range []string{"Server warmup", "Accept (7) QPs test", "Accept (7) test - no QPs"} {
					if !strings.Contains(sout.String(), want) {
						t.Errorf("server's output lacks %q:\n%s", want, sout.String())
					}
				}
			}
			for _, out := range []string{cout.String(), sout.String()} {
				if k := strings.Count(out, "step              total ms"); k != rounds {
					t.Errorf("%d tables, want %d:\n%s", k, rounds, out)
				}
			}
			if !strings.Contains(cout.String(), "\tConnecting\n\tDisconnecting\n") || !strings.Contains(cout.String(), "connect      :") {
				t.Errorf("client's output:\n%s", cout.String())
			}
		})
	}
}

// TestOOBStepMismatch: an OOB peer that sends another step than the one
// awaited fails the run, naming both.
func TestOOBStepMismatch(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = b.Write([]byte{stepDisconnect}) }()
	if err := recvSend(a, stepConnect); err == nil || !strings.Contains(err.Error(), "got step 14, want 12") {
		t.Fatalf("recvSend: %v", err)
	}
}
