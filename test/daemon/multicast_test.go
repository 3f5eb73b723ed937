package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestMulticastThroughDaemon: a daemon client's UD QP joins a group as an
// in-process one does (ndk's exchangeMulticast): the daemon's interface
// joins it in the kernel, the client's QP takes a datagram B sends to the
// group, B's member QP takes the client's; another client's member QP and
// the sender itself take it too (multicast loopback on the daemon's
// adapter), but not a sender with BlockSelfMulticastLoopback; the
// interface's membership ends with the last client's. The daemon refuses
// what ndk refuses.
func TestMulticastThroughDaemon(t *testing.T) {
	bd, _, x, y := udPair(t)
	group := netip.MustParseAddr("239.7.7.7")
	dest, err := ndk.MulticastDestination(group, ndk.RDMAUDPQKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []*udEnd{x, y} {
		if err := u.qp.JoinMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
	if !igmpMember(t, bd.pair.A, group) {
		t.Fatalf("the daemon's interface did not join %v", group)
	}
	if got := infoGroups(t, bd); len(got) != 1 || got[0].Group != group.String() || got[0].Members != 1 {
		t.Fatalf("ndkxdp info's groups %+v, want %v with 1 member", got, group)
	}
	const n = 300
	for _, d := range []struct{ from, to *udEnd }{{y, x}, {x, y}} {
		copy(d.from.mem, bytes.Repeat([]byte{byte(d.from.qp.QPN())}, n))
		if err := d.to.qp.Receive("r", d.to.recv(t, ndk.UDGRHSize+n)); err != nil {
			t.Fatal(err)
		}
		if err := d.from.qp.SendTo("s", d.from.send(t, n), dest, 0); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, d.from.icq, "send to the group"); r.Status != ndk.StatusSuccess {
			t.Fatalf("send completion %+v", r)
		}
		r := wait(t, d.to.rcq, "receive from the group")
		if r.Status != ndk.StatusSuccess || int(r.BytesTransferred) != ndk.UDGRHSize+n || r.TypeSpecificCompletionOutput != uint64(d.from.qp.QPN()) {
			t.Fatalf("receive %+v: want %d bytes from QPN %#x", r, ndk.UDGRHSize+n, d.from.qp.QPN())
		}
		if !bytes.Equal(d.to.got()[ndk.UDGRHSize:ndk.UDGRHSize+n], d.from.mem[:n]) {
			t.Fatal("payload altered")
		}
	}
	// Another client of the daemon joins: x's datagram reaches it and x
	// itself through the daemon adapter's multicast loopback (and y from
	// the wire); a QP with BlockSelfMulticastLoopback does not get its
	// own.
	c2 := dial(t, bd.sock)
	z := newUDEnd(t, c2.a, c2.pd, c2.mem)
	if err := z.qp.JoinMulticast(group); err != nil {
		t.Fatal(err)
	}
	for _, u := range []*udEnd{x, y, z} {
		if err := u.qp.Receive("r", u.recv(t, ndk.UDGRHSize+n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.qp.SendTo("s", x.send(t, n), dest, 0); err != nil {
		t.Fatal(err)
	}
	wait(t, x.icq, "send to the group")
	for _, u := range []*udEnd{x, y, z} {
		if r := wait(t, u.rcq, "receive of the client's datagram"); r.Status != ndk.StatusSuccess || r.TypeSpecificCompletionOutput != uint64(x.qp.QPN()) {
			t.Fatalf("QP %#x's receive %+v: want the datagram of QPN %#x", u.qp.QPN(), r, x.qp.QPN())
		}
	}
	blocking, err := c2.pd.CreateUDQP(ndk.QPConfig{ReceiveCQ: z.rcq, InitiatorCQ: z.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1, BlockSelfMulticastLoopback: true}, ndk.RDMAUDPQKey)
	if err != nil {
		t.Fatal(err)
	}
	defer blocking.Close()
	if err := blocking.JoinMulticast(group); err != nil {
		t.Fatal(err)
	}
	if err := blocking.Receive("own", z.recv(t, ndk.UDGRHSize+n)); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.Receive("r", x.recv(t, ndk.UDGRHSize+n)); err != nil {
		t.Fatal(err)
	}
	if err := blocking.SendTo("s", z.send(t, n), dest, 0); err != nil {
		t.Fatal(err)
	}
	wait(t, z.icq, "the blocking QP's send")
	if r := wait(t, x.rcq, "x's receive of the blocking QP's datagram"); r.TypeSpecificCompletionOutput != uint64(blocking.QPN()) {
		t.Fatalf("x's receive %+v", r)
	}
	time.Sleep(50 * time.Millisecond)
	var rs [1]ndk.Result
	if z.rcq.GetResults(rs[:]) != 0 {
		t.Fatalf("the blocking QP took its own datagram: %+v", rs[0])
	}

	for _, c := range []struct {
		name string
		err  error
		want ndk.Status
	}{
		{"a unicast group", x.qp.JoinMulticast(netip.MustParseAddr("198.18.0.9")), ndk.StatusInvalidParameter},
		{"leave a group never joined", x.qp.LeaveMulticast(netip.MustParseAddr("239.7.7.8")), ndk.StatusInvalidParameter},
	} {
		if ndk.StatusOf(c.err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if err := z.qp.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if err := blocking.Close(); err != nil { // closing leaves
		t.Fatal(err)
	}
	if !igmpMember(t, bd.pair.A, group) {
		t.Fatalf("the daemon's interface left %v with x still a member", group)
	}
	if err := x.qp.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if igmpMember(t, bd.pair.A, group) {
		t.Fatalf("the daemon's interface is still a member of %v after its clients left", group)
	}
	if got := infoGroups(t, bd); len(got) != 0 {
		t.Fatalf("ndkxdp info's groups %+v after every member left", got)
	}
}

// igmpMember reports whether h's namespace lists IPv4 group as joined.
func igmpMember(t *testing.T, h *harness.Host, group netip.Addr) bool {
	t.Helper()
	var text string
	if err := h.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/igmp")
		text = string(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a := group.As4()
	return strings.Contains(text, fmt.Sprintf("%02X%02X%02X%02X", a[3], a[2], a[1], a[0]))
}

// infoGroups is what the daemon's info says of its multicast groups
// (ndkxdp info), checking its max_mcast_grp too.
func infoGroups(t *testing.T, bd *bed) []daemon.MulticastGroup {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var x daemon.Info
	if err := daemon.Query(ctx, bd.sock, daemon.OpAdminInfo, &x); err != nil {
		t.Fatal(err)
	}
	if x.MaxMcastGroups <= 0 {
		t.Fatalf("info's max_mcast_grp %d", x.MaxMcastGroups)
	}
	return x.MulticastGroups
}
