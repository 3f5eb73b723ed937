package verbstest

import (
	"context"
	"errors"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/perftest/verbs"
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
