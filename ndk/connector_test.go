package ndk

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/inproc"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// cmPipeAdapter is pipeAdapter with connection management: the CM runs
// over the pipe like over AF_XDP, and paths come from a table instead of
// the kernel's routes and neighbours.
func cmPipeAdapter(t testing.TB, end port.Port, ip string, mac byte, peers map[netip.Addr]rocev2.MAC, params cm.Params) *Adapter {
	t.Helper()
	return cmPipeAdapterWith(t, end, ip, mac, peers, params, Options{})
}

// cmPipeAdapterWith is cmPipeAdapter with opts.
func cmPipeAdapterWith(t testing.TB, end port.Port, ip string, mac byte, peers map[netip.Addr]rocev2.MAC, params cm.Params, opts Options) *Adapter {
	t.Helper()
	a, err := newAdapter(defaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	link := inproc.Link{Addr: netip.MustParseAddr(ip), MAC: rocev2.MAC{2, 0, 0, 0, 0, mac}, MTU: 1500, PathMTU: rocev2.MTU1024}
	cfg := providerConfig(opts, a.regions)
	cfg.CM = params
	cfg.Resolve = func(src, dst netip.Addr) (cm.PathInfo, error) {
		m, ok := peers[dst]
		if !ok {
			return cm.PathInfo{}, &Error{Status: StatusNetworkUnreachable, Op: "resolve", Detail: dst.String()}
		}
		return cm.PathInfo{LocalIP: link.Addr, RemoteIP: dst, LocalMAC: link.MAC, RemoteMAC: m, MTU: 1500}, nil
	}
	p, err := inproc.OverPort(end, link, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.attach(p)
	t.Cleanup(a.Close)
	return a
}

var (
	pipeIPA = netip.MustParseAddr("198.18.0.1")
	pipeIPB = netip.MustParseAddr("198.18.0.2")
)

// cmPipePair joins two CM adapters by a pipe with the given fault filter.
func cmPipePair(t testing.TB, filter func(porttest.Direction, []byte) porttest.Verdict, params cm.Params) (*side, *side) {
	t.Helper()
	p, err := porttest.NewPipe(porttest.PipeConfig{Depth: 1024, Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	peers := map[netip.Addr]rocev2.MAC{pipeIPA: {2, 0, 0, 0, 0, 1}, pipeIPB: {2, 0, 0, 0, 0, 2}}
	x := newSide(t, cmPipeAdapter(t, p.A(), pipeIPA.String(), 1, peers, params))
	y := newSide(t, cmPipeAdapter(t, p.B(), pipeIPB.String(), 2, peers, params))
	return x, y
}

// accepted is what a listener's callback saw.
type accepted struct {
	c          *Connector
	in, out    int
	data       []byte
	err        error
	disconnect chan struct{}
}

// listen starts a listener on y that accepts every request with qp (once)
// and reports through the returned channel.
func listen(t testing.TB, y *side, addr netip.AddrPort, reply []byte) (*Listener, chan accepted) {
	t.Helper()
	ch := make(chan accepted, 16)
	l, err := y.a.CreateListener(func(c *Connector) {
		r := accepted{c: c, disconnect: make(chan struct{})}
		var n int
		r.in, r.out, n, r.err = c.GetConnectionData(nil)
		if r.err == nil {
			r.data = make([]byte, n)
			_, _, _, r.err = c.GetConnectionData(r.data)
		}
		if r.err == nil {
			var once sync.Once
			r.err = c.Accept(context.Background(), y.qp, 4, 4, reply, func() { once.Do(func() { close(r.disconnect) }) })
		}
		ch <- r
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l, ch
}

// postSendRecv posts a receive of len(payload) bytes on y and a SEND of
// payload (request context sctx) on x, and returns the receive buffer.
func postSendRecv(t testing.TB, x, y *side, payload []byte, sctx any) []byte {
	t.Helper()
	src := append([]byte(nil), payload...)
	dst := make([]byte, len(payload))
	smr, err := x.pd.RegisterMR(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	dmr, err := y.pd.RegisterMR(dst, MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := smr.SGE(0, len(src))
	ds, _ := dmr.SGE(0, len(dst))
	if err := y.qp.Receive("r", []SGE{ds}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.Send(sctx, []SGE{ss}, 0); err != nil {
		t.Fatal(err)
	}
	return dst
}

func sendOne(t testing.TB, x, y *side, payload []byte) {
	t.Helper()
	dst := postSendRecv(t, x, y, payload, "s")
	if r := waitResult(t, y.rcq); r.Status != StatusSuccess || r.BytesTransferred != uint32(len(payload)) {
		t.Fatalf("receive %+v", r)
	}
	if r := waitResult(t, x.icq); r.Status != StatusSuccess {
		t.Fatalf("send %+v", r)
	}
	if !bytes.Equal(dst, payload) {
		t.Fatal("payload altered")
	}
}

func TestConnectAcceptSendDisconnectOverPipe(t *testing.T) {
	x, y := cmPipePair(t, nil, cm.Params{})
	_, ch := listen(t, y, netip.AddrPortFrom(pipeIPB, 7471), []byte("welcome"))
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Connect(ctx, x.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 7471), 2, 8, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	in, out, n, err := c.GetConnectionData(nil)
	if err != nil || n != MaxCalleeData {
		t.Fatalf("size query: %d, %v; want %d, nil", n, err, MaxCalleeData)
	}
	// Effective limits: our inbound 2 against the peer's outbound 4, our
	// outbound 8 against its inbound 4.
	if in != 2 || out != 4 {
		t.Fatalf("read limits %d/%d, want 2/4", in, out)
	}
	if _, _, got, err := c.GetConnectionData(make([]byte, 10)); !errors.Is(err, ErrBufferTooSmall) || got != MaxCalleeData {
		t.Fatalf("short buffer: size %d, %v", got, err)
	}
	data := make([]byte, n)
	if _, _, _, err := c.GetConnectionData(data); err != nil || !bytes.HasPrefix(data, []byte("welcome\x00")) {
		t.Fatalf("REP private data %q, %v", data[:16], err)
	}
	var discs atomic.Int32
	if err := c.CompleteConnect(func() { discs.Add(1) }); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.in != 8 || r.out != 2 || !bytes.HasPrefix(r.data, []byte("hello\x00")) || len(r.data) != MaxCallerData {
		t.Fatalf("passive side saw limits %d/%d, data %q (%d bytes)", r.in, r.out, r.data[:8], len(r.data))
	}
	if got, want := r.c.PeerAddress().Addr(), pipeIPA; got != want || c.PeerAddress() != netip.AddrPortFrom(pipeIPB, 7471) {
		t.Fatalf("addresses: passive peer %v, active peer %v", got, c.PeerAddress())
	}
	if c.LocalAddress() != r.c.PeerAddress() {
		t.Fatalf("active local %v != passive's peer %v", c.LocalAddress(), r.c.PeerAddress())
	}
	sendOne(t, x, y, []byte("over the CM-made connection"))
	sendOne(t, y, x, []byte("and back"))

	if err := c.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.disconnect:
	case <-time.After(5 * time.Second):
		t.Fatal("passive side got no disconnect event")
	}
	if discs.Load() != 0 {
		t.Fatal("the side that disconnected got a disconnect event")
	}
	// The peer's disconnect leaves the passive QP alone (NDKPI: no flush
	// because of a disconnect event); its own Disconnect ends it.
	if x.qp.Connected() || !y.qp.Connected() {
		t.Fatalf("after the active side's disconnect: active QP connected %v, passive %v; want false, true", x.qp.Connected(), y.qp.Connected())
	}
	if err := r.c.Disconnect(ctx); err != nil {
		t.Fatalf("passive disconnect after the peer's: %v", err)
	}
	if y.qp.Connected() {
		t.Fatal("passive QP still connected after its own disconnect")
	}
	c.Close()
	r.c.Close()
	for _, ch := range []<-chan struct{}{c.Closed(), r.c.Closed()} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("connector close did not complete")
		}
	}
	s := x.a.CMStats()
	for _, id := range []rocev2.AttributeID{rocev2.AttrREQ, rocev2.AttrRTU, rocev2.AttrDREQ} {
		if s.Sent[id] != 1 {
			t.Errorf("active side sent %d of attribute %#x, want 1", s.Sent[id], id)
		}
	}
}

// TestPeerDisconnectLeavesRequestsOutstanding: "The provider should not
// flush outstanding work requests when it indicates a disconnect event
// because of an incoming disconnect request from the peer"
// (NDK_FN_DISCONNECT_EVENT_CALLBACK). A SEND the peer received but whose
// ACKs are all lost is outstanding when the peer's DREQ arrives: the
// event fires, the QP stays connected and the SEND stays pending, and
// only the consumer's own Disconnect cancels it.
func TestPeerDisconnectLeavesRequestsOutstanding(t *testing.T) {
	var dropAcks atomic.Bool
	var dropped atomic.Int32
	x, y := cmPipePair(t, func(d porttest.Direction, f []byte) porttest.Verdict {
		var p rocev2.Packet
		if d == porttest.BtoA && dropAcks.Load() && rocev2.Parse(f, &p) == nil && p.BTH.Opcode == rocev2.RCAck {
			dropped.Add(1)
			return porttest.Drop
		}
		return porttest.Pass
	}, cm.Params{})
	_, ch := listen(t, y, netip.AddrPortFrom(pipeIPB, 7472), nil)
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Connect(ctx, x.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 7472), 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	event := make(chan struct{})
	if err := c.CompleteConnect(func() { close(event) }); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()

	dropAcks.Store(true)
	src := []byte("the closing message")
	dst := postSendRecv(t, x, y, src, "last")
	if res := waitResult(t, y.rcq); res.Status != StatusSuccess || !bytes.Equal(dst[:res.BytesTransferred], src) {
		t.Fatalf("peer's receive %+v, %q", res, dst)
	}
	for deadline := time.Now().Add(5 * time.Second); dropped.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the peer sent no ACK to drop")
		}
	}
	if err := r.c.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-event:
	case <-time.After(5 * time.Second):
		t.Fatal("no disconnect event")
	}
	// The SEND's retry budget (7 x the ACK timeout) is far from spent.
	var res [1]ResultEx
	if n := x.icq.GetResultsEx(res[:]); n != 0 || !x.qp.Connected() {
		t.Fatalf("after the peer's disconnect: %d completions %+v, QP connected %v; want the SEND pending on a connected QP", n, res[0], x.qp.Connected())
	}
	if err := c.Disconnect(ctx); err != nil {
		t.Fatalf("disconnect after the peer's: %v", err)
	}
	if got := waitResult(t, x.icq); got.Status != StatusCancelled || got.RequestContext != "last" {
		t.Fatalf("after our disconnect the SEND completed %+v, want STATUS_CANCELLED", got)
	}
}

// madAttr returns the CM attribute of a GSI frame, or 0 for other frames.
func madAttr(frame []byte) rocev2.AttributeID {
	var p rocev2.Packet
	_, _, mad, err := cm.ParseGSI(frame, &p)
	if err != nil {
		return 0
	}
	return rocev2.AttributeID(binary.BigEndian.Uint16(mad[16:]))
}

func TestConnectSurvivesLostAndDuplicatedMADs(t *testing.T) {
	// Drop the first REQ, REP and RTU once, and duplicate every MAD after
	// that: the connection still forms, exactly once on the passive side.
	var mu sync.Mutex
	dropped := map[rocev2.AttributeID]bool{}
	filter := func(_ porttest.Direction, f []byte) porttest.Verdict {
		id := madAttr(f)
		if id == 0 {
			return porttest.Pass
		}
		mu.Lock()
		defer mu.Unlock()
		if (id == rocev2.AttrREQ || id == rocev2.AttrREP || id == rocev2.AttrRTU) && !dropped[id] {
			dropped[id] = true
			return porttest.Drop
		}
		return porttest.Duplicate
	}
	// Shorter CM timeouts: the REQ's retransmission after 2^(20-8)+... ms
	// would make the test take seconds per lost MAD.
	params := cm.DefaultParams()
	params.CMResponseTimeout = 12
	x, y := cmPipePair(t, filter, params)
	_, ch := listen(t, y, netip.AddrPortFrom(pipeIPB, 7472), nil)
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Connect(ctx, x.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 7472), 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	sendOne(t, x, y, []byte("after losses"))
	select {
	case extra := <-ch:
		t.Fatalf("a second connect event: %+v", extra)
	case <-time.After(200 * time.Millisecond):
	}
	if s := x.a.CMStats(); s.Retransmits == 0 {
		t.Errorf("no retransmission counted on the active side: %+v", s)
	}
	if s := y.a.CMStats(); s.Duplicates == 0 {
		t.Errorf("no duplicate counted on the passive side: %+v", s)
	}
}

func TestConnectTimesOutWhenEveryMADIsLost(t *testing.T) {
	params := cm.DefaultParams()
	params.CMResponseTimeout = 8
	params.MaxCMRetries = 3
	x, y := cmPipePair(t, func(_ porttest.Direction, f []byte) porttest.Verdict {
		if madAttr(f) != 0 {
			return porttest.Drop
		}
		return porttest.Pass
	}, params)
	listen(t, y, netip.AddrPortFrom(pipeIPB, 7473), nil)
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.Connect(context.Background(), x.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 7473), 1, 1, nil)
	if !errors.Is(err, ErrIOTimeout) {
		t.Fatalf("connect: %v, want STATUS_IO_TIMEOUT", err)
	}
	if s := x.a.CMStats(); s.Sent[rocev2.AttrREQ] != 1+3 {
		t.Fatalf("sent %d REQs, want 1 + MaxCMRetries 3", s.Sent[rocev2.AttrREQ])
	}
	t.Logf("IO_TIMEOUT after %v", time.Since(start))
}

func TestConnectRefusedAndRejected(t *testing.T) {
	x, y := cmPipePair(t, nil, cm.Params{})
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = c.Connect(ctx, x.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 9), 1, 1, nil)
	var rej *RejectError
	if !errors.Is(err, ErrConnectionRefused) || !errors.As(err, &rej) || rej.Reason != rocev2.RejInvalidServiceID {
		t.Fatalf("connect to a port nobody listens on: %v, want REJ reason 8 (invalid ServiceID)", err)
	}
	l, err := y.a.CreateListener(func(c *Connector) {
		if err := c.Reject([]byte("go away")); err != nil {
			t.Error(err)
		}
		c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Listen(netip.AddrPortFrom(pipeIPB, 0)); err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddress().Port()
	if port < cm.EphemeralFirst {
		t.Fatalf("port 0 gave %d", port)
	}
	c2, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	qp2, err := x.pd.CreateQP(QPConfig{ReceiveCQ: x.rcq, InitiatorCQ: x.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = c2.Connect(ctx, qp2, netip.AddrPort{}, l.LocalAddress(), 1, 1, nil)
	if !errors.Is(err, ErrConnectionRefused) || !errors.As(err, &rej) || rej.Reason != rocev2.RejConsumerDefined {
		t.Fatalf("rejected connect: %v, want REJ reason 28 (consumer defined)", err)
	}
	buf := make([]byte, MaxRejectData)
	if _, _, n, err := c2.GetConnectionData(buf); err != nil || n != MaxRejectData || !bytes.HasPrefix(buf, []byte("go away\x00")) {
		t.Fatalf("REJ private data %q (%d), %v", buf[:10], n, err)
	}
	if _, err := y.a.CreateListener(nil); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("listener without callback: %v", err)
	}
}

func TestFirstPacketStandsInForLostRTU(t *testing.T) {
	// Every RTU is lost. The active side's first SEND proves it sent one
	// (IBTA 12.9.6 COMM_EST): Accept completes on it, long before the
	// REP's retries could run out.
	filter := func(_ porttest.Direction, f []byte) porttest.Verdict {
		if madAttr(f) == rocev2.AttrRTU {
			return porttest.Drop
		}
		return porttest.Pass
	}
	x, y := cmPipePair(t, filter, cm.Params{})
	_, ch := listen(t, y, netip.AddrPortFrom(pipeIPB, 7474), nil)
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(context.Background(), x.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 7474), 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		t.Fatalf("accept completed before any data: %v", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	sendOne(t, x, y, []byte("data before the RTU"))
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("accept did not complete on the first packet")
	}
	if s := y.a.CMStats(); s.Received[rocev2.AttrRTU] != 0 {
		t.Fatalf("an RTU arrived: %+v", s)
	}
}

func TestAdapterCloseDisconnectsItsConnections(t *testing.T) {
	// Closing an adapter closes its connectors and listeners; the DREQ of
	// its established connection still leaves, so the peer hears of it.
	x, y := cmPipePair(t, nil, cm.Params{})
	_, ch := listen(t, y, netip.AddrPortFrom(pipeIPB, 7475), nil)
	c, err := x.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(context.Background(), x.qp, netip.AddrPort{}, netip.AddrPortFrom(pipeIPB, 7475), 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	x.a.Close()
	select {
	case <-r.disconnect:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer got no disconnect event")
	}
	select {
	case <-c.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("the connector's close did not complete with the adapter's")
	}
	if _, err := x.a.CreateConnector(); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("connector on a closed adapter: %v", err)
	}
}
