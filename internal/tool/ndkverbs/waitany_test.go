package ndkverbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// TestWaitAny: WaitAny over two endpoints of one device blocks while
// neither has news, returns when a SEND completes a receive on the one it
// was not called on; each endpoint's own Wait works again afterwards
// (returning once at once, since a notification may have gone to the
// WaitAny's channel). Endpoints of
// another device are refused.
func TestWaitAny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := newSides(t, 1500)
	n := &oobNet{client: a, server: b}
	n.listen(1)
	var cli, srv [2]verbs.Endpoint
	for i := range cli {
		got := make(chan verbs.Endpoint, 1)
		go func() {
			ep, err := oobListener{n, 1}.Accept(ctx, verbs.ConnParams{})
			if err != nil {
				t.Error(err)
			}
			got <- ep
		}()
		var err error
		if cli[i], err = n.Connect(ctx, 1, verbs.ConnParams{}); err != nil {
			t.Fatal(err)
		}
		if srv[i] = <-got; srv[i] == nil {
			t.FailNow()
		}
		defer cli[i].Close()
		defer srv[i].Close()
	}
	s0 := srv[0].(*Endpoint)
	eps := srv[:]
	rbuf, err := srv[1].Register(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	sbuf, err := cli[1].Register([]byte("hello"), 0)
	if err != nil {
		t.Fatal(err)
	}
	for len(s0.wake) > 0 {
		<-s0.wake
	}
	// The first calls may return early (pointing srv[1]'s notifications
	// at s0's channel counts as news, and a new arm may fire once);
	// without news WaitAny then blocks.
	blocked := false
	for i := 0; i < 3 && !blocked; i++ {
		short, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := s0.WaitAny(short, eps)
		scancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		blocked = err != nil
	}
	if !blocked {
		t.Fatal("WaitAny without news never blocked")
	}
	if err := srv[1].Receive(7, mustSeg(t, rbuf, 0, 64)); err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- s0.WaitAny(ctx, eps) }()
	time.Sleep(50 * time.Millisecond) // WaitAny armed and blocked
	if err := cli[1].Send(1, mustSeg(t, sbuf, 0, 5), true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitAny: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitAny slept through a receive on the other endpoint")
	}
	var out [4]verbs.Completion
	if k, err := srv[1].Poll(out[:]); err != nil || k != 1 || out[0].ID != 7 || out[0].Bytes != 5 {
		t.Fatalf("poll: %d %v %+v", k, err, out[0])
	}
	// The first Wait of srv[1] after the WaitAny returns at once: a
	// notification may have gone to the WaitAny's channel unseen.
	qctx, qcancel := context.WithTimeout(ctx, time.Second)
	defer qcancel()
	if err := srv[1].Wait(qctx); err != nil {
		t.Fatalf("Wait after a WaitAny: %v", err)
	}
	// srv[1]'s own Wait takes its notifications back.
	if err := srv[1].Receive(8, mustSeg(t, rbuf, 0, 64)); err != nil {
		t.Fatal(err)
	}
	go func() { woke <- srv[1].Wait(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if err := cli[1].Send(2, mustSeg(t, sbuf, 0, 5), true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the endpoint's own Wait slept through its receive after a WaitAny")
	}
	if err := s0.WaitAny(ctx, []verbs.Endpoint{cli[0]}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("WaitAny over another device's endpoint: %v", err)
	}
}
