package ndk

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
)

func expectOpen(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
		t.Fatalf("%s completed while a successor is open", what)
	case <-time.After(quiet):
	}
}

func expectClosed(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not complete after its last successor closed", what)
	}
}

// NDKPI.md §8: a CQ closed before the QPs that complete into it pends
// until they are closed; meanwhile it still takes their completions, and
// no new QP may use it.
func TestCQClosePendsUntilItsQPsClose(t *testing.T) {
	x, y := pipePair(t, true)
	x.rcq.Close()
	x.icq.Close()
	expectOpen(t, x.rcq.Closed(), "CQ close")
	sendOne(t, y, x, []byte("into a closing CQ"))
	if _, err := x.pd.CreateQP(QPConfig{ReceiveCQ: x.rcq, InitiatorCQ: x.icq, ReceiveQueueDepth: 1, InitiatorQueueDepth: 1}); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("CreateQP on a closing CQ: %v, want STATUS_INVALID_HANDLE", err)
	}
	if err := x.qp.Close(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, x.rcq.Closed(), "receive CQ close")
	expectClosed(t, x.icq.Closed(), "initiator CQ close")
}

// NDKPI.md §8: a PD closed before its QPs pends until they are closed.
func TestPDClosePendsUntilItsQPsClose(t *testing.T) {
	x, _ := pipePair(t, false)
	x.pd.Close()
	expectOpen(t, x.pd.Closed(), "PD close")
	if err := x.qp.Close(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, x.pd.Closed(), "PD close")
}

// NDKPI.md §2/§8: the QP is the antecedent of the connector it was given
// to; its close pends (the QP working on) until the connector's close
// completed.
func TestQPClosePendsUntilItsConnectorCloses(t *testing.T) {
	x, y := cmPipePair(t, nil, cm.Params{})
	p := connectEx(t, x, y, 7611)
	if err := x.qp.Close(); err != nil {
		t.Fatal(err)
	}
	expectOpen(t, x.qp.Closed(), "QP close")
	sendOne(t, x, y, []byte("still working"))
	p.active.Close()
	expectClosed(t, x.qp.Closed(), "QP close")
}

// slowCallback marks when a consumer callback starts and when it ends.
type slowCallback struct {
	started  chan struct{}
	finished atomic.Bool
}

func (s *slowCallback) run() {
	close(s.started)
	time.Sleep(300 * time.Millisecond)
	s.finished.Store(true)
}

// NDKPI.md §8: "Adapter close blocks until every callback on every
// descendant has returned": here a disconnect callback.
func TestAdapterCloseWaitsForDisconnectCallback(t *testing.T) {
	x, y := cmPipePair(t, nil, cm.Params{})
	cb := &slowCallback{started: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	l, err := y.a.CreateListener(func(c *Connector) {
		accepted <- c.AcceptEx(ctx, y.qp, 1, 1, nil, func(DisconnectReason) { cb.run() })
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(pipeIPB, 7612)
	if err := l.Listen(addr); err != nil {
		t.Fatal(err)
	}
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(ctx, x.qp, netip.AddrPort{}, addr, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if err := c.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cb.started:
	case <-time.After(5 * time.Second):
		t.Fatal("no disconnect callback")
	}
	y.a.Close()
	if !cb.finished.Load() {
		t.Fatal("Adapter.Close returned while a disconnect callback was running")
	}
}

// The same for a listener's connect callback.
func TestAdapterCloseWaitsForConnectCallback(t *testing.T) {
	x, y := cmPipePair(t, nil, cm.Params{})
	cb := &slowCallback{started: make(chan struct{})}
	l, err := y.a.CreateListener(func(*Connector) { cb.run() })
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(pipeIPB, 7613)
	if err := l.Listen(addr); err != nil {
		t.Fatal(err)
	}
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = c.Connect(ctx, x.qp, netip.AddrPort{}, addr, 1, 1, nil) }()
	select {
	case <-cb.started:
	case <-time.After(5 * time.Second):
		t.Fatal("no connect callback")
	}
	y.a.Close()
	if !cb.finished.Load() {
		t.Fatal("Adapter.Close returned while a connect callback was running")
	}
}
