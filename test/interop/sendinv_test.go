package interop

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// sendInvPort is the rdma_cm port of the SEND with Invalidate case.
const sendInvPort = 18600

// testSendInv: rxe's SEND with Invalidate (IBV_WR_SEND_WITH_INV, from
// ndkxdp-sendinv in the guest; perftest and rping have no such verb)
// revokes an ndkxdp memory window and a fast-registered MR. ndkxdp's
// server binds the window and fast-registers the MR on the connection's
// QP and sends their tokens; the guest WRITEs through both (they work),
// then sends SEND_WITH_INV naming the window, then the MR. Each receive
// must complete on ndkxdp as ReceiveAndInvalidate carrying the token it
// names. Afterwards both tokens must be dead on the wire: the guest's
// WRITE through the window (same connection) and through the MR (a second
// connection, after a WRITE through a valid MR there succeeds) must get
// ndkxdp's remote access error NAK, which rxe reports as
// IBV_WC_REM_ACCESS_ERR, and ndkxdp's own NdkInvalidate of the MR (on a
// third connection) must fail with STATUS_INVALID_DEVICE_REQUEST.
func testSendInv(t *testing.T, p *peer) {
	p.capture(t)
	ctx := ctxFor(t, 3*time.Minute)
	before := len(p.framesNow(t))
	_, _, n0 := p.responderStats()
	reqs := make(chan *ndk.Connector, 4)
	var l *ndk.Listener
	if err := p.vm.Host.Do(func() (err error) {
		l, err = p.dev.Adapter.CreateListener(func(c *ndk.Connector) {
			select {
			case reqs <- c:
			default:
				_ = c.Reject(nil)
				c.Close()
			}
		})
		if err != nil {
			return err
		}
		return l.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), sendInvPort))
	}); err != nil {
		t.Fatalf("listen on %d: %v", sendInvPort, err)
	}
	defer l.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &sendInvServer{p: p, reqs: reqs}
	serr := make(chan error, 1)
	go func() { serr <- srv.run(sctx) }()
	out, errOut, code, err := p.vm.Run(ctx, fmt.Sprintf("%s %v %d", SendInvPath, HostIPv4, sendInvPort))
	if code != 0 || err != nil {
		cancel()
	}
	var se error
	select {
	case se = <-serr:
	case <-time.After(2 * time.Minute):
		se = errors.New("server did not finish")
	}
	t.Logf("ndkxdp-sendinv in the guest:\n%s%s\nndkxdp server:\n%s", out, errOut, srv.log.String())
	if se != nil || err != nil || code != 0 {
		t.Fatalf("ndkxdp server: %v; guest: exit %d (%v)", se, code, err)
	}
	for _, want := range []string{
		"conn1 write through mw: success",
		"conn1 write through mr: success",
		"(mw): success",
		"(mr): success",
		"conn1 write through mw after invalidation: remote access error (10)",
		"conn2 write through a valid mr: success",
		"conn2 write through mr after invalidation: remote access error (10)",
		"conn3 goodbye: success, 1 bytes",
		"PASS: 0 failures",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("the guest did not print %q", want)
		}
	}
	_, _, n1 := p.responderStats()
	naks := 0
	var pkt rocev2.Packet
	for _, f := range p.framesNow(t)[before:] {
		if f.Outgoing && rocev2.Parse(f.Data, &pkt) == nil && pkt.BTH.Opcode == rocev2.RCAck &&
			pkt.AETH.Syndrome == rocev2.NAKSyndrome(rocev2.NAKRemoteAccessError) {
			naks++
		}
	}
	if naks < 2 || n1-n0 < 2 {
		t.Fatalf("ndkxdp sent %d remote access error NAKs (NAK counter %d -> %d), want one for each dead token", naks, n0, n1)
	}
}

// sendInvServer is ndkxdp's side of testSendInv, on the ndk API itself
// (the verbs contract has no windows or fast registration).
type sendInvServer struct {
	p    *peer
	reqs chan *ndk.Connector
	log  bytes.Buffer
}

// sendInvConn is one accepted connection with its QP and CQs.
type sendInvConn struct {
	c        *ndk.Connector
	qp       *ndk.QP
	scq, rcq *ndk.CQ
	gone     chan struct{}
}

func (s *sendInvServer) logf(format string, a ...any) {
	fmt.Fprintf(&s.log, format+"\n", a...)
}

// accept takes the next connect request and accepts it on a new QP; post
// runs first, to post the receives the peer's first SENDs need.
func (s *sendInvServer) accept(ctx context.Context, post func(qp *ndk.QP) error) (*sendInvConn, error) {
	var c *ndk.Connector
	select {
	case c = <-s.reqs:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a connect request: %w", ctx.Err())
	}
	ad := s.p.dev.Adapter
	k := &sendInvConn{c: c, gone: make(chan struct{})}
	var err error
	if k.scq, err = ad.CreateCQ(16, nil); err != nil {
		return nil, err
	}
	if k.rcq, err = ad.CreateCQ(16, nil); err != nil {
		return nil, err
	}
	if k.qp, err = s.p.dev.PD.CreateQP(ndk.QPConfig{ReceiveCQ: k.rcq, InitiatorCQ: k.scq,
		ReceiveQueueDepth: 8, InitiatorQueueDepth: 8, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}); err != nil {
		return nil, err
	}
	if post != nil {
		if err := post(k.qp); err != nil {
			return nil, err
		}
	}
	var once sync.Once
	if err := c.Accept(ctx, k.qp, 1, 1, nil, func() { once.Do(func() { close(k.gone) }) }); err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	return k, nil
}

// close disconnects (bounded) and releases the connection.
func (k *sendInvConn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = k.c.Disconnect(ctx)
	k.c.Close()
	_ = k.qp.Close()
	k.scq.Close()
	k.rcq.Close()
}

// next polls cq for one completion until ctx ends.
func next(ctx context.Context, cq *ndk.CQ) (ndk.ResultEx, error) {
	var r [1]ndk.ResultEx
	for {
		if cq.GetResultsEx(r[:]) == 1 {
			return r[0], nil
		}
		select {
		case <-ctx.Done():
			return r[0], fmt.Errorf("waiting for a completion: %w", ctx.Err())
		case <-time.After(200 * time.Microsecond):
		}
	}
}

// complete polls the initiator CQ for the completion of a request of type
// want and fails on any other outcome.
func complete(ctx context.Context, cq *ndk.CQ, want ndk.OperationType) error {
	r, err := next(ctx, cq)
	if err != nil {
		return err
	}
	if r.Status != ndk.StatusSuccess || r.Type != want {
		return fmt.Errorf("completion %v with status %v (provider code %d), want %v succeeded", r.Type, r.Status, r.ProviderErrorCode, want)
	}
	return nil
}

func (s *sendInvServer) run(ctx context.Context) error {
	ad, pd := s.p.dev.Adapter, s.p.dev.PD
	mem := func(n int, flags ndk.MRFlag) ([]byte, *ndk.MR, error) {
		b, err := ad.Memory(n)
		if err != nil {
			return nil, nil, err
		}
		mr, err := pd.RegisterMR(b, flags)
		return b, mr, err
	}
	ctl, ctlMR, err := mem(4096, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		return err
	}
	defer ctlMR.Deregister()
	win, winMR, err := mem(4096, ndk.MRFlagAllowRemoteWrite|ndk.MRFlagAllowRemoteRead)
	if err != nil {
		return err
	}
	defer winMR.Deregister()
	frBuf, err := ad.Memory(ndk.PageSize)
	if err != nil {
		return err
	}
	sge := func(off, n int) []ndk.SGE {
		return []ndk.SGE{{Addr: ctlMR.Addr() + uint64(off), Length: uint32(n), Token: ctlMR.LocalToken()}}
	}

	// Connection 1: two receives for the SEND_WITH_INVs, posted before
	// the accept; the go-ahead's buffer is the last 1 byte at 256.
	k1, err := s.accept(ctx, func(qp *ndk.QP) error {
		for i := range 2 {
			if err := qp.Receive(uint64(i), sge(64*i, 64)); err != nil {
				return fmt.Errorf("post receive: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("connection 1: %w", err)
	}
	defer k1.close()
	mw, err := pd.CreateMW()
	if err != nil {
		return err
	}
	defer mw.Close()
	if err := k1.qp.Bind("bind", winMR, mw, winMR.Addr(), uint64(len(win)), ndk.OpFlagAllowRemoteRead|ndk.OpFlagAllowRemoteWrite); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	if err := complete(ctx, k1.scq, ndk.OpBind); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	fr, err := pd.CreateMR(true)
	if err != nil {
		return err
	}
	defer fr.Deregister()
	if err := fr.InitializeFastRegister(2, true); err != nil {
		return err
	}
	if err := k1.qp.FastRegister("fastreg", fr, frBuf[:64], ndk.OpFlagAllowLocalWrite|ndk.OpFlagAllowRemoteRead|ndk.OpFlagAllowRemoteWrite); err != nil {
		return fmt.Errorf("fast register: %w", err)
	}
	if err := complete(ctx, k1.scq, ndk.OpFastRegister); err != nil {
		return fmt.Errorf("fast register: %w", err)
	}
	mwTok, frTok, frAddr := mw.RemoteToken(), fr.RemoteToken(), fr.Addr()
	s.logf("window %#x over %#x (%d bytes), fast-registered MR %#x at %#x (64 bytes)", mwTok, winMR.Addr(), len(win), frTok, frAddr)
	sendTokens := func(k *sendInvConn, t1, t2 uint32, a1, a2 uint64) error {
		m := ctl[128:152]
		binary.BigEndian.PutUint32(m[0:], t1)
		binary.BigEndian.PutUint32(m[4:], t2)
		binary.BigEndian.PutUint64(m[8:], a1)
		binary.BigEndian.PutUint64(m[16:], a2)
		if err := k.qp.Send("tokens", sge(128, 24), 0); err != nil {
			return err
		}
		return complete(ctx, k.scq, ndk.OpSend)
	}
	if err := sendTokens(k1, mwTok, frTok, winMR.Addr(), frAddr); err != nil {
		return fmt.Errorf("send tokens: %w", err)
	}
	for i, want := range []struct {
		tok  uint32
		text string
	}{{mwTok, "inval-mw"}, {frTok, "inval-mr"}} {
		r, err := next(ctx, k1.rcq)
		if err != nil {
			return fmt.Errorf("receive %d: %w", i, err)
		}
		got := string(ctl[64*i : 64*i+int(r.BytesTransferred)])
		s.logf("receive %d: %v, type %v, token %#x, %d bytes %q", i, r.Status, r.Type, r.TypeSpecificCompletionOutput, r.BytesTransferred, got)
		if r.Status != ndk.StatusSuccess || r.Type != ndk.OpReceiveAndInvalidate || r.TypeSpecificCompletionOutput != uint64(want.tok) || got != want.text {
			return fmt.Errorf("receive %d: %v %v token %#x %q; want a ReceiveAndInvalidate of token %#x carrying %q",
				i, r.Status, r.Type, r.TypeSpecificCompletionOutput, got, want.tok, want.text)
		}
	}
	ad.Stats() // orders the engines' placement before the reads below
	if got := string(win[:8]); got != "mw-write" {
		return fmt.Errorf("the window's memory holds %q, want the guest's WRITE through it", got)
	}
	if got := string(frBuf[:8]); got != "mr-write" {
		return fmt.Errorf("the fast-registered MR's memory holds %q, want the guest's WRITE through it", got)
	}
	if err := k1.qp.Send("go", sge(160, 1), 0); err != nil {
		return fmt.Errorf("send go-ahead: %w", err)
	}
	if err := complete(ctx, k1.scq, ndk.OpSend); err != nil {
		return fmt.Errorf("send go-ahead: %w", err)
	}

	// Connection 2: a valid MR and the invalidated one.
	ok, okMR, err := mem(4096, ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		return err
	}
	defer okMR.Deregister()
	k2, err := s.accept(ctx, nil)
	if err != nil {
		return fmt.Errorf("connection 2: %w", err)
	}
	defer k2.close()
	if err := sendTokens(k2, okMR.RemoteToken(), frTok, okMR.Addr(), frAddr); err != nil {
		return fmt.Errorf("connection 2: send tokens: %w", err)
	}
	select {
	case <-k2.gone:
	case <-ctx.Done():
		return fmt.Errorf("connection 2: waiting for the guest's disconnect: %w", ctx.Err())
	}
	ad.Stats()
	if got := string(ok[:8]); got != "ok-write" {
		return fmt.Errorf("the valid MR holds %q, want the guest's WRITE", got)
	}
	if got := string(win[:8]); got != "mw-write" {
		return fmt.Errorf("a WRITE through the invalidated window landed: %q", got)
	}
	if got := string(frBuf[:8]); got != "mr-write" {
		return fmt.Errorf("a WRITE through the invalidated MR landed: %q", got)
	}

	// Connection 3: seed 002's "a later NdkInvalidate of that token
	// fails", with NdkInvalidate itself. The failure moves the QP to the
	// error state, so the goodbye goes first.
	k3, err := s.accept(ctx, nil)
	if err != nil {
		return fmt.Errorf("connection 3: %w", err)
	}
	defer k3.close()
	if err := k3.qp.Send("bye", sge(160, 1), 0); err != nil {
		return fmt.Errorf("connection 3: send goodbye: %w", err)
	}
	if err := complete(ctx, k3.scq, ndk.OpSend); err != nil {
		return fmt.Errorf("connection 3: send goodbye: %w", err)
	}
	if err := k3.qp.Invalidate("invalidate", fr, 0); err != nil {
		return fmt.Errorf("connection 3: post invalidate: %w", err)
	}
	r, err := next(ctx, k3.scq)
	if err != nil {
		return fmt.Errorf("connection 3: invalidate: %w", err)
	}
	s.logf("NdkInvalidate of the MR rxe invalidated: type %v, %v", r.Type, r.Status)
	if r.Type != ndk.OpInvalidate || r.Status != ndk.StatusInvalidDeviceRequest {
		return fmt.Errorf("NdkInvalidate of the MR rxe invalidated completed %v with %v, want Invalidate with STATUS_INVALID_DEVICE_REQUEST", r.Type, r.Status)
	}
	return nil
}
