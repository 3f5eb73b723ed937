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

// TestAnswersBeforeSendCompletions: sends and receives share the CQ, as
// in rdma-core's udaddy, so a peer's answers may complete before the
// last of our sends does; they are kept while the sends are awaited and
// counted, in order, in the receive phase. A completion of another type,
// or a receive beyond Count, is an error.
func TestAnswersBeforeSendCompletions(t *testing.T) {
	n := &node{cfg: Config{Count: 2, Size: 4}, slot: 4 + ndk.UDGRHSize}
	n.recv = make([]byte, 2*n.slot)
	done := 0
	for _, r := range []ndk.ResultEx{
		{Type: ndk.OpSend, Result: ndk.Result{Status: ndk.StatusSuccess}},
		{Type: ndk.OpReceive, Result: ndk.Result{Status: ndk.StatusSuccess, RequestContext: 1}},
		{Type: ndk.OpReceive, Result: ndk.Result{Status: ndk.StatusSuccess, RequestContext: 0}},
		{Type: ndk.OpSend, Result: ndk.Result{Status: ndk.StatusSuccess}},
	} {
		if err := n.take(&r, ndk.OpSend, nil, &done); err != nil {
			t.Fatal(err)
		}
	}
	if done != 2 || len(n.early) != 2 {
		t.Fatalf("send phase: %d sends counted, %d receives kept; want 2 and 2", done, len(n.early))
	}
	var slots []int
	if err := n.poll(context.Background(), 2, ndk.OpReceive, func(buf []byte, r *ndk.ResultEx) error {
		slots = append(slots, r.RequestContext.(int))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(slots) != 2 || slots[0] != 1 || slots[1] != 0 || n.early != nil {
		t.Fatalf("receive phase took slots %v (kept %d), want [1 0] from the kept receives", slots, len(n.early))
	}
	done = 0
	n.early = make([]ndk.ResultEx, 2)
	for _, c := range []struct {
		r    ndk.ResultEx
		want ndk.OperationType
	}{
		{ndk.ResultEx{Type: ndk.OpReceive, Result: ndk.Result{Status: ndk.StatusSuccess}}, ndk.OpSend}, // beyond Count
		{ndk.ResultEx{Type: ndk.OpSend, Result: ndk.Result{Status: ndk.StatusSuccess}}, ndk.OpReceive},
		{ndk.ResultEx{Type: ndk.OpSend, Result: ndk.Result{Status: ndk.StatusCancelled}}, ndk.OpSend},
	} {
		if err := n.take(&c.r, c.want, nil, &done); err == nil {
			t.Errorf("%v %v awaiting %v: no error", c.r.Type, c.r.Status, c.want)
		}
	}
}
