package ndk

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// exchangeMulticast: two UD QPs of y join group; one datagram from x to
// the group completes a receive on each, with x's QPN and the group in
// the GRH; after one leaves, only the other takes the next; after the
// other closes, a datagram for the group finds no member. checkWire, if
// set, is asked whether y's interface is a member of the group.
func exchangeMulticast(t *testing.T, x, y *udSide, group netip.Addr, checkWire func() bool) {
	t.Helper()
	second := newUDSide(t, y.side)
	dest, err := MulticastDestination(group, RDMAUDPQKey)
	if err != nil || dest.QPN != rocev2.MulticastQPN || dest.IP != group.Unmap() {
		t.Fatalf("MulticastDestination(%v) = %+v, %v", group, dest, err)
	}
	for _, u := range []*udSide{y, second} {
		if err := u.ud.JoinMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
	if checkWire != nil && !checkWire() {
		t.Fatalf("the interface did not join %v", group)
	}
	const n = 200
	copy(x.src, bytes.Repeat([]byte("mc"), n/2))
	send := func() {
		t.Helper()
		if err := x.ud.SendToWithImmediate("s", x.sge(t, x.smr, n), dest, x.ud.QPN(), 0); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, x.icq); r.Status != StatusSuccess {
			t.Fatalf("send completion %+v", r)
		}
	}
	for _, u := range []*udSide{y, second} {
		if err := u.ud.Receive("r", u.sge(t, u.dmr, UDGRHSize+n)); err != nil {
			t.Fatal(err)
		}
	}
	send()
	for _, u := range []*udSide{y, second} {
		r := waitResult(t, u.rcq)
		if r.Status != StatusSuccess || int(r.BytesTransferred) != UDGRHSize+n || r.TypeSpecificCompletionOutput != uint64(x.ud.QPN()) ||
			r.Flags != ResultWithImmediate || r.Immediate != x.ud.QPN() {
			t.Fatalf("QP %#x's receive %+v: want %d bytes from QPN %#x", u.ud.QPN(), r, UDGRHSize+n, x.ud.QPN())
		}
		if !bytes.Equal(u.dst[UDGRHSize:UDGRHSize+n], x.src[:n]) {
			t.Fatal("payload altered")
		}
		if got := UDSource(u.dst); got != x.a.backend().localAddress() {
			t.Fatalf("GRH source %v", got)
		}
	}
	if err := second.ud.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if err := second.ud.LeaveMulticast(group); StatusOf(err) != StatusInvalidParameter {
		t.Fatalf("leaving twice: %v, want STATUS_INVALID_PARAMETER", err)
	}
	for _, u := range []*udSide{y, second} {
		if err := u.ud.Receive("r", u.sge(t, u.dmr, UDGRHSize+n)); err != nil {
			t.Fatal(err)
		}
	}
	send()
	waitResult(t, y.rcq)
	time.Sleep(50 * time.Millisecond)
	var rs [1]Result
	if second.rcq.GetResults(rs[:]) != 0 {
		t.Fatalf("the QP that left took a datagram: %+v", rs[0])
	}
	if checkWire != nil && !checkWire() {
		t.Fatalf("the interface left %v with a member left", group)
	}
	if err := y.ud.Close(); err != nil {
		t.Fatal(err)
	}
	if checkWire != nil && checkWire() {
		t.Fatalf("the interface is still a member of %v after its last QP closed", group)
	}
}

// TestMulticastOverPipe: multicast between two in-process adapters on the
// in-memory pipe, its loopback to the sending adapter's members, and what
// JoinMulticast refuses.
func TestMulticastOverPipe(t *testing.T) {
	a, b := cmPipePair(t, nil, cm.Params{})
	x, y := newUDSide(t, a), newUDSide(t, b)
	exchangeMulticast(t, x, y, netip.MustParseAddr("239.1.2.3"), nil)
	checkLoopback(t, x.side, netip.MustParseAddr("239.1.2.5"))

	for _, c := range []struct {
		name string
		err  error
		want Status
	}{
		{"a unicast address", x.ud.JoinMulticast(netip.MustParseAddr("198.18.0.9")), StatusInvalidParameter},
		{"an RC QP", a.qp.JoinMulticast(netip.MustParseAddr("239.1.2.3")), StatusInvalidDeviceRequest},
		{"leave a group never joined", x.ud.LeaveMulticast(netip.MustParseAddr("239.1.2.4")), StatusInvalidParameter},
	} {
		if StatusOf(c.err) != c.want || !strings.Contains(c.err.Error(), "multicast") {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if _, err := MulticastDestination(netip.MustParseAddr("198.18.0.9"), 1); StatusOf(err) != StatusInvalidParameter {
		t.Errorf("MulticastDestination of a unicast address: %v", err)
	}
}

// TestMulticastOverVeth: the same over a veth pair, through XDP steering
// and AF_XDP, IPv4 and IPv6 groups; the receiving interface joins each
// group in the kernel (/proc's igmp and igmp6) while it has members.
func TestMulticastOverVeth(t *testing.T) {
	testenv.RequireRoot(t)
	for _, g := range []string{"239.1.2.3", "ff0e::1:2:3"} {
		t.Run(g, func(t *testing.T) {
			group := netip.MustParseAddr(g)
			p := harness.New(t, harness.Config{MTU: 1500})
			open := func(h *harness.Host) *side {
				if group.Is4() {
					return vethSide(t, h)
				}
				var a *Adapter
				if err := h.Do(func() error {
					var err error
					a, err = Open(h.Link, Options{Address: h.IPv6})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(a.Close)
				return newSide(t, a)
			}
			x, y := newUDSide(t, open(p.A)), newUDSide(t, open(p.B))
			member := func() bool { return kernelMember(t, p.B, group) }
			exchangeMulticast(t, x, y, group, member)
			checkLoopback(t, x.side, group)
		})
	}
}

// kernelMember reports whether h's interface is a member of group, as
// the kernel lists them in its namespace.
func kernelMember(t *testing.T, h *harness.Host, group netip.Addr) bool {
	t.Helper()
	var text string
	if err := h.Do(func() error {
		name := "/proc/thread-self/net/igmp6"
		if group.Is4() {
			name = "/proc/thread-self/net/igmp"
		}
		b, err := os.ReadFile(name)
		text = string(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var hex string
	if group.Is4() {
		a := group.As4()
		hex = fmt.Sprintf("%02X%02X%02X%02X", a[3], a[2], a[1], a[0]) // a __be32 printed as a host u32
	} else {
		a := group.As16()
		hex = fmt.Sprintf("%x", a[:])
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, hex) {
			return true
		}
	}
	return false
}

// checkLoopback: of two member QPs of one adapter, the first's datagram
// to the group reaches both (the sender too: multicast loopback), the
// second's, sent with BlockSelfMulticastLoopback, only the first.
func checkLoopback(t *testing.T, s *side, group netip.Addr) {
	t.Helper()
	u := newUDSide(t, s)
	blocking := newUDSide(t, s)
	_ = blocking.ud.Close()
	var err error
	if blocking.ud, err = s.pd.CreateUDQP(QPConfig{ReceiveCQ: blocking.rcq, InitiatorCQ: blocking.icq, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16,
		MaxReceiveRequestSGE: 2, MaxInitiatorRequestSGE: 2, BlockSelfMulticastLoopback: true}, RDMAUDPQKey); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blocking.ud.Close() })
	dest, _ := MulticastDestination(group, RDMAUDPQKey)
	const n = 64
	for _, m := range []*udSide{u, blocking} {
		if err := m.ud.JoinMulticast(group); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := m.ud.Receive("r", m.sge(t, m.dmr, UDGRHSize+n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, from := range []*udSide{u, blocking} {
		if err := from.ud.SendTo("s", from.sge(t, from.smr, n), dest, 0); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, from.icq); r.Status != StatusSuccess {
			t.Fatalf("send completion %+v", r)
		}
		if r := waitResult(t, u.rcq); r.Status != StatusSuccess || r.TypeSpecificCompletionOutput != uint64(from.ud.QPN()) {
			t.Fatalf("looped-back datagram from QPN %#x: %+v", from.ud.QPN(), r)
		}
	}
	if r := waitResult(t, blocking.rcq); r.TypeSpecificCompletionOutput != uint64(u.ud.QPN()) {
		t.Fatalf("the blocking QP took %+v, want the other member's datagram", r)
	}
	time.Sleep(50 * time.Millisecond)
	var rs [1]Result
	if blocking.rcq.GetResults(rs[:]) != 0 {
		t.Fatalf("a QP with BlockSelfMulticastLoopback took its own datagram: %+v", rs[0])
	}
	for _, m := range []*udSide{u, blocking} {
		if err := m.ud.LeaveMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
}
