package daemon_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// SRQs, memory windows, fast registration, NdkInvalidate and
// RDMA_READ_LOCAL_INVALIDATE through the daemon: the rules their
// in-process tests (ndk/srq_test.go, mw_test.go, fastreg_test.go) show,
// shown again for a daemon-backed adapter against an in-process peer.

func expect(t *testing.T, cq *ndk.CQ, st ndk.Status, typ ndk.OperationType, ctx any) ndk.ResultEx {
	t.Helper()
	r := wait(t, cq, "completion")
	if r.Status != st || r.Type != typ || r.RequestContext != ctx {
		t.Fatalf("completion %v %v ctx %v, want %v %v ctx %v", r.Status, r.Type, r.RequestContext, st, typ, ctx)
	}
	return r
}

// TestMemoryLimitsAdvertisedThroughDaemon: a client adapter advertises
// the daemon adapter's SRQ, window and FRMR limits and
// RDMA_READ_LOCAL_INVALIDATE_SUPPORTED, now that it has them.
func TestMemoryLimitsAdvertisedThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	i, d := c.a.Info(), bd.a.Info()
	if i.MaxSRQDepth == 0 || i.MaxSRQDepth != d.MaxSRQDepth || i.MaxWindowSize != d.MaxWindowSize || i.FRMRPageCount != d.FRMRPageCount ||
		i.AdapterFlags != d.AdapterFlags || i.AdapterFlags&ndk.AdapterFlagRDMAReadLocalInvalidateSupported == 0 {
		t.Fatalf("client advertises SRQ %d, window %d, FRMR %d, flags %v; the daemon's adapter %d, %d, %d, %v",
			i.MaxSRQDepth, i.MaxWindowSize, i.FRMRPageCount, i.AdapterFlags, d.MaxSRQDepth, d.MaxWindowSize, d.FRMRPageCount, d.AdapterFlags)
	}
}

// TestMWThroughDaemon: the window's token changes when Bind returns; a
// peer writes and reads through it inside its range, one byte past it is
// a remote access error and changes nothing; a bind beyond the MR's range
// or rights fails inline; NdkInvalidate and NdkCloseMw revoke the token,
// a rebind gives a working one again.
func TestMWThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	pr := bd.connect(t, c, 7601)
	b := bd.b
	ro, err := c.pd.RegisterMR(c.mem[32768:36864], ndk.MRFlagAllowRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := c.pd.CreateMW()
	if err != nil {
		t.Fatal(err)
	}
	for name, bind := range map[string]func() error{
		"WriteOnReadOnlyMR": func() error { return c.qp.Bind(nil, ro, mw, ro.Addr(), 64, ndk.OpFlagAllowRemoteWrite) },
		"RangePastMR":       func() error { return c.qp.Bind(nil, ro, mw, ro.Addr()+4000, 97, ndk.OpFlagAllowRemoteRead) },
		"RangeBeforeMR":     func() error { return c.qp.Bind(nil, ro, mw, ro.Addr()-1, 8, ndk.OpFlagAllowRemoteRead) },
	} {
		if err := bind(); !errors.Is(err, ndk.ErrAccessViolation) {
			t.Errorf("%s: %v, want STATUS_ACCESS_VIOLATION", name, err)
		}
	}
	if err := c.qp.Bind(nil, ro, mw, ro.Addr(), 64, ndk.OpFlagInline); !errors.Is(err, ndk.ErrInvalidParameter) {
		t.Errorf("Bind with INLINE: %v", err)
	}

	before := mw.RemoteToken()
	if err := c.qp.Bind("bind", c.mr, mw, c.mr.Addr()+1024, 1024, ndk.OpFlagAllowRemoteWrite|ndk.OpFlagAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	tok := mw.RemoteToken()
	if tok == before {
		t.Fatal("the window's token did not change when Bind returned")
	}
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpBind, "bind")
	for i := range 4096 {
		c.mem[i] = 0x11
		pr.mem[i] = 0x77
	}
	ps, _ := pr.mr.SGE(0, 1024)
	if err := pr.qp.Write("in", []ndk.SGE{ps}, c.mr.Addr()+1024, tok, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, b.ICQ, ndk.StatusSuccess, ndk.OpWrite, "in")
	past, _ := pr.mr.SGE(0, 1024)
	if err := pr.qp.Write("past", []ndk.SGE{past}, c.mr.Addr()+1025, tok, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, b.ICQ, ndk.StatusAccessViolation, ndk.OpWrite, "past")
	for i, v := range c.mem[:4096] {
		inside := i >= 1024 && i < 2048
		if (inside && v != 0x77) || (!inside && v != 0x11) {
			t.Fatalf("byte %d is %#x after a write inside the window and one past it", i, v)
		}
	}
	// The remote access error ended B's QP: reconnect for the reads.
	pr = bd.reconnect(t, c, 7602)
	dst, _ := pr.mr.SGE(8192, 64)
	read := func(ctx string, token uint32, want ndk.Status) {
		t.Helper()
		if err := pr.qp.Read(ctx, []ndk.SGE{dst}, c.mr.Addr()+1024, token, 0); err != nil {
			t.Fatal(err)
		}
		expect(t, b.ICQ, want, ndk.OpRead, ctx)
	}
	if err := c.qp.Bind("bind2", c.mr, mw, c.mr.Addr()+1024, 1024, ndk.OpFlagAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpBind, "bind2")
	read("before", mw.RemoteToken(), ndk.StatusSuccess)
	if !bytes.Equal(pr.mem[8192:8192+64], c.mem[1024:1024+64]) {
		t.Fatal("read through the window returned other bytes")
	}
	if err := c.qp.Invalidate("inv", mw, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpInvalidate, "inv")
	read("invalidated", mw.RemoteToken(), ndk.StatusRemoteResources)

	pr = bd.reconnect(t, c, 7603)
	if err := c.qp.Bind("rebind", c.mr, mw, c.mr.Addr()+1024, 1024, ndk.OpFlagAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpBind, "rebind")
	read("rebound", mw.RemoteToken(), ndk.StatusSuccess)
	mw.Close()
	mw.Close() // a second close does nothing
	read("closed", mw.RemoteToken(), ndk.StatusRemoteResources)
}

// reconnect gives c a new QP connected to a new peer QP, after an error
// ended the last connection.
func (bd *bed) reconnect(t *testing.T, c *client, port uint16) *peer {
	t.Helper()
	var err error
	if c.qp, err = c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 64, InitiatorQueueDepth: 64,
		MaxReceiveRequestSGE: 2, MaxInitiatorRequestSGE: 2, InlineDataSize: 64}); err != nil {
		t.Fatal(err)
	}
	// Drop the flushed requests' completions.
	var res [16]ndk.Result
	for _, cq := range []*ndk.CQ{c.icq, c.rcq, bd.b.ICQ, bd.b.RCQ} {
		for n := 0; n < 256 && cq.GetResults(res[:]) > 0; n++ {
		}
	}
	return bd.connect(t, c, port)
}

// newFastMR creates a fast-register MR of pages pages on the client.
func newFastMR(t *testing.T, pd *ndk.PD, pages int, remote bool) *ndk.MR {
	t.Helper()
	mr, err := pd.CreateMR(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.InitializeFastRegister(pages, remote); err != nil {
		t.Fatal(err)
	}
	return mr
}

// TestFastRegisterThroughDaemon: FastRegister (deferred) and a SEND with
// the token it returned complete in order and the peer gets the bytes; the
// invalidated token is refused inline, and a second Invalidate completes
// STATUS_INVALID_DEVICE_REQUEST. A peer WRITE through the remote token a
// FastRegister returned lands in the client's memory. A FastRegister of a
// registered MR is refused inline; after an Invalidate it is taken.
func TestFastRegisterThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	pr := bd.connect(t, c, 7611)
	b := bd.b
	if _, err := c.pd.CreateMR(true); err != nil {
		t.Fatal(err)
	}
	mr := newFastMR(t, c.pd, 1, true)
	if err := mr.Register(c.mem[:64], 0); !errors.Is(err, ndk.ErrInvalidDeviceRequest) {
		t.Fatalf("NdkRegisterMr on a fast-register MR: %v", err)
	}
	if err := mr.InitializeFastRegister(0, false); !errors.Is(err, ndk.ErrImplementationLimit) {
		t.Fatalf("InitializeFastRegister(0): %v", err)
	}
	if err := c.qp.FastRegister(nil, mr, make([]byte, 64), 0); !errors.Is(err, ndk.ErrNotSupported) {
		t.Fatalf("FastRegister of memory the daemon cannot map: %v", err)
	}
	src := c.mem[40960 : 40960+64]
	copy(src, "fast-registered bytes through the daemon")
	ps, _ := pr.mr.SGE(0, 64)
	if err := pr.qp.Receive("r", []ndk.SGE{ps}); err != nil {
		t.Fatal(err)
	}
	if err := c.qp.FastRegister("fr", mr, src, ndk.OpFlagDefer|ndk.OpFlagAllowLocalWrite|ndk.OpFlagAllowRemoteWrite); err != nil {
		t.Fatal(err)
	}
	ss, err := mr.SGE(0, len(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.qp.Send("send", []ndk.SGE{ss}, 0); err != nil {
		t.Fatalf("SEND with the token FastRegister just returned: %v", err)
	}
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpFastRegister, "fr")
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpSend, "send")
	if err := c.qp.FastRegister(nil, mr, src, 0); !errors.Is(err, ndk.ErrAccessViolation) {
		t.Fatalf("FastRegister of a registered MR: %v", err)
	}
	if r := expect(t, b.RCQ, ndk.StatusSuccess, ndk.OpReceive, "r"); !bytes.Equal(pr.mem[:r.BytesTransferred], src) {
		t.Fatalf("peer received %q", pr.mem[:r.BytesTransferred])
	}

	// The peer writes through the new remote token.
	for i := range 64 {
		pr.mem[1000+i] = 0xAB
	}
	ws, _ := pr.mr.SGE(1000, 64)
	if err := pr.qp.Write("w", []ndk.SGE{ws}, mr.Addr(), mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	expect(t, b.ICQ, ndk.StatusSuccess, ndk.OpWrite, "w")
	if !bytes.Equal(src, pr.mem[1000:1064]) {
		t.Fatal("the peer's WRITE through the fast-registered token did not land")
	}

	if err := c.qp.Invalidate("inv", mr, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpInvalidate, "inv")
	if err := c.qp.Send(nil, []ndk.SGE{ss}, 0); !errors.Is(err, ndk.ErrAccessViolation) {
		t.Fatalf("SEND with an invalidated token: %v", err)
	}
	if err := c.qp.FastRegister("again", mr, src[:16], ndk.OpFlagAllowLocalWrite); err != nil {
		t.Fatalf("FastRegister after Invalidate: %v", err)
	}
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpFastRegister, "again")
	if err := c.qp.Invalidate("inv2", mr, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, c.icq, ndk.StatusSuccess, ndk.OpInvalidate, "inv2")
	if err := c.qp.Invalidate("inv3", mr, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, c.icq, ndk.StatusInvalidDeviceRequest, ndk.OpInvalidate, "inv3")
}

// TestReadLocalInvalidateThroughDaemon: a READ with
// RDMA_READ_LOCAL_INVALIDATE into a fast-registered sink invalidates it
// once the data is placed (a later Invalidate of it fails); on a
// RegisterMR sink the READ fails STATUS_INVALID_DEVICE_REQUEST.
func TestReadLocalInvalidateThroughDaemon(t *testing.T) {
	for _, fast := range []bool{true, false} {
		name := map[bool]string{true: "FastRegisteredSink", false: "RegisterMrSink"}[fast]
		t.Run(name, func(t *testing.T) {
			bd := newBed(t)
			c := dial(t, bd.sock)
			bd.connect(t, c, 7621)
			// The source is registered after it is written: the
			// registration orders the bytes before B's engine reads
			// them (for the race detector, which does not see the wire).
			src := []byte("read, then invalidate the sink")
			smr, err := bd.b.PD.RegisterMR(bytes.Clone(src), ndk.MRFlagAllowRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			sink := c.mem[20480 : 20480+len(src)]
			mr := c.mr
			if fast {
				mr = newFastMR(t, c.pd, 1, false)
				if err := c.qp.FastRegister(nil, mr, sink, ndk.OpFlagAllowLocalWrite|ndk.OpFlagSilentSuccess); err != nil {
					t.Fatal(err)
				}
			}
			ds, _ := mr.SGE(int(uint64(addr(sink))-mr.Addr()), len(sink))
			if err := c.qp.Read("r", []ndk.SGE{ds}, smr.Addr(), smr.RemoteToken(), ndk.OpFlagRDMAReadLocalInvalidate); err != nil {
				t.Fatal(err)
			}
			if !fast {
				expect(t, c.icq, ndk.StatusInvalidDeviceRequest, ndk.OpRead, "r")
				return
			}
			expect(t, c.icq, ndk.StatusSuccess, ndk.OpRead, "r")
			if !bytes.Equal(sink, src) {
				t.Fatalf("sink %q", sink)
			}
			if err := c.qp.Send(nil, []ndk.SGE{ds}, 0); !errors.Is(err, ndk.ErrAccessViolation) {
				t.Fatalf("SEND from the invalidated sink: %v", err)
			}
			if err := c.qp.Invalidate("inv", mr, 0); err != nil {
				t.Fatal(err)
			}
			expect(t, c.icq, ndk.StatusInvalidDeviceRequest, ndk.OpInvalidate, "inv")
		})
	}
}

// srqBed is a client SRQ with two client QPs on it, each connected to a
// QP of B.
type srqBed struct {
	srq     *ndk.SRQ
	qps     [2]*ndk.QP
	peers   [2]*peer
	notes   chan ndk.Status
	clients *client
}

func newSRQBed(t *testing.T, bd *bed, c *client, depth, threshold int, port uint16) *srqBed {
	t.Helper()
	s := &srqBed{notes: make(chan ndk.Status, 16), clients: c}
	var err error
	if s.srq, err = c.pd.CreateSRQ(depth, 1, threshold, func(st ndk.Status) { s.notes <- st }); err != nil {
		t.Fatal(err)
	}
	for i := range s.qps {
		if s.qps[i], err = c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, SRQ: s.srq, InitiatorQueueDepth: 16,
			MaxInitiatorRequestSGE: 1, Context: i}); err != nil {
			t.Fatal(err)
		}
		c.qp = s.qps[i]
		s.peers[i] = bd.connect(t, c, port+uint16(i))
	}
	return s
}

// TestSRQThroughDaemon: receives posted once on the SRQ are taken by
// whichever QP receives a SEND, and complete on that QP's receive CQ with
// its context and the receive's own; the notification fires once when the
// queued receives drop below the threshold and again only after Modify
// re-arms it; a QP on an SRQ refuses Receive.
func TestSRQThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	s := newSRQBed(t, bd, c, 16, 3, 7631)
	b := bd.b
	if err := s.qps[0].Receive(nil, nil); !errors.Is(err, ndk.ErrInvalidDeviceRequest) {
		t.Fatalf("Receive on a QP of an SRQ: %v", err)
	}
	if err := s.srq.Receive(nil, make([]ndk.SGE, 2)); !errors.Is(err, ndk.ErrInvalidParameter) {
		t.Fatalf("SRQ.Receive over its SGE limit: %v", err)
	}
	for i := range 4 {
		sge, _ := c.mr.SGE(i*256, 256)
		if err := s.srq.Receive(i, []ndk.SGE{sge}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.srq.Len(); n != 4 {
		t.Fatalf("SRQ holds %d receives, want 4", n)
	}
	send := func(p int, msg string) {
		t.Helper()
		copy(s.peers[p].mem, msg)
		ps, _ := s.peers[p].mr.SGE(0, len(msg))
		if err := s.peers[p].qp.Send(msg, []ndk.SGE{ps}, 0); err != nil {
			t.Fatal(err)
		}
		expect(t, b.ICQ, ndk.StatusSuccess, ndk.OpSend, msg)
	}
	for i, p := range []int{1, 0} {
		send(p, "to QP "+string(rune('0'+p)))
		r := wait(t, c.rcq, "SRQ receive")
		if r.Status != ndk.StatusSuccess || r.QPContext != p || r.RequestContext != i || r.Type != ndk.OpReceive {
			t.Fatalf("SRQ receive %d: %+v, want QP context %d, request context %d", i, r, p, i)
		}
		if got := string(c.mem[i*256 : i*256+int(r.BytesTransferred)]); got != "to QP "+string(rune('0'+p)) {
			t.Fatalf("receive %d holds %q", i, got)
		}
	}
	// 2 queued: below the threshold of 3, once.
	select {
	case st := <-s.notes:
		if st != ndk.StatusSuccess {
			t.Fatalf("notification %v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification below the threshold")
	}
	send(0, "again")
	wait(t, c.rcq, "third receive")
	select {
	case st := <-s.notes:
		t.Fatalf("a second notification (%v) without Modify re-arming", st)
	case <-time.After(100 * time.Millisecond):
	}
	if err := s.srq.Modify(0, 2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.notes: // 1 queued < 2: at once
	case <-time.After(5 * time.Second):
		t.Fatal("Modify's re-arm below the threshold did not notify")
	}
	if err := s.srq.Modify(s.srq.Cap()+1, 0); !errors.Is(err, ndk.ErrInvalidParameter) {
		t.Fatalf("Modify above Cap: %v", err)
	}
}

// TestSRQCloseRulesThroughDaemon: an SRQ's close refuses posts at once
// and completes only when the QPs on it are closed; a QP cannot be
// created on a closed SRQ; the PD's close waits for the SRQ's.
func TestSRQCloseRulesThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	srq, err := c.pd.CreateSRQ(8, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, SRQ: srq, InitiatorQueueDepth: 4, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	srq.Close()
	sge, _ := c.mr.SGE(0, 64)
	if err := srq.Receive(nil, []ndk.SGE{sge}); !errors.Is(err, ndk.ErrInvalidHandle) {
		t.Fatalf("Receive after Close: %v", err)
	}
	if _, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, SRQ: srq, InitiatorQueueDepth: 4}); !errors.Is(err, ndk.ErrInvalidHandle) {
		t.Fatalf("CreateQP on a closed SRQ: %v", err)
	}
	select {
	case <-srq.Closed():
		t.Fatal("SRQ close completed with a QP on it open")
	case <-time.After(50 * time.Millisecond):
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srq.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("SRQ close did not complete after its QP closed")
	}
}

// TestMemoryPostsAllocateNothingThroughDaemon: FastRegister, SEND,
// Invalidate, Bind and SRQ.Receive post without allocating in the client.
func TestMemoryPostsAllocateNothingThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	pr := bd.connect(t, c, 7641)
	mr := newFastMR(t, c.pd, 1, false)
	mw, err := c.pd.CreateMW()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := c.pd.CreateSRQ(64, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := c.mem[49152 : 49152+64]
	ps, _ := pr.mr.SGE(0, 64)
	pss := []ndk.SGE{ps}
	ss := make([]ndk.SGE, 1)
	r0, _ := c.mr.SGE(0, 64)
	rs := []ndk.SGE{r0}
	var res [4]ndk.Result
	ctx := any(&res)
	poll := func(cq *ndk.CQ, n int) {
		deadline := time.Now().Add(5 * time.Second)
		for got := 0; got < n; {
			got += cq.GetResults(res[:n-got])
			if time.Now().After(deadline) {
				panic("no completion")
			}
			runtime.Gosched()
		}
	}
	// AllocsPerRun's warm-up and 20 runs leave 21 receives on the SRQ,
	// which no QP takes: within its depth.
	if n := testing.AllocsPerRun(20, func() {
		if err := c.qp.FastRegister(ctx, mr, buf, ndk.OpFlagDefer); err != nil {
			panic(err)
		}
		ss[0] = ndk.SGE{Addr: mr.Addr(), Length: 64, Token: mr.LocalToken()}
		if err := pr.qp.Receive(nil, pss); err != nil {
			panic(err)
		}
		if err := c.qp.Send(ctx, ss, ndk.OpFlagDefer); err != nil {
			panic(err)
		}
		if err := c.qp.Invalidate(ctx, mr, ndk.OpFlagDefer); err != nil {
			panic(err)
		}
		if err := c.qp.Bind(ctx, c.mr, mw, c.mr.Addr(), 64, ndk.OpFlagAllowRemoteRead); err != nil {
			panic(err)
		}
		if err := srq.Receive(ctx, rs); err != nil {
			panic(err)
		}
		poll(c.icq, 4)
		poll(bd.b.RCQ, 1)
	}); n != 0 {
		t.Fatalf("posting FastRegister + SEND + Invalidate + Bind + SRQ.Receive through the daemon allocates %.1f times", n)
	}
}

// TestSRQDepthBoundsPostsThroughDaemon: the depth bounds the receives
// outstanding (STATUS_INSUFFICIENT_RESOURCES inline past it); Modify
// raises it up to Cap and lowers it only to the receives outstanding; a
// completed receive frees its place.
func TestSRQDepthBoundsPostsThroughDaemon(t *testing.T) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	s := newSRQBed(t, bd, c, 3, 0, 7651)
	if s.srq.Cap() != 4 {
		t.Fatalf("Cap of a depth-3 SRQ is %d, want 4 (the ring's power of two)", s.srq.Cap())
	}
	sge, _ := c.mr.SGE(0, 64)
	sgl := []ndk.SGE{sge}
	for i := range 3 {
		if err := s.srq.Receive(i, sgl); err != nil {
			t.Fatalf("receive %d of depth 3: %v", i, err)
		}
	}
	if err := s.srq.Receive(nil, sgl); !errors.Is(err, ndk.ErrInsufficientResources) {
		t.Fatalf("a fourth receive on depth 3: %v", err)
	}
	if err := s.srq.Modify(2, 0); !errors.Is(err, ndk.ErrInvalidParameter) {
		t.Fatalf("Modify below the receives outstanding: %v", err)
	}
	if err := s.srq.Modify(s.srq.Cap()+1, 0); !errors.Is(err, ndk.ErrInvalidParameter) {
		t.Fatalf("Modify above Cap: %v", err)
	}
	copy(s.peers[0].mem, "one")
	ps, _ := s.peers[0].mr.SGE(0, 3)
	if err := s.peers[0].qp.Send("one", []ndk.SGE{ps}, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, c.rcq, ndk.StatusSuccess, ndk.OpReceive, 0)
	deadline := time.Now().Add(5 * time.Second)
	for s.srq.Receive(3, sgl) != nil {
		if time.Now().After(deadline) {
			t.Fatal("a completed receive did not free its place")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.srq.Receive(nil, sgl); !errors.Is(err, ndk.ErrInsufficientResources) {
		t.Fatalf("a receive past depth 3 again: %v", err)
	}
	if err := s.srq.Modify(4, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.srq.Receive(4, sgl); err != nil {
		t.Fatalf("a receive after Modify raised the depth to 4: %v", err)
	}
	if err := s.srq.Receive(nil, sgl); !errors.Is(err, ndk.ErrInsufficientResources) {
		t.Fatalf("a fifth outstanding receive on depth 4: %v", err)
	}
}

// TestSRQReceiveUsesFreshFastRegisterThroughDaemon: an SRQ receive into
// memory a FastRegister on another QP registered just before takes its
// token as in process (the relay serves the send rings before the SRQ),
// and a SEND lands in it.
func TestSRQReceiveUsesFreshFastRegisterThroughDaemon(t *testing.T) {
	srqFastRegisterRounds(t, 7661, 20)
}

// TestSRQReceivesFollowTheirFastRegisters: a client that fast-registers
// an MR on one QP and posts an SRQ receive into it, round after round,
// never has the receive reach the daemon's SRQ before the FastRegister
// (whose token the SRQ would refuse, breaking it: the peer's SEND is then
// RNR-NAKed for good). The relay counts an SRQ's records before it reads
// the post bitmap, and moves no record published after the count in that
// pass; before, a receive published between the bitmap read and the SRQ's
// move passed its FastRegister now and then (about one run in three of
// these rounds beside a busy loop).
func TestSRQReceivesFollowTheirFastRegisters(t *testing.T) {
	srqFastRegisterRounds(t, 7667, 3000)
}

func srqFastRegisterRounds(t *testing.T, port uint16, rounds int) {
	bd := newBed(t)
	c := dial(t, bd.sock)
	s := newSRQBed(t, bd, c, 16, 0, port)
	fr := frRounds{fq: s.qps[0], mr: newFastMR(t, c.pd, 1, false), buf: c.mem[57344 : 57344+64],
		recv: s.srq.Receive, peer: s.peers[1], rcq: c.rcq, peerICQ: bd.b.ICQ,
		why: func() string {
			select {
			case st := <-s.notes:
				return fmt.Sprintf("the SRQ's notification: %v", st)
			default:
				return "no SRQ notification"
			}
		}}
	fr.run(t, rounds)
	select {
	case st := <-s.notes:
		t.Fatalf("SRQ notification %v", st)
	default:
	}
}

// TestReceivesFollowTheirFastRegisters: a receive a client posts on a QP
// after a FastRegister, into the memory it registers, takes the fresh
// token as in process, round after round: the relay moves no receive
// before the send records the client published ahead of it, on the same
// QP and on a QP of another word of the post bitmap (slot 64 against 0,
// which the relay used to serve after the first word's receives), and
// after a deferred FastRegister on another QP (which the client marks for
// the relay, though it does not ring). A receive that passed its
// FastRegister would be refused by the daemon's QP and complete with
// STATUS_ACCESS_VIOLATION.
func TestReceivesFollowTheirFastRegisters(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fillers int // QPs made between the receiving QP and the registering one; -1: the same QP
		flags   ndk.OpFlag
	}{{"same QP", -1, 0}, {"QP in another bitmap word", 63, 0}, {"deferred on another QP", 0, ndk.OpFlagDefer}} {
		t.Run(tc.name, func(t *testing.T) {
			bd := newBed(t)
			c := dial(t, bd.sock)
			rq := c.qp // slot 0
			p := bd.connect(t, c, 7671)
			fq := rq
			if tc.fillers >= 0 {
				for range tc.fillers {
					if _, err := c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 1, InitiatorQueueDepth: 1,
						MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				if fq, err = c.pd.CreateQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 16,
					MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}); err != nil {
					t.Fatal(err)
				}
				c.qp = fq // slot fillers+1
				bd.connect(t, c, 7672)
			}
			fr := frRounds{fq: fq, mr: newFastMR(t, c.pd, 1, false), buf: c.mem[57344 : 57344+64],
				flags: tc.flags, recv: rq.Receive, peer: p, rcq: c.rcq, peerICQ: bd.b.ICQ, why: func() string { return "" }}
			fr.run(t, 2000)
		})
	}
}

// frRounds runs rounds of: fq fast-registers mr over buf (with flags
// besides the rights and SILENT_SUCCESS), recv posts a
// receive into it with mr's fresh token, the peer SENDs a numbered
// message, which must land in buf and complete the receive on rcq, and fq
// invalidates mr. why tells what the client was told when a receive does
// not complete.
type frRounds struct {
	fq      *ndk.QP
	mr      *ndk.MR
	buf     []byte
	flags   ndk.OpFlag
	recv    func(ctx any, sgl []ndk.SGE) error
	peer    *peer
	rcq     *ndk.CQ
	peerICQ *ndk.CQ
	why     func() string
}

func (f *frRounds) run(t *testing.T, rounds int) {
	t.Helper()
	for round := range rounds {
		if err := f.fq.FastRegister(nil, f.mr, f.buf, ndk.OpFlagAllowLocalWrite|ndk.OpFlagSilentSuccess|f.flags); err != nil {
			t.Fatal(err)
		}
		rs, _ := f.mr.SGE(0, len(f.buf))
		if err := f.recv(round, []ndk.SGE{rs}); err != nil {
			t.Fatal(err)
		}
		msg := []byte{byte(round), byte(round >> 8), 'f', 'r'}
		copy(f.peer.mem, msg)
		ps, _ := f.peer.mr.SGE(0, len(msg))
		if err := f.peer.qp.Send(nil, []ndk.SGE{ps}, 0); err != nil {
			t.Fatal(err)
		}
		var r [1]ndk.ResultEx
		for start := time.Now(); f.rcq.GetResultsEx(r[:]) == 0; runtime.Gosched() {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("round %d: no receive completion in 5 s; %s", round, f.why())
			}
		}
		if r[0].Status != ndk.StatusSuccess || r[0].RequestContext != round || !bytes.Equal(f.buf[:r[0].BytesTransferred], msg) {
			t.Fatalf("round %d: receive completed %v (context %v) with %q, want success of %d with %q",
				round, r[0].Status, r[0].RequestContext, f.buf[:r[0].BytesTransferred], round, msg)
		}
		wait(t, f.peerICQ, "peer send")
		if err := f.fq.Invalidate(nil, f.mr, ndk.OpFlagSilentSuccess); err != nil {
			t.Fatal(err)
		}
	}
}
