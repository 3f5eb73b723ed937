package cm_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// newRealPair is newPair on the system clock, for the blocking ResolveUD.
func newRealPair(t *testing.T, f cmtest.Faults) *pair {
	t.Helper()
	link := cmtest.NewLink(cm.SystemClock{}, f)
	a, err := cm.New(cm.Config{Transport: link.A, CAGUID: link.A.GUID(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cm.New(cm.Config{Transport: link.B, CAGUID: link.B.GUID(), Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	link.A.Attach(a)
	link.B.Attach(b)
	t.Cleanup(func() { a.Close(); b.Close() })
	return &pair{t: t, link: link, a: a, b: b}
}

// TestSIDR_ResolveBothWays: each Manager serves a UD port and resolves
// the other's; the SIDR_REQ carries RDMA_PS_UDP | port and the rdma_cm
// header, the SIDR_REP the QPN and Q_Key.
func TestSIDR_ResolveBothWays(t *testing.T) {
	p := newRealPair(t, cmtest.Faults{})
	sa, err := p.a.ServeUD(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), 0x111, cm.RDMAUDPQKey)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.b.ServeUD(netip.AddrPortFrom(ipB, 7175), 0x222, cm.RDMAUDPQKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := p.a.ResolveUD(ctx, p.pathAB(), netip.AddrPortFrom(ipB, 7175), time.Second, 3)
	if err != nil || got.QPN != 0x222 || got.QKey != cm.RDMAUDPQKey || got.Path.RemoteIP != ipB {
		t.Fatalf("A resolving B: %+v, %v", got, err)
	}
	got, err = p.b.ResolveUD(ctx, p.pathBA(), netip.AddrPortFrom(ipA, 7174), time.Second, 3)
	if err != nil || got.QPN != 0x111 || got.QKey != cm.RDMAUDPQKey {
		t.Fatalf("B resolving A: %+v, %v", got, err)
	}
	// IPv6: the wildcard of A's IPv4 service does not serve it; one of
	// its own does.
	path6 := p.link.B.PathTo(ip6B, ip6A)
	if _, err := p.b.ResolveUD(ctx, path6, netip.AddrPortFrom(ip6A, 7174), time.Second, 3); err == nil {
		t.Fatal("an IPv4 service answered an IPv6 request")
	}
	if _, err := p.a.ServeUD(netip.AddrPortFrom(netip.IPv6Unspecified(), 7174), 0x333, cm.RDMAUDPQKey); err != nil {
		t.Fatal(err)
	}
	if got, err := p.b.ResolveUD(ctx, path6, netip.AddrPortFrom(ip6A, 7174), time.Second, 3); err != nil || got.QPN != 0x333 {
		t.Fatalf("B resolving A over IPv6: %+v, %v", got, err)
	}
	if sa.Answered() != 1 || sb.Answered() != 1 {
		t.Fatalf("answered %d and %d, want 1 each", sa.Answered(), sb.Answered())
	}
	var pkt rocev2.Packet
	for _, f := range p.link.A.Frames() {
		_, _, mad, err := cm.ParseGSI(f, &pkt)
		if err != nil {
			t.Fatal(err)
		}
		d, err := rocev2.DecodeMAD(mad)
		if err != nil {
			t.Fatal(err)
		}
		if req, ok := d.Message.(*rocev2.CMSIDRReq); ok {
			h, err := rocev2.DecodeCMAHeader(req.PrivateData[:])
			if req.ServiceID != 0x0000000001111C07 || req.PKey != rocev2.DefaultPKey || err != nil || h.Src != ipA || h.Dst != ipB {
				t.Fatalf("SIDR_REQ %+v header %+v %v", req, h, err)
			}
		}
	}
}

// TestSIDR_Refusals: a port nobody serves answers IB_SIDR_UNSUPPORTED, a
// closed service too, and a taken port cannot be served twice.
func TestSIDR_Refusals(t *testing.T) {
	p := newRealPair(t, cmtest.Faults{})
	ctx := context.Background()
	_, err := p.a.ResolveUD(ctx, p.pathAB(), netip.AddrPortFrom(ipB, 9), time.Second, 3)
	var ne *ndkpi.Error
	if !errors.As(err, &ne) || ne.Status != ndkpi.StatusConnectionRefused {
		t.Fatalf("unserved port: %v, want CONNECTION_REFUSED", err)
	}
	s, err := p.b.ServeUD(netip.AddrPortFrom(ipB, 9), 0x222, cm.RDMAUDPQKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.b.ServeUD(netip.AddrPortFrom(netip.IPv4Unspecified(), 9), 0x333, cm.RDMAUDPQKey); !errors.As(err, &ne) || ne.Status != ndkpi.StatusAddressAlreadyExists {
		t.Fatalf("second service on the port: %v", err)
	}
	if _, err := p.b.ServeUD(netip.AddrPortFrom(ipB, 0), 0x333, cm.RDMAUDPQKey); err == nil {
		t.Fatal("port 0 served")
	}
	if _, err := p.a.ResolveUD(ctx, p.pathAB(), netip.AddrPortFrom(ipB, 9), time.Second, 3); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := p.a.ResolveUD(ctx, p.pathAB(), netip.AddrPortFrom(ipB, 9), time.Second, 3); !errors.As(err, &ne) || ne.Status != ndkpi.StatusConnectionRefused {
		t.Fatalf("closed service: %v", err)
	}
}

// TestSIDR_Retransmits: a lost SIDR_REQ is sent again after the timeout;
// a peer that never answers ends in IO_TIMEOUT.
func TestSIDR_Retransmits(t *testing.T) {
	p := newRealPair(t, cmtest.Faults{DropIf: func(from string, attr rocev2.AttributeID, n int) bool {
		return from == "A" && attr == rocev2.AttrSIDRREQ && n == 0
	}})
	if _, err := p.b.ServeUD(netip.AddrPortFrom(ipB, 5000), 0x222, cm.RDMAUDPQKey); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.ResolveUD(context.Background(), p.pathAB(), netip.AddrPortFrom(ipB, 5000), 20*time.Millisecond, 3); err != nil {
		t.Fatal(err)
	}
	if n := p.link.A.Sent(rocev2.AttrSIDRREQ); n != 2 {
		t.Fatalf("%d SIDR_REQs sent, want 2", n)
	}
	p.link.SetFaults(cmtest.Faults{Drop: 1})
	_, err := p.a.ResolveUD(context.Background(), p.pathAB(), netip.AddrPortFrom(ipB, 5000), 10*time.Millisecond, 2)
	var ne *ndkpi.Error
	if !errors.As(err, &ne) || ne.Status != ndkpi.StatusIOTimeout {
		t.Fatalf("no answer: %v, want IO_TIMEOUT", err)
	}
}
