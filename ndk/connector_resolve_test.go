package ndk

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestConnectEndsWhileResolving: a Connect whose path resolution hangs (a
// neighbour that never answers ARP, which the kernel gives 3 s) returns
// STATUS_CANCELLED as soon as its context ends, not when resolution gives
// up.
func TestConnectEndsWhileResolving(t *testing.T) {
	p, err := porttest.NewPipe(porttest.PipeConfig{Depth: 64})
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAdapter(defaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	link := inproc.Link{Addr: pipeIPA, MAC: rocev2.MAC{2, 0, 0, 0, 0, 1}, MTU: 1500, PathMTU: rocev2.MTU1024}
	cfg := providerConfig(Options{}, a.regions)
	release := make(chan struct{})
	defer close(release)
	cfg.Resolve = func(src, dst netip.Addr) (cm.PathInfo, error) {
		select {
		case <-release:
		case <-time.After(3 * time.Second):
		}
		return cm.PathInfo{}, &Error{Status: StatusHostUnreachable, Op: "resolve", Detail: "no MAC for " + dst.String()}
	}
	prov, err := inproc.OverPort(p.A(), link, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.attach(prov)
	t.Cleanup(a.Close)
	s := newSide(t, a)
	c, err := a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.Connect(ctx, s.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 7174), 1, 1, nil)
	took := time.Since(start)
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Fatalf("Connect returned %v after %v; want STATUS_CANCELLED with the deadline, within 1s", err, took)
	}
}
