package verbstest

import (
	"context"
	"errors"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

func TestResponderChecks(t *testing.T) {
	a, b := Pair(Options{})
	src, _ := a.Register([]byte("0123456789abcdef"), verbs.AccessLocalWrite)
	ro, _ := b.Register(make([]byte, 16), verbs.AccessRemoteRead)
	rw, _ := b.Register(make([]byte, 16), verbs.AccessRemoteWrite)
	seg, _ := src.Seg(0, 8)
	tests := []struct {
		name string
		post func() error
		want error
	}{
		{"write to read-only", func() error { return a.Write(1, seg, ro.Addr, ro.RKey, true) }, verbs.ErrAccess},
		{"write past the end", func() error { return a.Write(2, seg, rw.Addr+9, rw.RKey, true) }, verbs.ErrAccess},
		{"wrong rkey", func() error { return a.Write(3, seg, rw.Addr, rw.RKey+7, true) }, verbs.ErrAccess},
		{"lkey as rkey", func() error { return a.Write(4, seg, rw.Addr, rw.LKey, true) }, verbs.ErrAccess},
		{"read from write-only", func() error { return a.Read(5, seg, rw.Addr, rw.RKey, true) }, verbs.ErrAccess},
		{"atomic without the right", func() error {
			s8, _ := src.Seg(0, 8)
			return a.FetchAdd(6, s8, rw.Addr, rw.RKey, 1, true)
		}, verbs.ErrAccess},
		{"write ok", func() error { return a.Write(7, seg, rw.Addr+8, rw.RKey, true) }, nil},
	}
	for _, tt := range tests {
		if err := tt.post(); err != nil {
			t.Fatalf("%s: post: %v", tt.name, err)
		}
		var c [1]verbs.Completion
		if n, err := a.Poll(c[:]); n != 1 || err != nil {
			t.Fatalf("%s: %d completions, %v", tt.name, n, err)
		}
		if !errors.Is(c[0].Err, tt.want) {
			t.Errorf("%s: completion error %v, want %v", tt.name, c[0].Err, tt.want)
		}
	}
	if string(rw.Buf[8:]) != "01234567" {
		t.Errorf("target %q", rw.Buf)
	}
	if _, err := b.Register(nil, 0); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("empty registration: %v", err)
	}
}

func TestSendWaitsForReceiveAndCloseFlushes(t *testing.T) {
	a, b := Pair(Options{})
	src, _ := a.Register([]byte("hello"), 0)
	dst, _ := b.Register(make([]byte, 4), verbs.AccessLocalWrite)
	s, _ := src.Seg(0, 5)
	if err := a.Send(1, s, true); err != nil {
		t.Fatal(err)
	}
	var c [2]verbs.Completion
	if n, _ := a.Poll(c[:]); n != 0 {
		t.Fatal("send completed without a receive")
	}
	d, _ := dst.Seg(0, 4)
	if err := b.Receive(2, d); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Poll(c[:]); n != 1 || !errors.Is(c[0].Err, verbs.ErrTooLong) {
		t.Fatalf("5 bytes into a 4-byte receive: %d %+v", n, c[0])
	}
	if err := b.Receive(3, d); err != nil {
		t.Fatal(err)
	}
	a.Poll(c[:])
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Poll(c[:]); n != 1 || !errors.Is(c[0].Err, verbs.ErrFlushed) {
		t.Fatalf("after the peer closed: %d %+v", n, c[0])
	}
	if _, err := b.Poll(c[:]); !errors.Is(err, verbs.ErrDisconnected) {
		t.Fatalf("drained: %v, want ErrDisconnected", err)
	}
	if err := b.Send(4, d, true); !errors.Is(err, verbs.ErrDisconnected) {
		t.Fatalf("send after disconnect: %v", err)
	}
}

// TestLostAckHoldsReceivesUntilFlushed: a SEND whose ACK is lost reaches
// the peer but does not complete; the answer that overtakes it is held,
// and when the peer closes the SEND completes flushed ahead of the answer
// and of the peer's disconnect.
func TestLostAckHoldsReceivesUntilFlushed(t *testing.T) {
	a, b, abuf, bbuf := pingPong(Options{})
	ping, _ := abuf.Seg(0, 4)
	aRecv, _ := abuf.Seg(4, 4)
	pong, _ := bbuf.Seg(0, 4)
	bRecv, _ := bbuf.Seg(4, 4)
	if err := a.Receive(10, aRecv); err != nil {
		t.Fatal(err)
	}
	if err := b.Receive(20, bRecv); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(11, ping, true); err != nil {
		t.Fatal(err)
	}
	var c [4]verbs.Completion
	if n, err := b.Poll(c[:]); n != 1 || err != nil || c[0].ID != 20 || c[0].Err != nil || string(bbuf.Buf[4:]) != "ping" {
		t.Fatalf("peer: %d completions (%v) %+v, buffer %q", n, err, c[0], bbuf.Buf)
	}
	if err := b.Send(21, pong, true); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Poll(c[:]); n != 0 || err != nil {
		t.Fatalf("the answer came before the unacknowledged SEND: %d %+v %v", n, c[0], err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	n, err := a.Poll(c[:])
	if n != 2 || err != nil || c[0].ID != 11 || !errors.Is(c[0].Err, verbs.ErrFlushed) || c[1].ID != 10 || c[1].Err != nil || c[1].Bytes != 4 {
		t.Fatalf("after the peer closed: %d completions (%v): %+v", n, err, c[:n])
	}
	if _, err := a.Poll(c[:]); !errors.Is(err, verbs.ErrDisconnected) {
		t.Fatalf("drained: %v, want ErrDisconnected", err)
	}
}

func TestNetworkRejectsUnboundPort(t *testing.T) {
	var n Network
	_, err := n.Connect(context.Background(), 99, verbs.ConnParams{})
	var rej *verbs.RejectError
	if !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidServiceID {
		t.Fatalf("%v, want REJ reason 8", err)
	}
	l, _ := n.Listen(99)
	if _, err := n.Listen(99); err == nil {
		t.Fatal("port bound twice")
	}
	l.Close()
	if _, err := n.Connect(context.Background(), 99, verbs.ConnParams{}); !errors.As(err, &rej) {
		t.Fatalf("after close: %v", err)
	}
}

// TestKeepOnPeerClose: with KeepOnPeerClose the peer's close leaves the
// unacknowledged SEND pending; the answer is no longer held, Poll then
// reports the disconnect, and only the sender's own close flushes the SEND.
func TestKeepOnPeerClose(t *testing.T) {
	a, b, abuf, bbuf := pingPong(Options{KeepOnPeerClose: true})
	ping, _ := abuf.Seg(0, 4)
	aRecv, _ := abuf.Seg(4, 4)
	pong, _ := bbuf.Seg(0, 4)
	bRecv, _ := bbuf.Seg(4, 4)
	for _, err := range []error{a.Receive(10, aRecv), b.Receive(20, bRecv), a.Send(11, ping, true)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	var c [4]verbs.Completion
	if n, _ := b.Poll(c[:]); n != 1 {
		t.Fatalf("peer: %d completions", n)
	}
	if err := b.Send(21, pong, true); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Poll(c[:]); n != 1 || err != nil || c[0].ID != 10 || c[0].Err != nil {
		t.Fatalf("after the peer closed: %d completions (%v): %+v", n, err, c[:n])
	}
	if n, err := a.Poll(c[:]); n != 0 || !errors.Is(err, verbs.ErrDisconnected) {
		t.Fatalf("then: %d completions, %v; want ErrDisconnected with the SEND pending", n, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Poll(c[:]); n != 1 || c[0].ID != 11 || !errors.Is(c[0].Err, verbs.ErrFlushed) {
		t.Fatalf("after our own close: %d completions %+v, want the SEND flushed", n, c[:n])
	}
}

// pingPong is a pair whose SENDs of "ping" lose their ACK, with a region
// on each side: "ping" or "pong" in the first 4 bytes to send, 4 bytes to
// receive into.
func pingPong(o Options) (a, b *Endpoint, abuf, bbuf verbs.Region) {
	o.LoseAck = func(p []byte) bool { return string(p) == "ping" }
	a, b = Pair(o)
	abuf, _ = a.Register([]byte("ping...."), verbs.AccessLocalWrite)
	bbuf, _ = b.Register([]byte("pong...."), verbs.AccessLocalWrite)
	return a, b, abuf, bbuf
}
