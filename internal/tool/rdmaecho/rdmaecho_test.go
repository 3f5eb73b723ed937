package rdmaecho

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// TestEcho: rdma_server and rdma_client over an in-memory network each
// print start and "end 0"; a client with nobody listening ends -1.
func TestEcho(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := &verbstest.Network{}
	l, err := n.Listen(DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var sb, cb bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- RunServer(ctx, l, &sb) }()
	cerr := RunClient(ctx, n, DefaultPort, &cb)
	serr := <-done
	if cerr != nil || serr != nil || sb.String() != "rdma_server: start\nrdma_server: end 0\n" || cb.String() != "rdma_client: start\nrdma_client: end 0\n" {
		t.Fatalf("server %v: %q; client %v: %q", serr, sb.String(), cerr, cb.String())
	}
	cb.Reset()
	err = RunClient(ctx, &verbstest.Network{}, DefaultPort, &cb)
	var rej *verbs.RejectError
	if !errors.As(err, &rej) || cb.String() != "rdma_client: start\nrdma_client: end -1\n" {
		t.Fatalf("no server: %v, %q", err, cb.String())
	}
}

// TestXEcho: rdma_xserver and rdma_xclient in RC mode each print start
// and "end 0": one SEND, the client's, and no answer awaited.
func TestXEcho(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := &verbstest.Network{}
	l, err := n.Listen(DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var sb, cb bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- RunXServer(ctx, l, &sb) }()
	cerr := RunXClient(ctx, n, DefaultPort, &cb)
	serr := <-done
	if cerr != nil || serr != nil || sb.String() != "rdma_xserver: start\nrdma_xserver: end 0\n" || cb.String() != "rdma_xclient: start\nrdma_xclient: end 0\n" {
		t.Fatalf("server %v: %q; client %v: %q", serr, sb.String(), cerr, cb.String())
	}
}
