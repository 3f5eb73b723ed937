package inproc

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

var (
	ipA = netip.MustParseAddr("198.18.0.1")
	ipB = netip.MustParseAddr("198.18.0.2")
)

func TestGSIHookAllocatesNothing(t *testing.T) {
	p, err := newProvider(Link{Addr: ipA, MAC: rocev2.MAC{2, 0, 0, 0, 0, 1}, MTU: 1500}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := newManagement(p)
	var mad [rocev2.MADLen]byte
	var framer cm.GSIFramer
	frame := make([]byte, cm.GSIFrameLen6)
	path := cm.PathInfo{LocalIP: ipB, RemoteIP: ipA, LocalMAC: rocev2.MAC{2, 0, 0, 0, 0, 2}, RemoteMAC: p.link.MAC}
	n, err := framer.Build(frame, &path, &mad)
	if err != nil {
		t.Fatal(err)
	}
	var pk rocev2.Packet
	if err := rocev2.Parse(frame[:n], &pk); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		g.onGSI(&pk)
		<-g.in
		g.onFirstPacket(0x100)
		<-g.in
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per GSI frame", allocs)
	}
	// A full queue drops and counts instead of blocking the engine.
	for range gsiQueue + 3 {
		g.onGSI(&pk)
	}
	if d := g.queueDrops.Load(); d != 3 {
		t.Fatalf("%d drops counted, want 3", d)
	}
	runtime.KeepAlive(g)
}
