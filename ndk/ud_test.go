package ndk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// udSide is a side with a UD QP and registered send and receive buffers.
type udSide struct {
	*side
	ud       *QP
	src, dst []byte
	smr, dmr *MR
	rcq, icq *CQ
}

func newUDSide(t *testing.T, s *side) *udSide {
	t.Helper()
	u := &udSide{side: s, src: make([]byte, 8192), dst: make([]byte, 8192)}
	var err error
	if u.rcq, err = s.a.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if u.icq, err = s.a.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if u.ud, err = s.pd.CreateUDQP(QPConfig{ReceiveCQ: u.rcq, InitiatorCQ: u.icq, Context: "ud",
		ReceiveQueueDepth: 16, InitiatorQueueDepth: 16, MaxReceiveRequestSGE: 2, MaxInitiatorRequestSGE: 2}, RDMAUDPQKey); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.ud.Close() })
	if u.smr, err = s.pd.RegisterMR(u.src, 0); err != nil {
		t.Fatal(err)
	}
	if u.dmr, err = s.pd.RegisterMR(u.dst, MRFlagAllowLocalWrite); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u *udSide) sge(t *testing.T, m *MR, n int) []SGE {
	t.Helper()
	s, err := m.SGE(0, n)
	if err != nil {
		t.Fatal(err)
	}
	return []SGE{s}
}

// exchangeUD resolves each side's service from the other over SIDR and
// sends a datagram each way, the answer going back to the address and
// QPN the request's GRH and completion named (as udaddy's server does).
func exchangeUD(t *testing.T, x, y *udSide, ipX, ipY netip.Addr, n int) {
	t.Helper()
	sx, err := x.a.ServeUD(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), x.ud)
	if err != nil {
		t.Fatal(err)
	}
	defer sx.Close()
	sy, err := y.a.ServeUD(netip.AddrPortFrom(ipY, 7174), y.ud)
	if err != nil {
		t.Fatal(err)
	}
	defer sy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	toY, err := x.a.ResolveUD(ctx, netip.AddrPortFrom(ipY, 7174))
	if err != nil || toY.QPN != y.ud.QPN() || toY.QKey != RDMAUDPQKey || toY.IP != ipY {
		t.Fatalf("x resolving y: %+v, %v", toY, err)
	}
	toX, err := y.a.ResolveUD(ctx, netip.AddrPortFrom(ipX, 7174))
	if err != nil || toX.QPN != x.ud.QPN() || toX.QKey != RDMAUDPQKey {
		t.Fatalf("y resolving x: %+v, %v", toX, err)
	}

	// y answers x where x's datagram came from, as udaddy's server does
	// (ibv_create_ah_from_wc), with its DSCP and ECN; x names its QPN in
	// the immediate, and its datagram's TOS in the destination (an
	// address handle's traffic class).
	if err := y.ud.Receive("r", y.sge(t, y.dmr, UDGRHSize+8)); err != nil {
		t.Fatal(err)
	}
	asked := toY
	asked.TOS, asked.SetTOS = 0x6a, true
	if err := x.ud.SendToWithImmediate("s", x.sge(t, x.smr, 8), asked, x.ud.QPN(), 0); err != nil {
		t.Fatal(err)
	}
	waitResult(t, x.icq)
	r := waitResult(t, y.rcq)
	if r.Flags != ResultWithImmediate || r.Immediate != x.ud.QPN() {
		t.Fatalf("receive of a datagram with immediate: %+v", r)
	}
	if tos, ok := UDTOS(y.dst[:UDGRHSize]); !ok || tos != 0x6a {
		t.Fatalf("the datagram's TOS %#x (%v), want the destination's 0x6a", tos, ok)
	}
	back, err := y.a.UDReplyTo(y.dst[:UDGRHSize], uint32(r.TypeSpecificCompletionOutput), y.ud.UDQKey())
	want := toX
	want.TOS, want.SetTOS = 0x6a, true
	if err != nil || back != want {
		t.Fatalf("reply destination %+v, %v; want %+v", back, err, want)
	}

	copy(x.src, bytes.Repeat([]byte("ping"), n/4))
	copy(y.src, bytes.Repeat([]byte("pong"), n/4))
	for _, d := range []struct {
		from, to *udSide
		dest     UDDestination
		ip       netip.Addr
		tos      uint8 // the QP's own (0) unless the destination names one
	}{{x, y, toY, ipX, 0}, {y, x, toX, ipY, 0}, {y, x, back, ipY, 0x6a}} {
		if err := d.to.ud.Receive("r", d.to.sge(t, d.to.dmr, UDGRHSize+n)); err != nil {
			t.Fatal(err)
		}
		if err := d.from.ud.SendTo("s", d.from.sge(t, d.from.smr, n), d.dest, 0); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, d.from.icq); r.Status != StatusSuccess || r.Type != OpSend {
			t.Fatalf("send completion %+v", r)
		}
		r := waitResult(t, d.to.rcq)
		if r.Status != StatusSuccess || int(r.BytesTransferred) != UDGRHSize+n || r.TypeSpecificCompletionOutput != uint64(d.from.ud.QPN()) {
			t.Fatalf("receive completion %+v: want %d bytes from QPN %#x", r, UDGRHSize+n, d.from.ud.QPN())
		}
		if got := UDSource(d.to.dst); got != d.ip {
			t.Fatalf("GRH source %v, want %v (% x)", got, d.ip, d.to.dst[:UDGRHSize])
		}
		if tos, _ := UDTOS(d.to.dst); tos != d.tos {
			t.Fatalf("datagram to %+v carried TOS %#x, want %#x", d.dest, tos, d.tos)
		}
		if !bytes.Equal(d.to.dst[UDGRHSize:UDGRHSize+n], d.from.src[:n]) {
			t.Fatal("payload altered")
		}
	}
	if sx.Answered() != 1 || sy.Answered() != 1 {
		t.Fatalf("services answered %d and %d, want 1 each", sx.Answered(), sy.Answered())
	}
}

// TestUDOverPipe: UD datagrams and SIDR both ways between two in-process
// adapters joined by the in-memory pipe.
func TestUDOverPipe(t *testing.T) {
	a, b := cmPipePair(t, nil, cm.Params{})
	x, y := newUDSide(t, a), newUDSide(t, b)
	exchangeUD(t, x, y, pipeIPA, pipeIPB, 1000)
}

// TestUDRefusals: what the UD extension refuses, each with the status and
// words that say why; and a datagram with a foreign Q_Key is dropped and
// counted.
func TestUDRefusals(t *testing.T) {
	a, b := cmPipePair(t, nil, cm.Params{})
	x, y := newUDSide(t, a), newUDSide(t, b)
	dest := UDDestination{IP: pipeIPB, MAC: [6]byte{2, 0, 0, 0, 0, 2}, QPN: y.ud.QPN(), QKey: RDMAUDPQKey}
	status := func(err error) Status {
		var e *Error
		if errors.As(err, &e) {
			return e.Status
		}
		return 0
	}
	max := int(x.ud.UDMaxMessage())
	if max != 1024 {
		t.Fatalf("UDMaxMessage %d, want the pipe's path MTU 1024", max)
	}
	err := x.ud.SendTo(nil, x.sge(t, x.smr, max+1), dest, 0)
	if status(err) != StatusInvalidParameter || !strings.Contains(err.Error(), "over the path MTU of 1024") {
		t.Fatalf("datagram over the MTU: %v", err)
	}
	if err := x.qp.SendTo(nil, x.sge(t, x.smr, 8), dest, 0); status(err) != StatusInvalidDeviceRequest {
		t.Fatalf("SendTo on an RC QP: %v", err)
	}
	if err := x.ud.SendTo(nil, x.sge(t, x.smr, 8), UDDestination{IP: pipeIPB}, 0); status(err) != StatusInvalidParameter {
		t.Fatalf("SendTo without a QPN: %v", err)
	}
	ce := dest
	ce.TOS, ce.SetTOS = 0x6b, true // ECN CE: a switch's to set
	if err := x.ud.SendTo(nil, x.sge(t, x.smr, 8), ce, 0); status(err) != StatusInvalidParameter {
		t.Fatalf("SendTo with a CE TOS: %v", err)
	}
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Connect(context.Background(), x.ud, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 1), 1, 1, nil); status(err) != StatusInvalidDeviceRequest {
		t.Fatalf("Connect with a UD QP: %v", err)
	}
	if _, err := x.a.ServeUD(netip.AddrPortFrom(pipeIPA, 1), x.qp); status(err) != StatusInvalidDeviceRequest {
		t.Fatalf("ServeUD with an RC QP: %v", err)
	}
	if _, err := x.a.ResolveUD(context.Background(), netip.AddrPortFrom(pipeIPB, 4242)); status(err) != StatusConnectionRefused {
		t.Fatalf("resolving a port nobody serves: %v", err)
	}
	for _, d := range []struct {
		ip  netip.Addr
		qpn uint32
	}{{netip.Addr{}, 5}, {netip.IPv4Unspecified(), 5}, {pipeIPB, 0}, {pipeIPB, 1 << 24}} {
		if _, err := x.a.UDDestinationTo(d.ip, d.qpn, RDMAUDPQKey); status(err) != StatusInvalidParameter {
			t.Fatalf("UDDestinationTo(%v, %#x): %v", d.ip, d.qpn, err)
		}
	}
	if _, err := x.pd.CreateUDQP(QPConfig{ReceiveCQ: x.rcq, InitiatorCQ: x.icq, ReceiveQueueDepth: 1, InitiatorQueueDepth: 1}, 0x80000001); status(err) != StatusInvalidParameter {
		t.Fatalf("controlled Q_Key: %v", err)
	}

	// A foreign Q_Key: dropped, counted, the receive still posted.
	if err := y.ud.Receive("r", y.sge(t, y.dmr, UDGRHSize+8)); err != nil {
		t.Fatal(err)
	}
	bad := dest
	bad.QKey = 0x11111111
	if err := x.ud.SendTo(nil, x.sge(t, x.smr, 8), bad, 0); err != nil {
		t.Fatal(err)
	}
	waitResult(t, x.icq)
	deadline := time.Now().Add(5 * time.Second)
	for badQKeys(y.a) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("bad_qkey %d, want 1", badQKeys(y.a))
		}
		time.Sleep(time.Millisecond)
	}
	if err := x.ud.SendTo(nil, x.sge(t, x.smr, 8), dest, 0); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, y.rcq); r.Status != StatusSuccess || r.BytesTransferred != UDGRHSize+8 {
		t.Fatalf("receive after the dropped datagram: %+v", r)
	}
}

func badQKeys(a *Adapter) uint64 {
	var n uint64
	for _, s := range a.Stats() {
		n += s.BadQKey
	}
	return n
}

// TestUDOverVeth: the same exchange between two adapters on a veth pair
// in namespaces, through XDP steering and AF_XDP sockets, with paths from
// the kernel's routes and neighbours.
// At MTU 9000 the datagram is a whole 4096-byte path MTU, a frame over
// one UMEM chunk (multi-buffer AF_XDP).
func TestUDOverVeth(t *testing.T) {
	for _, c := range []struct{ mtu, n int }{{1500, 1000}, {9000, 4096}} {
		t.Run(fmt.Sprint(c.mtu), func(t *testing.T) { testUDOverVeth(t, c.mtu, c.n) })
	}
}

func testUDOverVeth(t *testing.T, mtu, n int) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: mtu})
	x, y := newUDSide(t, vethSide(t, p.A)), newUDSide(t, vethSide(t, p.B))
	exchangeUD(t, x, y, x.a.provider().Address(), y.a.provider().Address(), n)
}

// TestUDTOSAndReplyClass: UDTOS reads the TOS of an IPv4 GRH and the
// traffic class of an IPv6 one; UDReplyTo answers a CE-marked datagram,
// whose mark a switch set on the way, as ECT(0) with its DSCP.
func TestUDTOSAndReplyClass(t *testing.T) {
	var v4, v6 [UDGRHSize]byte
	v4[20], v4[21] = 0x45, 0xb8
	v6[0], v6[1] = 0x6b, 0x80 // version 6, traffic class 0xb8
	for _, c := range []struct {
		grh  []byte
		want uint8
		ok   bool
	}{{v4[:], 0xb8, true}, {v6[:], 0xb8, true}, {make([]byte, UDGRHSize), 0, false}, {v4[:20], 0, false}} {
		if tos, ok := UDTOS(c.grh); tos != c.want || ok != c.ok {
			t.Errorf("UDTOS(% x): %#x %v, want %#x %v", c.grh, tos, ok, c.want, c.ok)
		}
	}
	a, _ := cmPipePair(t, nil, cm.Params{})
	ce := v4
	copy(ce[32:36], pipeIPB.AsSlice())
	ce[21] = 0x6b // DSCP 26, CE
	d, err := a.a.UDReplyTo(ce[:], 9, RDMAUDPQKey)
	if err != nil || !d.SetTOS || d.TOS != 0x6a || d.IP != pipeIPB {
		t.Fatalf("reply to a CE-marked datagram: %+v, %v; want TOS 0x6a to %v", d, err, pipeIPB)
	}
}
