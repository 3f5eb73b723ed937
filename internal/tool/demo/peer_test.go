package demo

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/daemonproc"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestDemoPeerRefused: a client reaching no demo server, or asking for
// what the server refuses, fails naming the phase, the peer and the REJ's
// reason; the server goes on serving.
func TestDemoPeerRefused(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := testHost(t, p.A)
	served := make(chan error, 1)
	var sout daemonproc.SyncBuffer
	go func() { served <- serveDemo(ctx, a, netip.AddrPortFrom(p.A.IPv4, Port), 0, &sout) }()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(sout.String(), "serving the demo's phases on") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}

	// Nobody listens on port 7175.
	var out, errOut strings.Builder
	err := p.B.Do(func() error {
		return Run(ctx, []string{"-dev", p.B.Link, "-peer", p.A.IPv4.String() + ":7175", "-messages", "10"}, &out, &errOut)
	})
	if err == nil || !strings.Contains(err.Error(), "SEND: nobody listens at "+p.A.IPv4.String()+":7175 (REJ reason 8") {
		t.Errorf("client to a port nobody listens on: %v, want the phase and REJ reason 8 named", err)
	}

	// rping's client, told the peer runs rping -s, meets the demo server:
	// its REJ says what it serves.
	out.Reset()
	err = p.B.Do(func() error {
		return Run(ctx, []string{"-dev", p.B.Link, "-peer", p.A.IPv4.String(), "-peer-kind", "rping", "-pings", "5"}, &out, &errOut)
	})
	if err == nil || !strings.Contains(err.Error(), "refused (REJ reason 28") || !strings.Contains(err.Error(), "not a request of ndkxdp demo -peer") {
		t.Errorf("-peer-kind rping against demo -serve: %v, want the server's REJ sentence", err)
	}

	// The server refuses a phase it does not know, and says why.
	b := testHost(t, p.B)
	_, _, err = connectPeer(ctx, b, netip.AddrPortFrom(p.A.IPv4, Port), demoRequest{Op: 9, Size: 64, Count: 1})
	if err == nil || !strings.Contains(err.Error(), "refused (REJ reason 28") || !strings.Contains(err.Error(), "unknown phase 9") {
		t.Errorf("unknown phase: %v, want the REJ's reason and the server's sentence", err)
	}
	if _, _, err = connectPeer(ctx, b, netip.AddrPortFrom(p.A.IPv4, Port), demoRequest{Op: opWrite, Size: 32 << 20, Count: 1}); err == nil ||
		!strings.Contains(err.Error(), "WRITE of 33554432 bytes: this server serves 1..16777216") {
		t.Errorf("oversized WRITE: %v, want the server's limit", err)
	}
	t.Run("verdicts", func(t *testing.T) {
		// A SEND whose sequence number is wrong, and a WRITE phase whose
		// WRITEs never happened: the server's verdicts say so.
		cn, _, err := connectPeer(ctx, b, netip.AddrPortFrom(p.A.IPv4, Port), demoRequest{Op: opSend, Size: 64, Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer cn.close()
		msg, _, verdict, mr, err := noteBuffers(b, cn.qa, 64, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer mr.Deregister()
		fillMessage(msg, 7)
		sge, _ := mr.SGE(0, 64)
		if err := cn.qa.Send(nil, []ndk.SGE{sge}, 0); err != nil {
			t.Fatal(err)
		}
		if err := awaitVerdict(ctx, b, verdict); err == nil || !strings.Contains(err.Error(), "the peer found: message 0 arrived wrong") {
			t.Errorf("SEND of message 7 first: verdict %v, want message 0 named wrong", err)
		}
		if err := cn.Disconnect(ctx); err != nil {
			t.Error(err)
		}
		cn, rep, err := connectPeer(ctx, b, netip.AddrPortFrom(p.A.IPv4, Port), demoRequest{Op: opWrite, Size: 64, Count: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer cn.close()
		if rep.Addr == 0 || rep.Token == 0 {
			t.Errorf("WRITE phase's reply %+v gives no memory", rep)
		}
		_, done, verdict, mr2, err := noteBuffers(b, cn.qa, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer mr2.Deregister()
		demoNote{Value: 4}.put(done)
		sge, _ = mr2.SGE(0, demoNoteLen)
		if err := cn.qa.Send(nil, []ndk.SGE{sge}, 0); err != nil {
			t.Fatal(err)
		}
		if err := awaitVerdict(ctx, b, verdict); err == nil || !strings.Contains(err.Error(), "the memory does not hold the last of the 4 WRITEs") {
			t.Errorf("WRITE phase without WRITEs: verdict %v, want the memory named wrong", err)
		}
		if err := cn.Disconnect(ctx); err != nil {
			t.Error(err)
		}
	})
	cancel()
	<-served
	if s := sout.String(); !strings.Contains(s, "refused ") || !strings.Contains(s, "unknown phase 9") ||
		!strings.Contains(s, "SEND from "+p.B.IPv4.String()) || !strings.Contains(s, "message 0 arrived wrong") {
		t.Errorf("server output does not name the refusals and failures:\n%s", s)
	}
}
