// Package daemon_test runs ndkxdp's daemon on one end of a veth pair and
// its clients in the test process, against an in-process adapter on the
// other end.
package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// bed is a daemon on A, serving at sock, and an in-process host on B.
type bed struct {
	pair *harness.Pair
	srv  *daemon.Server
	sock string
	b    *ndkhost.Host
	a    *ndk.Adapter // the daemon's own adapter
	apd  *ndk.PD      // a PD on it, for in-process QPs beside the daemon's
}

func newBed(t *testing.T) *bed { return newBenchBed(t) }

func newBenchBed(t testing.TB) *bed { return newQueuesBed(t, 1) }

// newQueuesBed is a bed whose daemon adapter runs queues engines on a veth
// pair of as many queues.
func newQueuesBed(t testing.TB, queues int) *bed {
	t.Helper()
	return newBedWith(t, harness.Config{Queues: queues})
}

// newBedWith is a bed on a veth pair of cfg (its Queues engines).
func newBedWith(t testing.TB, cfg harness.Config) *bed {
	t.Helper()
	queues := cfg.Queues
	p := harness.New(t, cfg)
	var a *ndk.Adapter
	if err := p.A.Do(func() error {
		var err error
		a, err = ndk.Open(p.A.Link, ndk.Options{Queues: queues})
		return err
	}); err != nil {
		t.Fatalf("open daemon adapter: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "ndkxdp.sock")
	ln, err := daemon.Listen(sock, 0o660, -1)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	srv := daemon.New(a, daemon.Config{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	b, err := ndkhost.Open(p.B, ndkhost.Config{Options: ndk.Options{Queues: queues}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
		b.Close()
	})
	apd, err := a.CreatePD()
	if err != nil {
		t.Fatal(err)
	}
	return &bed{pair: p, srv: srv, sock: sock, b: b, a: a, apd: apd}
}

// client is a daemon-backed adapter with a PD, two CQs and a QP.
type client struct {
	a        *ndk.Adapter
	pd       *ndk.PD
	rcq, icq *ndk.CQ
	qp       *ndk.QP
	mem      []byte
	mr       *ndk.MR
}

func dial(t testing.TB, sock string) *client {
	t.Helper()
	c := dialOpen(t, sock)
	t.Cleanup(c.a.Close)
	return c
}

// dialOpen is dial for a caller that closes the adapter itself.
func dialOpen(t testing.TB, sock string) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := ndk.Dial(ctx, "unix://"+sock)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return clientOf(t, a)
}

func wait(t *testing.T, cq *ndk.CQ, what string) ndk.ResultEx {
	t.Helper()
	var r [1]ndk.ResultEx
	deadline := time.Now().Add(5 * time.Second)
	for cq.GetResultsEx(r[:]) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no completion in 5 s", what)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return r[0]
}

// peer is B's side of one connection: a QP, memory and the accept.
type peer struct {
	qp  *ndk.QP
	mem []byte
	mr  *ndk.MR
	b   *ndk.Adapter // B's, which holds mem
}

// settle orders the test's reads of p.mem with B's engine placing WRITEs:
// the client's completion proves a placement, and the next WRITE is
// posted after the reads, but both orders cross the wire, which the race
// detector does not see; Adapter.Stats synchronizes with B's engines.
func (p *peer) settle() { p.b.Stats() }

// connect connects c (through the daemon) to a fresh QP on B over the IB
// CM, B listening on port.
func (bd *bed) connect(t testing.TB, c *client, port uint16) *peer {
	t.Helper()
	return bd.connectNotified(t, c, port, nil)
}

// connectNotified is connect whose client connector calls onDisconnect.
func (bd *bed) connectNotified(t testing.TB, c *client, port uint16, onDisconnect func()) *peer {
	t.Helper()
	return bd.connectQP(t, c, port, onDisconnect, false)
}

// connectQP is connectNotified, B's QP a UC one if uc (c.qp must be too).
func (bd *bed) connectQP(t testing.TB, c *client, port uint16, onDisconnect func(), uc bool) *peer {
	t.Helper()
	b := bd.b
	pr := &peer{mem: make([]byte, 1<<16), b: b.Adapter}
	var err error
	if pr.qp, err = b.PD.CreateQP(ndk.QPConfig{ReceiveCQ: b.RCQ, InitiatorCQ: b.ICQ, ReceiveQueueDepth: 64, InitiatorQueueDepth: 64,
		MaxReceiveRequestSGE: 2, MaxInitiatorRequestSGE: 2, Context: port, UC: uc}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.qp.Close() })
	if pr.mr, err = b.PD.RegisterMR(pr.mem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteRead|ndk.MRFlagAllowRemoteWrite); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	l, err := b.Adapter.CreateListener(func(x *ndk.Connector) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		accepted <- x.Accept(ctx, pr.qp, 4, 4, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	dst := netip.AddrPortFrom(bd.pair.B.IPv4, port)
	if err := l.Listen(dst); err != nil {
		t.Fatal(err)
	}
	x, err := c.a.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.Connect(ctx, c.qp, netip.AddrPort{}, dst, 4, 4, []byte("hello")); err != nil {
		t.Fatalf("connect through the daemon: %v", err)
	}
	if err := x.CompleteConnect(onDisconnect); err != nil {
		t.Fatalf("complete connect: %v", err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("accept: %v", err)
	}
	return pr
}

func TestSendWriteReadThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	pr := bd.connect(t, c, 7001)
	b := bd.b

	// B -> client SEND into the client's shared memory.
	sge, _ := c.mr.SGE(0, 512)
	if err := c.qp.Receive("r0", []ndk.SGE{sge}); err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("daemon!"), 50)
	copy(pr.mem, msg)
	bs, _ := pr.mr.SGE(0, len(msg))
	if err := pr.qp.Send("s0", []ndk.SGE{bs}, 0); err != nil {
		t.Fatal(err)
	}
	r := wait(t, c.rcq, "client receive")
	if r.Status != ndk.StatusSuccess || r.RequestContext != "r0" || int(r.BytesTransferred) != len(msg) || r.Type != ndk.OpReceive {
		t.Fatalf("client receive completion %+v", r)
	}
	if !bytes.Equal(c.mem[:len(msg)], msg) {
		t.Fatal("received bytes differ")
	}
	wait(t, b.ICQ, "peer send")

	// client -> B WRITE, then READ it back into another part of the
	// client's memory.
	for i := range 4096 {
		c.mem[4096+i] = byte(i * 7)
	}
	ws, _ := c.mr.SGE(4096, 4096)
	if err := c.qp.Write("w", []ndk.SGE{ws}, pr.mr.Addr()+100, pr.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c.icq, "write"); r.Status != ndk.StatusSuccess || r.RequestContext != "w" || r.Type != ndk.OpWrite {
		t.Fatalf("write completion %+v", r)
	}
	pr.settle()
	if !bytes.Equal(pr.mem[100:100+4096], c.mem[4096:8192]) {
		t.Fatal("written bytes differ at the peer")
	}
	rs, _ := c.mr.SGE(16384, 4096)
	if err := c.qp.Read("rd", []ndk.SGE{rs}, pr.mr.Addr()+100, pr.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c.icq, "read"); r.Status != ndk.StatusSuccess || r.RequestContext != "rd" || r.Type != ndk.OpRead {
		t.Fatalf("read completion %+v", r)
	}
	if !bytes.Equal(c.mem[16384:16384+4096], c.mem[4096:8192]) {
		t.Fatal("read bytes differ")
	}

	// client -> B SEND, inline.
	ps, _ := pr.mr.SGE(30000, 64)
	if err := pr.qp.Receive("pr", []ndk.SGE{ps}); err != nil {
		t.Fatal(err)
	}
	private := []byte("inline from private memory")
	if err := c.qp.Send("si", []ndk.SGE{{Addr: uint64(addr(private)), Length: uint32(len(private))}}, ndk.OpFlagInline); err != nil {
		t.Fatal(err)
	}
	wait(t, c.icq, "inline send")
	if r := wait(t, b.RCQ, "peer receive"); int(r.BytesTransferred) != len(private) || !bytes.Equal(pr.mem[30000:30000+len(private)], private) {
		t.Fatalf("peer got %+v %q", r, pr.mem[30000:30000+len(private)])
	}
}

func TestRegisterPrivateMemoryRefused(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	_, err := c.pd.RegisterMR(make([]byte, 4096), ndk.MRFlagAllowLocalWrite)
	if !errors.Is(err, ndk.ErrNotSupported) {
		t.Fatalf("RegisterMR of private memory: %v, want STATUS_NOT_SUPPORTED", err)
	}
}

func TestPostChecksInlineAsInProcess(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	sge, _ := c.mr.SGE(0, 8)
	if err := c.qp.Send(nil, []ndk.SGE{sge}, 0); !errors.Is(err, ndk.ErrConnectionInvalid) {
		t.Fatalf("send before connect: %v, want STATUS_CONNECTION_INVALID", err)
	}
	bd.connect(t, c, 7002)
	bad := sge
	bad.Token ^= 0x100
	if err := c.qp.Send(nil, []ndk.SGE{bad}, 0); !errors.Is(err, ndk.ErrAccessViolation) {
		t.Fatalf("send with a forged token: %v, want STATUS_ACCESS_VIOLATION", err)
	}
	three := []ndk.SGE{sge, sge, sge}
	if err := c.qp.Send(nil, three, 0); !errors.Is(err, ndk.ErrInvalidParameter) {
		t.Fatalf("send with 3 SGEs on a 2-SGE QP: %v, want STATUS_INVALID_PARAMETER", err)
	}
	if err := c.qp.Receive(nil, []ndk.SGE{bad}); !errors.Is(err, ndk.ErrAccessViolation) {
		t.Fatalf("receive with a forged token: %v", err)
	}
}

func TestTwoClientsAtOnce(t *testing.T) {
	bd := newBed(t)
	c1, c2 := dial(t, bd.sock), dial(t, bd.sock)
	p1, p2 := bd.connect(t, c1, 7003), bd.connect(t, c2, 7004)
	if got := bd.srv.Clients(); got != 2 {
		t.Fatalf("daemon counts %d clients, want 2", got)
	}
	done := make(chan error, 2)
	run := func(c *client, p *peer, seed byte) {
		for i := range 200 {
			off := (i % 8) * 4096
			for j := range 4096 {
				c.mem[off+j] = seed + byte(i+j)
			}
			s, _ := c.mr.SGE(off, 4096)
			if err := c.qp.Write(i, []ndk.SGE{s}, p.mr.Addr()+uint64(off), p.mr.RemoteToken(), 0); err != nil {
				done <- err
				return
			}
			var r [1]ndk.ResultEx
			deadline := time.Now().Add(5 * time.Second)
			for c.icq.GetResultsEx(r[:]) == 0 {
				if time.Now().After(deadline) {
					done <- errors.New("write timed out")
					return
				}
			}
			if r[0].Status != ndk.StatusSuccess || r[0].RequestContext != i {
				done <- errors.New("bad completion")
				return
			}
			p.settle()
			if !bytes.Equal(p.mem[off:off+4096], c.mem[off:off+4096]) {
				done <- errors.New("peer memory differs")
				return
			}
		}
		done <- nil
	}
	go run(c1, p1, 1)
	go run(c2, p2, 99)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestClientPostAndPollAllocateNothing: a daemon-backed QP's Send and
// Receive and its CQ's GetResults allocate nothing, nor does the daemon's
// relay that carries them (AllocsPerRun counts the whole process).
func TestClientPostAndPollAllocateNothing(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	pr := bd.connect(t, c, 7401)
	s0, _ := c.mr.SGE(0, 64)
	p0, _ := pr.mr.SGE(0, 64)
	// The SGLs are made once: a slice literal in the call would escape
	// (Send's SGL goes into the request it builds) in either mode.
	ss, ps := []ndk.SGE{s0}, []ndk.SGE{p0}
	var res [4]ndk.Result
	ctx := any(&res) // a pointer: storing it in an interface allocates nothing
	poll := func(cq *ndk.CQ) {
		deadline := time.Now().Add(5 * time.Second)
		for cq.GetResults(res[:1]) == 0 {
			if time.Now().After(deadline) {
				panic("no completion")
			}
			runtime.Gosched() // AllocsPerRun runs on one P
		}
	}
	step := func() {
		if err := pr.qp.Receive(nil, ps); err != nil {
			panic(err)
		}
		if err := c.qp.Receive(ctx, ss); err != nil {
			panic(err)
		}
		if err := c.qp.Send(ctx, ss, 0); err != nil {
			panic(err)
		}
		poll(c.icq)
		poll(bd.b.RCQ)
		if err := pr.qp.Send(nil, ps, 0); err != nil {
			panic(err)
		}
		poll(c.rcq)
		poll(bd.b.ICQ)
	}
	step()
	if n := testing.AllocsPerRun(200, step); n != 0 {
		t.Fatalf("a SEND ping-pong through the daemon allocates %.1f times", n)
	}
}

// TestArmPeerWritesThroughDaemon: a daemon-backed QP's write arm sends one
// token after the peer's next WRITE is placed, and none before.
func TestArmPeerWritesThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	pr := bd.connect(t, c, 7601)
	ch := make(chan struct{}, 1)
	c.qp.ArmPeerWrites(ch)
	select {
	case <-ch:
		t.Fatal("token before any WRITE")
	case <-time.After(50 * time.Millisecond):
	}
	before := c.qp.PeerWrites()
	ps, _ := pr.mr.SGE(0, 128)
	copy(pr.mem, "written by the peer")
	if err := pr.qp.Write(nil, []ndk.SGE{ps}, c.mr.Addr()+256, c.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no token after the peer's WRITE")
	}
	if got := string(c.mem[256 : 256+19]); got != "written by the peer" {
		t.Fatalf("memory after the token: %q", got)
	}
	if c.qp.PeerWrites() <= before {
		t.Fatalf("PeerWrites %d, was %d", c.qp.PeerWrites(), before)
	}
	wait(t, bd.b.ICQ, "peer write")
}

// TestSharedEndpointThroughDaemon: two connections from one shared
// endpoint of a daemon-backed adapter share its address and port.
func TestSharedEndpointThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	se, err := c.a.CreateSharedEndpoint(netip.AddrPortFrom(c.a.LocalAddress(), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer se.Close()
	if !se.LocalAddress().IsValid() || se.LocalAddress().Port() == 0 {
		t.Fatalf("shared endpoint address %v", se.LocalAddress())
	}
	b := bd.b
	acc := make(chan error, 2)
	// Two listeners: one 4-tuple exists once, so the two connections
	// from one endpoint go to two ports.
	var dsts []netip.AddrPort
	for i := range 2 {
		l, err := b.Adapter.CreateListener(func(x *ndk.Connector) {
			q, _ := b.PD.CreateQP(ndk.QPConfig{ReceiveCQ: b.RCQ, InitiatorCQ: b.ICQ, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			acc <- x.Accept(ctx, q, 1, 1, nil, nil)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		dst := netip.AddrPortFrom(bd.pair.B.IPv4, uint16(7701+i))
		if err := l.Listen(dst); err != nil {
			t.Fatal(err)
		}
		dsts = append(dsts, dst)
	}
	for i, dst := range dsts {
		q, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4})
		if err != nil {
			t.Fatal(err)
		}
		x, err := c.a.CreateConnector()
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = x.ConnectWithSharedEndpoint(ctx, q, se, dst, 1, 1, nil)
		cancel()
		if err != nil {
			t.Fatalf("connection %d from the shared endpoint: %v", i, err)
		}
		if x.LocalAddress() != se.LocalAddress() {
			t.Fatalf("connection %d from %v, endpoint is %v", i, x.LocalAddress(), se.LocalAddress())
		}
		if err := x.CompleteConnect(nil); err != nil {
			t.Fatal(err)
		}
		if err := <-acc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeferThroughDaemon: a DEFER post waits for the next post without
// DEFER (NDKPI.md §8), and a post refused inline still submits it.
func TestDeferThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	pr := bd.connect(t, c, 7801)
	b := bd.b
	ps, _ := pr.mr.SGE(0, 64)
	for range 3 {
		if err := pr.qp.Receive(nil, []ndk.SGE{ps}); err != nil {
			t.Fatal(err)
		}
	}
	ss, _ := c.mr.SGE(0, 64)
	if err := c.qp.Send("deferred", []ndk.SGE{ss}, ndk.OpFlagDefer); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	var r [1]ndk.Result
	if b.RCQ.GetResults(r[:]) != 0 || c.icq.GetResults(r[:]) != 0 {
		t.Fatal("a DEFER post ran before any doorbell")
	}
	if err := c.qp.Send("rings", []ndk.SGE{ss}, 0); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, c.icq, "deferred send"); got.RequestContext != "deferred" {
		t.Fatalf("first completion %v, want the deferred send", got.RequestContext)
	}
	if got := wait(t, c.icq, "second send"); got.RequestContext != "rings" {
		t.Fatalf("second completion %v", got.RequestContext)
	}
	wait(t, b.RCQ, "peer receive 1")
	wait(t, b.RCQ, "peer receive 2")

	// A refused post submits the deferred one before it.
	if err := c.qp.Send("deferred 2", []ndk.SGE{ss}, ndk.OpFlagDefer); err != nil {
		t.Fatal(err)
	}
	if err := c.qp.Send(nil, []ndk.SGE{ss}, ndk.OpFlag(0x8000)); err == nil {
		t.Fatal("an undocumented flag was accepted")
	}
	if got := wait(t, c.icq, "deferred send after a refusal"); got.RequestContext != "deferred 2" {
		t.Fatalf("completion %v", got.RequestContext)
	}
}

// TestRemoteTokenResolvesOnlyToItsOwner: a peer connected to one client
// that WRITEs with another client's R_Key is refused (a remote access
// NAK), and the other client's memory stays as it was.
func TestRemoteTokenResolvesOnlyToItsOwner(t *testing.T) {
	bd := newBed(t)
	c1, c2 := dial(t, bd.sock), dial(t, bd.sock)
	bd.connect(t, c1, 7901)
	p2 := bd.connect(t, c2, 7902)
	for i := range c1.mem {
		c1.mem[i] = 0x11
	}
	ps, _ := p2.mr.SGE(0, 64)
	if err := p2.qp.Write(nil, []ndk.SGE{ps}, c1.mr.Addr(), c1.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, bd.b.ICQ, "forged write"); r.Status == ndk.StatusSuccess {
		t.Fatal("a WRITE with another client's R_Key succeeded")
	}
	time.Sleep(20 * time.Millisecond)
	for i, b := range c1.mem {
		if b != 0x11 {
			t.Fatalf("client 1's byte %d changed to %#x", i, b)
		}
	}
}

// TestArmThroughDaemon: a daemon-backed CQ's arm fires its callback once
// per arm: ANY on the next completion, SOLICITED only on a solicited
// receive (or an error), and at once for completions already there.
func TestArmThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	calls := make(chan ndk.Status, 8)
	ncq, err := c.a.CreateCQ(64, func(s ndk.Status) { calls <- s })
	if err != nil {
		t.Fatal(err)
	}
	defer ncq.Close()
	qp, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: ncq, InitiatorCQ: c.icq, ReceiveQueueDepth: 8, InitiatorQueueDepth: 8, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.qp = qp
	pr := bd.connect(t, c, 7951)
	rs, _ := c.mr.SGE(0, 64)
	for range 4 {
		if err := qp.Receive(nil, []ndk.SGE{rs}); err != nil {
			t.Fatal(err)
		}
	}
	ps, _ := pr.mr.SGE(0, 8)
	expect := func(what string) {
		t.Helper()
		select {
		case s := <-calls:
			if s != ndk.StatusSuccess {
				t.Fatalf("%s: callback status %v", what, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no callback", what)
		}
	}
	none := func(what string) {
		t.Helper()
		select {
		case <-calls:
			t.Fatalf("%s: unexpected callback", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := ncq.Arm(ndk.CQNotifyAny); err != nil {
		t.Fatal(err)
	}
	none("armed, nothing arrived")
	if err := pr.qp.Send(nil, []ndk.SGE{ps}, 0); err != nil {
		t.Fatal(err)
	}
	expect("ANY after a receive")
	none("no second callback for one arm")
	var r [4]ndk.Result
	for ncq.GetResults(r[:]) == 0 {
	}
	if err := ncq.Arm(ndk.CQNotifySolicited); err != nil {
		t.Fatal(err)
	}
	if err := pr.qp.Send(nil, []ndk.SGE{ps}, 0); err != nil {
		t.Fatal(err)
	}
	none("SOLICITED after an unsolicited receive")
	if err := pr.qp.Send(nil, []ndk.SGE{ps}, ndk.OpFlagSendAndSolicitEvent); err != nil {
		t.Fatal(err)
	}
	expect("SOLICITED after a solicited receive")
	// A completion that arrived after the last notification fires a new
	// ANY arm at once (those before it do not: NDKPI.md §8).
	if err := pr.qp.Send(nil, []ndk.SGE{ps}, 0); err != nil {
		t.Fatal(err)
	}
	wait(t, bd.b.ICQ, "peer send")
	time.Sleep(20 * time.Millisecond)
	if err := ncq.Arm(ndk.CQNotifyAny); err != nil {
		t.Fatal(err)
	}
	expect("ANY with completions waiting")
}

// TestManySmallMemories: small Memory calls share arenas, so a client can
// take thousands of buffers (the daemon maps at most 256 arenas per
// client) and register each.
func TestManySmallMemories(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	seen := map[uintptr]bool{}
	for i := range 2000 {
		b, err := c.a.Memory(512)
		if err != nil {
			t.Fatalf("memory %d: %v", i, err)
		}
		if seen[addr(b)] {
			t.Fatalf("memory %d overlaps an earlier one", i)
		}
		seen[addr(b)] = true
		if i%100 == 0 {
			mr, err := c.pd.RegisterMR(b, ndk.MRFlagAllowLocalWrite)
			if err != nil {
				t.Fatalf("register memory %d: %v", i, err)
			}
			_ = mr.Deregister()
		}
	}
}

// TestResizeCQThroughDaemon: NdkResizeCq on a daemon-backed CQ keeps the
// completions queued before it ahead of those after, in order, with their
// contexts, and refuses a depth below what is queued.
func TestResizeCQThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	if c.a.Info().AdapterFlags&ndk.AdapterFlagCQResizeSupported == 0 {
		t.Fatal("a daemon-backed adapter does not advertise CQ_RESIZE_SUPPORTED")
	}
	pr := bd.connect(t, c, 8001)
	ss, _ := c.mr.SGE(0, 8)
	ps, _ := pr.mr.SGE(0, 8)
	send := func(i int) {
		if err := pr.qp.Receive(nil, []ndk.SGE{ps}); err != nil {
			t.Fatal(err)
		}
		if err := c.qp.Send(i, []ndk.SGE{ss}, 0); err != nil {
			t.Fatal(err)
		}
		wait(t, bd.b.RCQ, "peer receive")
	}
	for i := range 3 {
		send(i)
	}
	time.Sleep(20 * time.Millisecond)
	if err := c.icq.Resize(1); !errors.Is(err, ndk.ErrInvalidParameter) {
		t.Fatalf("resize to 1 under 3 queued: %v, want STATUS_INVALID_PARAMETER", err)
	}
	for _, depth := range []int{1024, 8} {
		if err := c.icq.Resize(depth); err != nil {
			t.Fatalf("resize to %d: %v", depth, err)
		}
		if c.icq.Depth() < depth {
			t.Fatalf("depth %d after resizing to %d", c.icq.Depth(), depth)
		}
	}
	for i := 3; i < 6; i++ {
		send(i)
	}
	for i := range 6 {
		r := wait(t, c.icq, "send")
		if r.RequestContext != i || r.Status != ndk.StatusSuccess {
			t.Fatalf("completion %d: context %v status %v", i, r.RequestContext, r.Status)
		}
	}
}
