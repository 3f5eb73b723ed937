package ndk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// The examples' network. On a real host these are the RoCE interface of
// each machine and the server's address on it; TestExamples points them
// at a veth pair in two network namespaces.
var (
	serverInterface = "eth1"
	clientInterface = "eth1"
	serverAddress   = netip.MustParseAddrPort("198.18.0.2:7174")
)

// waitResult waits for the next completion of cq: it polls, and when the
// CQ is empty arms it and sleeps until its notification (ready) says a
// completion arrived. An arm fires at once for completions already queued,
// so none is slept through.
func waitResult(cq *ndk.CQ, ready <-chan struct{}) (ndk.Result, error) {
	var rs [1]ndk.Result
	deadline := time.After(10 * time.Second)
	for cq.GetResults(rs[:]) == 0 {
		if err := cq.Arm(ndk.CQNotifyAny); err != nil {
			return ndk.Result{}, err
		}
		select {
		case <-ready:
		case <-deadline:
			return ndk.Result{}, errors.New("no completion within 10s")
		}
	}
	if rs[0].Status != ndk.StatusSuccess {
		return rs[0], fmt.Errorf("completion failed: %v", rs[0].Status)
	}
	return rs[0], nil
}

// notifier returns a CQ notification callback that wakes waitResult.
func notifier() (func(ndk.Status), chan struct{}) {
	ready := make(chan struct{}, 1)
	return func(ndk.Status) {
		select {
		case ready <- struct{}{}:
		default:
		}
	}, ready
}

// A server: it listens on serverAddress, accepts one connection with a
// receive posted, prints the message the client SENDs, and waits for the
// client to disconnect. ndk.Open must run in the interface's network
// namespace.
func Example_server() {
	a, err := ndk.Open(serverInterface, ndk.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	notify, ready := notifier()
	cq, err := a.CreateCQ(64, notify)
	if err != nil {
		log.Fatal(err)
	}
	pd, err := a.CreatePD()
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, err := pd.RegisterMR(buf, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	qp, err := pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq,
		ReceiveQueueDepth: 16, InitiatorQueueDepth: 16, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		log.Fatal(err)
	}
	sge, err := mr.SGE(0, len(buf))
	if err != nil {
		log.Fatal(err)
	}
	// The receive is posted before the connection is accepted, so the
	// client's first SEND finds it.
	if err := qp.Receive("greeting", []ndk.SGE{sge}); err != nil {
		log.Fatal(err)
	}

	requests := make(chan *ndk.Connector, 1)
	l, err := a.CreateListener(func(c *ndk.Connector) {
		select {
		case requests <- c:
		default: // one client is enough
			c.Reject(nil)
			c.Close()
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if err := l.Listen(serverAddress); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c *ndk.Connector
	select {
	case c = <-requests:
	case <-ctx.Done():
		log.Fatal("no client within 30s")
	}
	defer c.Close()
	gone := make(chan struct{})
	if err := c.Accept(ctx, qp, 1, 1, nil, func() { close(gone) }); err != nil {
		log.Fatal(err)
	}
	r, err := waitResult(cq, ready)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server: %v sent %q\n", c.PeerAddress().Addr(), buf[:r.BytesTransferred])
	select {
	case <-gone:
	case <-ctx.Done():
	}
}

// A client: it connects to the server at serverAddress through the IB CM
// (as rdma_cm does), SENDs one message and disconnects. The server may
// not listen yet, which a REJ tells (ErrConnectionRefused): the client
// tries again with a fresh QP and connector.
func Example_client() {
	a, err := ndk.Open(clientInterface, ndk.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	notify, ready := notifier()
	cq, err := a.CreateCQ(64, notify)
	if err != nil {
		log.Fatal(err)
	}
	pd, err := a.CreatePD()
	if err != nil {
		log.Fatal(err)
	}
	msg := []byte("hello over RDMA")
	mr, err := pd.RegisterMR(msg, ndk.MRFlagAllowLocalRead)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var qp *ndk.QP
	var c *ndk.Connector
	for attempt := 1; ; attempt++ {
		if qp, err = pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq,
			ReceiveQueueDepth: 16, InitiatorQueueDepth: 16, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}); err != nil {
			log.Fatal(err)
		}
		if c, err = a.CreateConnector(); err != nil {
			log.Fatal(err)
		}
		err = c.Connect(ctx, qp, netip.AddrPort{}, serverAddress, 1, 1, nil)
		if err == nil {
			break
		}
		c.Close()
		qp.Close()
		if !errors.Is(err, ndk.ErrConnectionRefused) || attempt == 50 {
			log.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer qp.Close()
	defer c.Close()
	if err := c.CompleteConnect(nil); err != nil {
		log.Fatal(err)
	}
	sge, err := mr.SGE(0, len(msg))
	if err != nil {
		log.Fatal(err)
	}
	if err := qp.Send(nil, []ndk.SGE{sge}, 0); err != nil {
		log.Fatal(err)
	}
	if _, err := waitResult(cq, ready); err != nil { // the server's ACK
		log.Fatal(err)
	}
	fmt.Printf("client: sent %q to %v\n", msg, serverAddress)
	if err := c.Disconnect(ctx); err != nil {
		log.Fatal(err)
	}
}

// TestExamples runs Example_server and Example_client on the two ends of
// a veth pair, each in its namespace, and checks what they print.
func TestExamples(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{})
	serverInterface, clientInterface = p.B.Link, p.A.Link
	serverAddress = netip.AddrPortFrom(p.B.IPv4, 7174)

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&out, r); close(copied) }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.B.Do(func() error { Example_server(); return nil })
	}()
	p.A.Do(func() error { Example_client(); return nil })
	wg.Wait()
	os.Stdout = stdout
	w.Close()
	<-copied
	for _, want := range []string{
		fmt.Sprintf("client: sent \"hello over RDMA\" to %v", serverAddress),
		fmt.Sprintf("server: %v sent \"hello over RDMA\"", p.A.IPv4),
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("examples printed %q, want a line %q", out.String(), want)
		}
	}
}
