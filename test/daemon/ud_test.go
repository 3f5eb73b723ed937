package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
	"github.com/vishvananda/netlink"
)

// udEnd is a UD QP with memory for datagrams: the client's (through the
// daemon) or B's (in process).
type udEnd struct {
	a        *ndk.Adapter
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	mem      []byte // [0, 8192) sends, [8192, 16384) receives
	mr       *ndk.MR
}

func newUDEnd(t *testing.T, a *ndk.Adapter, pd *ndk.PD, mem []byte) *udEnd {
	t.Helper()
	u := &udEnd{a: a, mem: mem[:16384]}
	var err error
	if u.rcq, err = a.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if u.icq, err = a.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.rcq.Close(); u.icq.Close() })
	if u.qp, err = pd.CreateUDQP(ndk.QPConfig{ReceiveCQ: u.rcq, InitiatorCQ: u.icq, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16,
		MaxReceiveRequestSGE: 2, MaxInitiatorRequestSGE: 2, InlineDataSize: 64}, ndk.RDMAUDPQKey); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.qp.Close() })
	if u.mr, err = pd.RegisterMR(u.mem, ndk.MRFlagAllowLocalWrite); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u *udEnd) send(t *testing.T, n int) []ndk.SGE {
	t.Helper()
	s, err := u.mr.SGE(0, n)
	if err != nil {
		t.Fatal(err)
	}
	return []ndk.SGE{s}
}

func (u *udEnd) recv(t *testing.T, n int) []ndk.SGE {
	t.Helper()
	s, err := u.mr.SGE(8192, n)
	if err != nil {
		t.Fatal(err)
	}
	return []ndk.SGE{s}
}

func (u *udEnd) got() []byte { return u.mem[8192:] }

func udPair(t *testing.T) (*bed, *client, *udEnd, *udEnd) {
	return udPairOn(t, harness.Config{Queues: 1})
}

func udPairOn(t *testing.T, cfg harness.Config) (*bed, *client, *udEnd, *udEnd) {
	t.Helper()
	bd := newBedWith(t, cfg)
	c := dial(t, bd.sock)
	x := newUDEnd(t, c.a, c.pd, c.mem)
	y := newUDEnd(t, bd.b.Adapter, bd.b.PD, make([]byte, 16384))
	return bd, c, x, y
}

// TestUDThroughDaemon: the UD extension through the daemon does what it
// does in process (ndk's exchangeUD): x, the daemon's client, and y, an
// in-process adapter, serve UD services and resolve each other's over
// SIDR, y answers x's datagram with immediate where its GRH and
// completion say it came from, and datagrams go both ways with the
// sender's QPN and address in the receive, inline ones included.
func TestUDThroughDaemon(t *testing.T) {
	for _, c := range []struct{ mtu, n int }{{1500, 1000}, {9000, 4096}} {
		t.Run(fmt.Sprint(c.mtu), func(t *testing.T) { testUDThroughDaemon(t, c.mtu, c.n) })
	}
}

// At MTU 9000 a datagram is a whole 4096-byte path MTU, a frame over one
// UMEM chunk (multi-buffer AF_XDP), as ndk's TestUDOverVeth sends.
func testUDThroughDaemon(t *testing.T, mtu, n int) {
	bd, _, x, y := udPairOn(t, harness.Config{Queues: 1, MTU: mtu})
	ipX, ipY := bd.pair.A.IPv4, bd.pair.B.IPv4
	if x.qp.UDMaxMessage() != y.qp.UDMaxMessage() || x.qp.UDMaxMessage() == 0 || x.qp.UDQKey() != ndk.RDMAUDPQKey {
		t.Fatalf("client's UD QP: max message %d (in process %d), Q_Key %#x", x.qp.UDMaxMessage(), y.qp.UDMaxMessage(), x.qp.UDQKey())
	}
	sx, err := x.a.ServeUD(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), x.qp)
	if err != nil {
		t.Fatal(err)
	}
	defer sx.Close()
	if sx.Addr() != netip.AddrPortFrom(netip.IPv4Unspecified(), 7174) {
		t.Fatalf("service address %v", sx.Addr())
	}
	sy, err := y.a.ServeUD(netip.AddrPortFrom(ipY, 7174), y.qp)
	if err != nil {
		t.Fatal(err)
	}
	defer sy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	toY, err := x.a.ResolveUD(ctx, netip.AddrPortFrom(ipY, 7174))
	if err != nil || toY.QPN != y.qp.QPN() || toY.QKey != ndk.RDMAUDPQKey || toY.IP != ipY || toY.MAC == ([6]byte{}) {
		t.Fatalf("client resolving y: %+v, %v", toY, err)
	}
	toX, err := y.a.ResolveUD(ctx, netip.AddrPortFrom(ipX, 7174))
	if err != nil || toX.QPN != x.qp.QPN() || toX.QKey != ndk.RDMAUDPQKey || toX.IP != ipX {
		t.Fatalf("y resolving the client's service: %+v, %v", toX, err)
	}

	// y answers x where x's datagram came from, with its DSCP and ECN;
	// x names its QPN in the immediate, as udaddy does, and its
	// datagram's TOS in the destination (which crosses the daemon's send
	// record).
	if err := y.qp.Receive("r", y.recv(t, ndk.UDGRHSize+8)); err != nil {
		t.Fatal(err)
	}
	asked := toY
	asked.TOS, asked.SetTOS = 0x6a, true
	if err := x.qp.SendToWithImmediate("s", x.send(t, 8), asked, x.qp.QPN(), 0); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, x.icq, "send with immediate"); r.Status != ndk.StatusSuccess || r.Type != ndk.OpSend || r.RequestContext != "s" {
		t.Fatalf("client's send completion %+v", r)
	}
	r := wait(t, y.rcq, "receive with immediate")
	if r.Flags != ndk.ResultWithImmediate || r.Immediate != x.qp.QPN() || r.TypeSpecificCompletionOutput != uint64(x.qp.QPN()) {
		t.Fatalf("y's receive of the client's datagram with immediate: %+v", r)
	}
	back, err := y.a.UDReplyTo(y.got()[:ndk.UDGRHSize], uint32(r.TypeSpecificCompletionOutput), y.qp.UDQKey())
	wantX := toX
	wantX.TOS, wantX.SetTOS = 0x6a, true
	if err != nil || back != wantX {
		t.Fatalf("y's reply destination %+v, %v; want %+v", back, err, wantX)
	}
	// The reverse: y answers x there; the client's completion carries
	// the immediate, and the client's UDReplyTo (the daemon's next hop)
	// finds y again, with the answer's TOS.
	if err := x.qp.Receive("rx", x.recv(t, ndk.UDGRHSize+8)); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.SendToWithImmediate("s", y.send(t, 8), back, 0xfeed, 0); err != nil {
		t.Fatal(err)
	}
	wait(t, y.icq, "y's send")
	r = wait(t, x.rcq, "client's receive with immediate")
	if r.Status != ndk.StatusSuccess || r.Flags != ndk.ResultWithImmediate || r.Immediate != 0xfeed || r.RequestContext != "rx" ||
		r.TypeSpecificCompletionOutput != uint64(y.qp.QPN()) || r.BytesTransferred != ndk.UDGRHSize+8 {
		t.Fatalf("client's receive of y's datagram with immediate: %+v", r)
	}
	if back, err := x.a.UDReplyTo(x.got()[:ndk.UDGRHSize], uint32(r.TypeSpecificCompletionOutput), x.qp.UDQKey()); err != nil || back != asked {
		t.Fatalf("client's reply destination %+v, %v; want %+v", back, err, asked)
	}

	copy(x.mem, bytes.Repeat([]byte("ping"), n/4))
	copy(y.mem, bytes.Repeat([]byte("pong"), n/4))
	for _, d := range []struct {
		name     string
		from, to *udEnd
		dest     ndk.UDDestination
		ip       netip.Addr
		n        int
		flags    ndk.OpFlag
	}{
		{"client to y", x, y, toY, ipX, n, 0},
		{"y to client", y, x, toX, ipY, n, 0},
		{"client to y, inline", x, y, toY, ipX, 60, ndk.OpFlagInline},
	} {
		if err := d.to.qp.Receive("r", d.to.recv(t, ndk.UDGRHSize+d.n)); err != nil {
			t.Fatal(err)
		}
		if err := d.from.qp.SendTo("s", d.from.send(t, d.n), d.dest, d.flags); err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		if r := wait(t, d.from.icq, d.name); r.Status != ndk.StatusSuccess || r.Type != ndk.OpSend {
			t.Fatalf("%s: send completion %+v", d.name, r)
		}
		r := wait(t, d.to.rcq, d.name)
		if r.Status != ndk.StatusSuccess || int(r.BytesTransferred) != ndk.UDGRHSize+d.n || r.TypeSpecificCompletionOutput != uint64(d.from.qp.QPN()) {
			t.Fatalf("%s: receive completion %+v: want %d bytes from QPN %#x", d.name, r, ndk.UDGRHSize+d.n, d.from.qp.QPN())
		}
		bd.b.Adapter.Stats() // order the reads below with y's engine
		if got := ndk.UDSource(d.to.got()); got != d.ip {
			t.Fatalf("%s: GRH source %v, want %v", d.name, got, d.ip)
		}
		if tos, _ := ndk.UDTOS(d.to.got()); tos != 0 {
			t.Fatalf("%s: TOS %#x, want the QP's own, 0", d.name, tos)
		}
		if !bytes.Equal(d.to.got()[ndk.UDGRHSize:ndk.UDGRHSize+d.n], d.from.mem[:d.n]) {
			t.Fatalf("%s: payload altered", d.name)
		}
	}
	if sx.Answered() != 1 || sy.Answered() != 1 {
		t.Fatalf("services answered %d and %d, want 1 each", sx.Answered(), sy.Answered())
	}
	// A closed service refuses, through the daemon as in process.
	sx.Close()
	if _, err := y.a.ResolveUD(ctx, netip.AddrPortFrom(ipX, 7174)); !errors.Is(err, ndk.ErrConnectionRefused) {
		t.Fatalf("resolving the client's closed service: %v", err)
	}
}

// TestUDRefusalsThroughDaemon: what the UD extension refuses in process
// it refuses through the daemon, with the same status: a datagram over
// the path MTU, SendTo on an RC QP or without a QPN, a WRITE or a SEND
// without destination on a UD QP, Connect with a UD QP, ServeUD with an
// RC QP or on a port served already, a resolution nobody answers (ended
// by its deadline, or by its cancel alone), a controlled Q_Key. A
// datagram with a foreign Q_Key is dropped and counted by the receiver. A client's service ends with its session.
func TestUDRefusalsThroughDaemon(t *testing.T) {
	bd, c, x, y := udPair(t)
	ipY := bd.pair.B.IPv4
	status := func(err error) ndk.Status {
		var e *ndk.Error
		if errors.As(err, &e) {
			return e.Status
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sy, err := y.a.ServeUD(netip.AddrPortFrom(ipY, 7175), y.qp)
	if err != nil {
		t.Fatal(err)
	}
	defer sy.Close()
	dest, err := x.a.ResolveUD(ctx, netip.AddrPortFrom(ipY, 7175))
	if err != nil {
		t.Fatal(err)
	}
	max := int(x.qp.UDMaxMessage())
	if err := x.qp.SendTo(nil, x.send(t, max+1), dest, 0); status(err) != ndk.StatusInvalidParameter || !strings.Contains(err.Error(), "over the path MTU") {
		t.Fatalf("datagram over the MTU: %v", err)
	}
	if err := c.qp.SendTo(nil, x.send(t, 8), dest, 0); status(err) != ndk.StatusInvalidDeviceRequest {
		t.Fatalf("SendTo on an RC QP: %v", err)
	}
	if err := x.qp.SendTo(nil, x.send(t, 8), ndk.UDDestination{IP: ipY}, 0); status(err) != ndk.StatusInvalidParameter {
		t.Fatalf("SendTo without a QPN: %v", err)
	}
	if err := x.qp.Send(nil, x.send(t, 8), 0); status(err) != ndk.StatusInvalidParameter {
		t.Fatalf("Send without a destination on a UD QP: %v", err)
	}
	if err := x.qp.Write(nil, x.send(t, 8), 0x1000, 1, 0); status(err) != ndk.StatusNotSupported {
		t.Fatalf("Write on a UD QP: %v", err)
	}
	conn, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Connect(ctx, x.qp, netip.AddrPort{}, netip.AddrPortFrom(ipY, 1), 1, 1, nil); status(err) != ndk.StatusInvalidDeviceRequest {
		t.Fatalf("Connect with a UD QP: %v", err)
	}
	if _, err := x.a.ServeUD(netip.AddrPortFrom(bd.pair.A.IPv4, 1), c.qp); status(err) != ndk.StatusInvalidDeviceRequest {
		t.Fatalf("ServeUD with an RC QP: %v", err)
	}
	s, err := x.a.ServeUD(netip.AddrPortFrom(bd.pair.A.IPv4, 7176), x.qp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.a.ServeUD(netip.AddrPortFrom(bd.pair.A.IPv4, 7176), x.qp); status(err) != ndk.StatusAddressAlreadyExists {
		t.Fatalf("serving a port served already: %v", err)
	}
	if _, err := x.a.ResolveUD(ctx, netip.AddrPortFrom(ipY, 4242)); status(err) != ndk.StatusConnectionRefused {
		t.Fatalf("resolving a port nobody serves: %v", err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if _, err := x.a.ResolveUD(short, netip.AddrPortFrom(netip.MustParseAddr("198.18.0.99"), 4242)); err == nil {
		t.Fatal("resolving an address nobody has succeeded")
	}
	// Without a deadline only the client's cancel (proto.Cancel) ends the
	// daemon's resolution, as ctx ends it in process. The daemon's
	// namespace knows a MAC for silent (nobody has it), so the SIDR_REQs
	// go out and nothing answers them.
	silent := netip.MustParseAddr("198.18.0.98")
	nl, err := bd.pair.A.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	err = nl.NeighSet(&netlink.Neigh{LinkIndex: bd.pair.A.Ifindex, State: netlink.NUD_PERMANENT, IP: silent.AsSlice(),
		HardwareAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x98}})
	nl.Close()
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancelNow := context.WithCancel(context.Background())
	stop := time.AfterFunc(300*time.Millisecond, cancelNow)
	defer stop.Stop()
	began := time.Now()
	if _, err := x.a.ResolveUD(cctx, netip.AddrPortFrom(silent, 4242)); !errors.Is(err, context.Canceled) || status(err) != ndk.StatusCancelled {
		t.Fatalf("resolving, cancelled: %v", err)
	}
	if took := time.Since(began); took > 3*time.Second { // under the first SIDR_REQ's resend
		t.Fatalf("a cancelled resolution returned after %v", took)
	}
	if _, err := c.pd.CreateUDQP(ndk.QPConfig{ReceiveCQ: x.rcq, InitiatorCQ: x.icq, ReceiveQueueDepth: 1, InitiatorQueueDepth: 1}, 0x80000001); status(err) != ndk.StatusInvalidParameter {
		t.Fatalf("controlled Q_Key: %v", err)
	}

	// A foreign Q_Key: y drops the datagram and counts it; the receive
	// stays posted for the next.
	if err := y.qp.Receive("r", y.recv(t, ndk.UDGRHSize+8)); err != nil {
		t.Fatal(err)
	}
	bad := dest
	bad.QKey = 0x11111111
	if err := x.qp.SendTo(nil, x.send(t, 8), bad, 0); err != nil {
		t.Fatal(err)
	}
	wait(t, x.icq, "send with a foreign Q_Key")
	deadline := time.Now().Add(5 * time.Second)
	for badQKeys(y.a) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("bad_qkey %d, want 1", badQKeys(y.a))
		}
		time.Sleep(time.Millisecond)
	}
	if err := x.qp.SendTo(nil, x.send(t, 8), dest, 0); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, y.rcq, "receive after the dropped datagram"); r.Status != ndk.StatusSuccess || r.BytesTransferred != ndk.UDGRHSize+8 {
		t.Fatalf("receive after the dropped datagram: %+v", r)
	}

	// The session's end closes its service: y's resolution is refused.
	if _, err := y.a.ResolveUD(ctx, netip.AddrPortFrom(bd.pair.A.IPv4, 7176)); err != nil {
		t.Fatalf("resolving the client's service: %v", err)
	}
	_ = s
	c.a.Close()
	deadline = time.Now().Add(5 * time.Second)
	for {
		_, err := y.a.ResolveUD(ctx, netip.AddrPortFrom(bd.pair.A.IPv4, 7176))
		if errors.Is(err, ndk.ErrConnectionRefused) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closed client's service still answers: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func badQKeys(a *ndk.Adapter) uint64 {
	var n uint64
	for _, s := range a.Stats() {
		n += s.BadQKey
	}
	return n
}

// TestUDPostAndPollAllocateNothing: a daemon-backed UD QP's SendTo and
// Receive, and the relay that carries them, allocate nothing
// (AllocsPerRun counts the whole process, y's in-process QP included).
func TestUDPostAndPollAllocateNothing(t *testing.T) {
	bd, _, x, y := udPair(t)
	s, err := y.a.ServeUD(netip.AddrPortFrom(bd.pair.B.IPv4, 7177), y.qp)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	toY, err := x.a.ResolveUD(ctx, netip.AddrPortFrom(bd.pair.B.IPv4, 7177))
	if err != nil {
		t.Fatal(err)
	}
	toX := ndk.UDDestination{IP: bd.pair.A.IPv4, MAC: rocev2.MAC(bd.pair.A.MAC), QPN: x.qp.QPN(), QKey: ndk.RDMAUDPQKey}
	xs, xr, ys, yr := x.send(t, 64), x.recv(t, ndk.UDGRHSize+64), y.send(t, 64), y.recv(t, ndk.UDGRHSize+64)
	var res [1]ndk.Result
	rctx := any(&res)
	poll := func(cq *ndk.CQ) {
		deadline := time.Now().Add(5 * time.Second)
		for cq.GetResults(res[:]) == 0 {
			if time.Now().After(deadline) {
				panic("no completion")
			}
			runtime.Gosched() // AllocsPerRun runs on one P
		}
		if res[0].Status != ndk.StatusSuccess {
			panic(res[0].Status)
		}
	}
	step := func() {
		if err := y.qp.Receive(nil, yr); err != nil {
			panic(err)
		}
		if err := x.qp.Receive(rctx, xr); err != nil {
			panic(err)
		}
		if err := x.qp.SendTo(rctx, xs, toY, 0); err != nil {
			panic(err)
		}
		poll(x.icq)
		poll(y.rcq)
		if err := y.qp.SendTo(nil, ys, toX, 0); err != nil {
			panic(err)
		}
		poll(x.rcq)
		poll(y.icq)
	}
	step()
	if n := testing.AllocsPerRun(200, step); n != 0 {
		t.Fatalf("a UD ping-pong through the daemon allocates %.1f times", n)
	}
}
