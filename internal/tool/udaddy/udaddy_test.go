package udaddy

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestClientServerOverVeth runs our client against our server on a veth
// pair: SIDR, the datagrams each way and udaddy's lines on both sides.
func TestClientServerOverVeth(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{})
	open := func(h *harness.Host) *ndk.Adapter {
		var a *ndk.Adapter
		if err := h.Do(func() (err error) { a, err = ndk.Open(h.Link, ndk.Options{}); return err }); err != nil {
			t.Fatalf("open %s: %v", h.Name, err)
		}
		t.Cleanup(a.Close)
		return a
	}
	ca, sa := open(p.A), open(p.B)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := Config{Count: 5, Size: 1000}
	var sout, cout bytes.Buffer
	var sst Stats
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sst, serr = RunServer(ctx, sa, netip.AddrPortFrom(netip.IPv4Unspecified(), DefaultPort), cfg, &sout)
	}()
	var cst Stats
	var cerr error
	for try := 0; try < 50; try++ { // until the server serves
		cout.Reset()
		cst, cerr = RunClient(ctx, ca, netip.AddrPortFrom(sa.LocalAddress(), DefaultPort), cfg, &cout)
		if cerr == nil || !strings.Contains(cerr.Error(), "SIDR_REP status") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if cerr != nil || serr != nil {
		t.Fatalf("client %v\n%s\nserver %v\n%s", cerr, cout.String(), serr, sout.String())
	}
	if cst.Sent != 5 || cst.Received != 5 || sst.Sent != 5 || sst.Received != 5 {
		t.Fatalf("client %+v server %+v", cst, sst)
	}
	if sst.PeerAddr != ca.LocalAddress() || cst.PeerAddr != sa.LocalAddress() {
		t.Fatalf("peers %v and %v", sst.PeerAddr, cst.PeerAddr)
	}
	for _, want := range []string{"udaddy: starting client", "initiating data transfers", "data transfers complete"} {
		if !strings.Contains(cout.String(), want) {
			t.Fatalf("client output lacks %q:\n%s", want, cout.String())
		}
	}
	if !strings.Contains(sout.String(), "sending replies") {
		t.Fatalf("server output:\n%s", sout.String())
	}
}

// TestMessageOverMTURefused: a size over the path MTU is refused before
// anything is sent, with udaddy's words.
func TestMessageOverMTURefused(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{})
	var a *ndk.Adapter
	if err := p.A.Do(func() (err error) { a, err = ndk.Open(p.A.Link, ndk.Options{}); return err }); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err := RunClient(context.Background(), a, netip.AddrPortFrom(p.B.IPv4, DefaultPort), Config{Size: 5000}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "is larger than active mtu") {
		t.Fatalf("err %v", err)
	}
}
