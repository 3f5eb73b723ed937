package cm_test

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// rawREQ encodes the REQ a peer with CA GUID guid sends from src to dst
// with communication ID id and QP qpn, laid out as Linux's CM lays it out
// (cm.c cm_format_req, cma.c cma_connect_ib) but asking for the longest
// timeouts the 5-bit fields allow: the MAD a flooder or a fuzzer hands
// straight to Manager.HandleMAD.
func rawREQ(guid uint64, id, qpn uint32, src, dst netip.AddrPort) []byte {
	req := &rocev2.CMReq{
		LocalCommID: id, ServiceID: rocev2.ServiceID(rocev2.PortSpaceTCP, dst.Port()), LocalCAGUID: guid,
		LocalQPN: qpn & rocev2.PSNMask, ResponderResources: 4, InitiatorDepth: 4, RemoteCMResponseTimeout: 31,
		TransportType: rocev2.CMTransportRC, StartingPSN: rocev2.PSN(id) & rocev2.PSNMask, LocalCMResponseTimeout: 31,
		RetryCount: 7, PKey: rocev2.DefaultPKey, PathMTU: rocev2.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: rocev2.CMPath{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: rocev2.GIDFromAddr(src.Addr()),
			RemoteGID: rocev2.GIDFromAddr(dst.Addr()), HopLimit: rocev2.DefaultTTL, LocalAckTimeout: 31},
	}
	hdr := rocev2.CMAHeader{SrcPort: src.Port(), Src: src.Addr(), Dst: dst.Addr()}
	if err := hdr.Encode(req.PrivateData[:]); err != nil {
		panic(err)
	}
	mad := rocev2.NewCMMAD(uint64(id)<<8|1, req)
	b := make([]byte, rocev2.MADLen)
	if err := mad.Encode(b); err != nil {
		panic(err)
	}
	return b
}

// TestSYNFloodHoldsAtMostTheBacklog: a peer sends 2,000 REQs, each with a
// new communication ID and QP, and never completes one (no RTU). The
// listener's consumer accepts every request it is handed, as a server
// does. The manager holds at most ListenBacklog half-open connections at
// any moment (a Connector and the consumer's QP each); every REQ beyond
// gets a stateless REJ. An established connection made before the flood
// stays established, and once the flood's REPs have exhausted their
// retries the backlog is free for a genuine client again, and their
// time-wait ends: the REQs ask for the longest timeouts (2.4 hours a REP
// try, 16 tries; 2.4 hours of time-wait), which our own parameters cap.
// Before this test, accepting took a request out of the backlog, so the
// 2,000 REQs left 2,000 connections (and QPs) waiting for their RTU, each
// for days.
func TestSYNFloodHoldsAtMostTheBacklog(t *testing.T) {
	const backlog, flood = 16, 2000
	params := cm.DefaultParams()
	params.ListenBacklog = backlog
	params.CMResponseTimeout = 12 // 16 ms: the flood's REPs give up within a second of fake time
	params.MaxCMRetries = 3
	p := newPair(t, cmtest.Faults{}, params)
	addr := netip.AddrPortFrom(ipB, 8400)
	ls := listen(t, p.b, addr)
	good := p.connect(t, ls, 1, addr)
	var qpn atomic.Uint32
	ls.mu.Lock()
	ls.onConnect = func(c *cm.Connector) {
		if err := c.Accept(cmtest.NewQP(200000+qpn.Add(1), 0), cm.AcceptParams{}, nil, func(error) {}); err != nil {
			t.Errorf("accept: %v", err)
		}
	}
	ls.mu.Unlock()

	from := p.pathBA() // the path back to the flooder, as CheckGSI gives it
	src := netip.AddrPortFrom(ipA, 40000)
	maxHalfOpen, maxConns := 0, 0
	for i := range flood {
		req := rawREQ(0x0200_00ff_fe00_0099, uint32(0x5000_0000+i), uint32(0x300000+i), src, addr)
		p.b.HandleMAD(from, rocev2.GSIQP, req)
		s := p.b.Stats()
		maxHalfOpen, maxConns = max(maxHalfOpen, s.HalfOpen), max(maxConns, s.Connections)
		if i%100 == 0 {
			p.clk.Advance(time.Millisecond)
		}
	}
	s := p.b.Stats()
	t.Logf("%d REQs: at most %d half-open and %d connections held; %d REJs, %d REPs sent; consumer handed %d requests",
		flood, maxHalfOpen, maxConns, s.Sent[rocev2.AttrREJ], s.Sent[rocev2.AttrREP], ls.count()-1)
	if maxHalfOpen > backlog {
		t.Fatalf("%d half-open connections held, backlog %d", maxHalfOpen, backlog)
	}
	// The good connection, the backlog, and the flood's REJ'd or timed-out
	// connections that wait out time-wait (the stateless REJs keep none).
	if maxConns > 2*backlog+2 {
		t.Fatalf("%d connections held during the flood", maxConns)
	}
	if s.Sent[rocev2.AttrREJ] < flood-uint64(ls.count()) {
		t.Fatalf("%d REJs for %d REQs of which %d reached the consumer", s.Sent[rocev2.AttrREJ], flood, ls.count()-1)
	}
	if s.BacklogRefusals < flood-uint64(ls.count()) {
		t.Fatalf("%d backlog refusals counted for %d REQs of which %d reached the consumer", s.BacklogRefusals, flood, ls.count()-1)
	}
	if good.qpA.State() != "rts" || good.qpB.State() != "rts" {
		t.Fatalf("the connection made before the flood: %s / %s", good.qpA.State(), good.qpB.State())
	}
	// The flood's REPs give up and their time-wait ends (REP: 4 tries of
	// 16 ms; time-wait at most 16 s with the default path parameters).
	if !p.clk.RunUntil(func() bool { s := p.b.Stats(); return s.HalfOpen == 0 && s.Connections == 1 }, time.Minute) {
		s := p.b.Stats()
		t.Fatalf("a minute after the flood: %d half-open, %d connections (1 genuine)", s.HalfOpen, s.Connections)
	}
	ls.mu.Lock()
	ls.onConnect = nil
	ls.mu.Unlock()
	late := p.connect(t, ls, 2, addr)
	if late.qpB.State() != "rts" {
		t.Fatal("a genuine client after the flood did not connect")
	}
}
