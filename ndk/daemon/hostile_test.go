package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// bed is a daemon serving A's adapter, and an in-process adapter on B.
type bed struct {
	pair *harness.Pair
	srv  *daemon.Server
	sock string
	a, b *ndk.Adapter
}

func newBed(t testing.TB) *bed { return newBedWith(t, daemon.Config{}, 0o600) }

// newBedWith is newBed with the daemon's config and its socket's mode.
func newBedWith(t testing.TB, cfg daemon.Config, perm os.FileMode) *bed {
	t.Helper()
	return newBedQueues(t, cfg, perm, 1)
}

// newBedQueues is newBedWith on a veth pair of as many queues, each
// adapter running an engine on each.
func newBedQueues(t testing.TB, cfg daemon.Config, perm os.FileMode, queues int) *bed {
	t.Helper()
	p := harness.New(t, harness.Config{Queues: queues})
	bd := &bed{pair: p, sock: filepath.Join(t.TempDir(), "d.sock")}
	if err := p.A.Do(func() error {
		var err error
		bd.a, err = ndk.Open(p.A.Link, ndk.Options{Queues: queues})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.B.Do(func() error {
		var err error
		bd.b, err = ndk.Open(p.B.Link, ndk.Options{Queues: queues})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ln, err := daemon.Listen(bd.sock, perm, -1)
	if err != nil {
		t.Fatal(err)
	}
	bd.srv = daemon.New(bd.a, cfg)
	served := make(chan error, 1)
	go func() { served <- bd.srv.Serve(ln) }()
	t.Cleanup(func() {
		bd.srv.Close()
		<-served
		bd.a.Close()
		bd.b.Close()
	})
	return bd
}

// raw is a client that speaks the protocol by hand, as a hostile one would.
type raw struct {
	t    testing.TB
	c    *net.UnixConn
	next uint64
	bell *shm.Doorbell
	sess *shm.Segment
}

func dialRaw(t testing.TB, sock string) *raw {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, c: c}
	t.Cleanup(func() { c.Close() })
	m, fds := r.call(&proto.Request{Op: proto.OpHello, Version: proto.Version})
	if m.Status != 0 || len(fds) != 2 {
		t.Fatalf("hello: %+v, %d descriptors", m, len(fds))
	}
	if r.sess, err = shm.MapSegment(fds[1], proto.SessionSize); err != nil {
		t.Fatal(err)
	}
	if r.bell, err = shm.NewDoorbell(r.sess, proto.RelayBell, fds[0]); err != nil {
		t.Fatal(err)
	}
	// A fuzz worker makes thousands of these: each must give back its
	// descriptors and mappings.
	t.Cleanup(func() {
		r.bell.Close()
		r.sess.Close()
	})
	return r
}

// call sends req and returns its reply, skipping events.
func (r *raw) call(req *proto.Request, fds ...int) (*proto.Message, []int) {
	r.t.Helper()
	r.next++
	req.ID = r.next
	b, _ := json.Marshal(req)
	if err := shm.SendFDs(r.c, b, fds...); err != nil {
		r.t.Fatal(err)
	}
	buf := make([]byte, proto.MaxMessage)
	for {
		_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, rfds, err := shm.RecvFDs(r.c, buf, shm.MaxFDs)
		if err != nil || n == 0 {
			r.t.Fatalf("%s: no reply: %v", req.Op, err)
		}
		var m proto.Message
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			r.t.Fatal(err)
		}
		if m.ID == req.ID {
			return &m, rfds
		}
	}
}

func (r *raw) ok(req *proto.Request, fds ...int) (*proto.Message, []int) {
	r.t.Helper()
	m, rfds := r.call(req, fds...)
	if m.Status != 0 {
		r.t.Fatalf("%s: status %#x %s", req.Op, m.Status, m.Msg)
	}
	return m, rfds
}

// arena shares a new segment of size bytes with the daemon as arena id;
// the segment lives until the test ends.
func (r *raw) arena(id uint32, size int) *shm.Segment {
	r.t.Helper()
	seg, err := shm.NewSegment("raw-arena", size)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { seg.Close() })
	r.ok(&proto.Request{Op: proto.OpArena, Arena: id, Size: uint64(size)}, seg.FD())
	return seg
}

// post marks q in the session's post bitmap and rings the engine, as a
// client does after publishing records.
func (r *raw) post(q *rawQP) {
	w, bit := proto.SlotWord(q.slot)
	r.sess.Word64(proto.PostBitmap + 8*w).Or(bit)
	r.bell.Ring()
}

// rawQP is a QP a raw client made, with its rings mapped.
type rawQP struct {
	h      uint32
	slot   int
	qpn    uint32
	psn    uint32
	seg    *shm.Segment
	send   *shm.Producer
	cqRing *shm.Consumer
	cqSeg  *shm.Segment
	cq     uint32
	layout proto.QPLayout
}

func (r *raw) qp(pd uint32) *rawQP {
	r.t.Helper()
	q, _ := r.qpWith(proto.Request{Op: proto.OpCreateQP, PD: pd, Depth: 16, SendDepth: 16, RecvSGE: 2, SendSGE: 2})
	return q
}

// qpWith makes a CQ and a QP of req (its CQ handles filled in) and maps
// both rings, returning the QP and create_qp's reply.
func (r *raw) qpWith(req proto.Request) (*rawQP, *proto.Message) {
	r.t.Helper()
	cm, cfds := r.ok(&proto.Request{Op: proto.OpCreateCQ, Depth: 64})
	cqSeg, err := shm.MapSegment(cfds[0], cm.Seg.Size)
	if err != nil {
		r.t.Fatal(err)
	}
	cring, err := shm.NewConsumer(cqSeg, proto.NewCQLayout(cm.Seg.Slots).Ring)
	if err != nil {
		r.t.Fatal(err)
	}
	req.RecvCQ, req.SendCQ = cm.H, cm.H
	m, fds := r.ok(&req)
	seg, err := shm.MapSegment(fds[0], m.Seg.Size)
	if err != nil {
		r.t.Fatal(err)
	}
	l := proto.NewQPLayout(m.Seg.SendSlots, m.Seg.RecvSlots)
	send, err := shm.NewProducer(seg, l.Send)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		seg.Close()
		cqSeg.Close()
	})
	return &rawQP{h: m.H, slot: m.Slot, qpn: m.QPN, psn: m.PSN, seg: seg, send: send, cqRing: cring, cqSeg: cqSeg, layout: l, cq: cm.H}, m
}

// completion waits for the next entry of q's CQ ring.
func (q *rawQP) completion(t *testing.T, what string) proto.Completion {
	t.Helper()
	var c proto.Completion
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b := q.cqRing.Peek(); b != nil {
			c.Decode(b)
			q.cqRing.Release()
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completion for %s in 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// healthy checks that the daemon still serves: a well-behaved client
// opens, registers and connects, and moves verified bytes.
func (bd *bed) healthy(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := ndk.Dial(ctx, bd.sock)
	if err != nil {
		t.Fatalf("daemon no longer serves: %v", err)
	}
	defer a.Close()
	pd, err := a.CreatePD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Memory(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateCQ(16, nil); err != nil {
		t.Fatal(err)
	}
	_ = pd
}

// peerQP is a QP on B connected out of band to a raw client's QP.
func (bd *bed) peerQP(t *testing.T, r *raw, q *rawQP) (*ndk.QP, []byte, *ndk.MR) {
	t.Helper()
	pd, err := bd.b.CreatePD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := bd.b.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	bq, err := pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	mem := bytes.Repeat([]byte{0xEE}, 8192)
	mr, err := pd.RegisterMR(mem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteRead|ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bq.Close()
		_ = mr.Deregister()
		pd.Close()
		cq.Close()
	})
	local := ndk.Endpoint{IP: bd.a.LocalAddress(), MAC: bd.a.MAC(), QPN: q.qpn, PSN: q.psn}
	if err := bq.ConnectOOB(local, ndk.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	be := bq.LocalEndpoint()
	r.ok(&proto.Request{Op: proto.OpConnectOOB, H: q.h, Remote: &proto.Endpoint{IP: be.IP.String(), MAC: be.MAC.String(), QPN: be.QPN, PSN: be.PSN}})
	return bq, mem, mr
}

// TestHostileRingIndexBreaksOnlyThatQP: a client that stores an index no
// correct producer could store gets its QP flushed; the daemon, and
// everyone else, goes on.
func TestHostileRingIndexBreaksOnlyThatQP(t *testing.T) {
	bd := newBed(t)
	r := dialRaw(t, bd.sock)
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
	q := r.qp(pd.H)
	// A zero-length receive, which the flush must cancel.
	recv, err := shm.NewProducer(q.seg, q.layout.Recv)
	if err != nil {
		t.Fatal(err)
	}
	rr := proto.Recv{Seq: 41}
	rr.Encode(recv.Reserve())
	recv.Publish()
	prod := q.seg.Word32(q.layout.Send.Offset)
	prod.Store(uint32(q.layout.Send.Slots) + 1000) // more records than slots
	r.post(q)
	c := q.completion(t, "the broken QP's receive (QP not flushed?)")
	if ndk.Status(c.Status) != ndk.StatusCancelled || c.Seq != 41 || c.Kind != proto.KindRecv {
		t.Fatalf("receive of the broken QP completed %#x seq %d kind %d, want CANCELLED 41 receive", c.Status, c.Seq, c.Kind)
	}
	bd.healthy(t)
	// The hostile session itself still answers its control requests.
	r.ok(&proto.Request{Op: proto.OpCreatePD})
	if st := bd.status(t); st.BrokenRings != 1 {
		t.Fatalf("broken rings counted: %d, want 1", st.BrokenRings)
	}
}

// TestHostileRecords: malformed records (too many SGEs, unknown op) break
// the QP; a forged token (another client's region) completes with
// STATUS_ACCESS_VIOLATION and touches no byte of it.
func TestHostileRecords(t *testing.T) {
	bd := newBed(t)

	// The victim: a well-behaved client's registered memory.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	va, err := ndk.Dial(ctx, bd.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer va.Close()
	vpd, _ := va.CreatePD()
	vmem, _ := va.Memory(4096)
	for i := range vmem {
		vmem[i] = 0x5A
	}
	vmr, err := vpd.RegisterMR(vmem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteRead|ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}

	r := dialRaw(t, bd.sock)
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
	q := r.qp(pd.H)
	_, pmem, pmr := bd.peerQP(t, r, q)

	// A READ of the peer's memory into the victim's region, by its
	// tokens: the daemon's check refuses it (another PD).
	rec := proto.Send{Op: 4, NSGE: 1, Seq: 7, RemoteAddr: pmr.Addr(), RemoteToken: pmr.RemoteToken()}
	rec.SGL[0] = proto.SGE{Addr: vmr.Addr(), Length: 4096, Token: vmr.LocalToken()}
	slot := q.send.Reserve()
	rec.Encode(slot)
	q.send.Publish()
	r.post(q)
	c := q.completion(t, "the forged-token READ")
	if ndk.Status(c.Status) != ndk.StatusAccessViolation || c.Seq != 7 {
		t.Fatalf("forged-token READ completed %#x seq %d, want STATUS_ACCESS_VIOLATION seq 7", c.Status, c.Seq)
	}
	time.Sleep(20 * time.Millisecond)
	for i, b := range vmem {
		if b != 0x5A {
			t.Fatalf("victim byte %d changed to %#x", i, b)
		}
	}

	// A record with 200 SGEs: the QP is flushed and read no more.
	bad := proto.Send{Op: 1, NSGE: 200, Seq: 8}
	slot = q.send.Reserve()
	bad.Encode(slot)
	slot[1] = 200
	q.send.Publish()
	r.post(q)
	time.Sleep(50 * time.Millisecond)
	for i, b := range pmem {
		if b != 0xEE {
			t.Fatalf("peer byte %d changed to %#x", i, b)
		}
	}
	bd.healthy(t)
}

// TestHostileControl: handles of other clients, unsealed or short memfds,
// registrations outside an arena, and garbage are refused with a status;
// none of it costs the daemon.
func TestHostileControl(t *testing.T) {
	bd := newBed(t)
	r1, r2 := dialRaw(t, bd.sock), dialRaw(t, bd.sock)
	pd1, _ := r1.ok(&proto.Request{Op: proto.OpCreatePD})
	for _, req := range []*proto.Request{
		{Op: proto.OpClosePD, H: pd1.H},                         // r1's PD through r2
		{Op: proto.OpCreateQP, PD: pd1.H, RecvCQ: 1, SendCQ: 1}, // idem
		{Op: proto.OpCreateCQ, Depth: 1 << 30},
		{Op: proto.OpRegister, PD: pd1.H, Arena: 1, Len: 4096},
		{Op: proto.OpListen, H: 99, Addr: "nonsense"},
		{Op: "no such op"},
		{Op: proto.OpHello, Version: proto.Version}, // a second hello
	} {
		if m, fds := r2.call(req); m.Status == 0 {
			t.Errorf("%+v accepted", req)
		} else if len(fds) != 0 {
			t.Errorf("%s: refusal carried descriptors", req.Op)
		}
	}
	// An unsealed memfd, and a sealed one smaller than claimed.
	fd, err := unix.MemfdCreate("plain", 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Ftruncate(fd, 4096)
	if m, _ := r2.call(&proto.Request{Op: proto.OpArena, Arena: 1, Size: 4096}, fd); m.Status == 0 {
		t.Error("unsealed memfd accepted as an arena")
	}
	unix.Close(fd)
	seg, err := shm.NewSegment("small", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	if m, _ := r2.call(&proto.Request{Op: proto.OpArena, Arena: 2, Size: 1 << 20}, seg.FD()); m.Status == 0 {
		t.Error("arena larger than its memfd accepted")
	}
	r2.ok(&proto.Request{Op: proto.OpArena, Arena: 3, Size: 4096}, seg.FD())
	pd2, _ := r2.ok(&proto.Request{Op: proto.OpCreatePD})
	if m, _ := r2.call(&proto.Request{Op: proto.OpRegister, PD: pd2.H, Arena: 3, Off: 4000, Len: 200, VA: 0x1000}); m.Status == 0 {
		t.Error("registration past the arena's end accepted")
	}
	// Garbage bytes end the session; the daemon goes on.
	if _, err := r2.c.Write([]byte("{{{ not json")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for bd.srv.Clients() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d clients after one sent garbage, want 1", bd.srv.Clients())
		}
		time.Sleep(5 * time.Millisecond)
	}
	r1.ok(&proto.Request{Op: proto.OpCreatePD})
	bd.healthy(t)
}

// FuzzControlMessages sends each input, split at newlines, as control
// messages of a fresh session after its hello, then checks that the
// daemon still serves and drops the session when the client goes.
func FuzzControlMessages(f *testing.F) {
	for _, s := range []string{
		`{"op":"create_pd"}`,
		`{"op":"create_cq","Depth":8}` + "\n" + `{"op":"create_pd"}` + "\n" + `{"op":"create_qp","pd":2,"rcq":1,"scq":1,"Depth":4,"SendDepth":4}`,
		`{"op":"register","pd":1,"Arena":1,"Len":99}`,
		`{"op":"create_connector"}` + "\n" + `{"op":"connect","h":1,"qp":2,"Addr2":"198.18.0.2:1","Timeout":1000000}`,
		`{"op":"create_listener"}` + "\n" + `{"op":"listen","h":1,"Addr":"0.0.0.0:0"}` + "\n" + `{"op":"close_listener","h":1}`,
		`{"op":"flush_qp","h":4294967295}`,
		`{"op":"cancel","Target":1}`,
		`{"op":"stats"}`,
		`{"op":"create_pd"}` + "\n" + `{"op":"create_srq","pd":1,"Depth":4,"RecvSGE":1,"Threshold":2}` + "\n" + `{"op":"modify_srq","h":2,"Depth":8,"Threshold":1}` + "\n" + `{"op":"srq_len","h":2}` + "\n" + `{"op":"close_srq","h":2}` + "\n" + `{"op":"srq_len","h":2}`,
		`{"op":"create_pd"}` + "\n" + `{"op":"create_mw","pd":1}` + "\n" + `{"op":"close_mw","h":2}` + "\n" + `{"op":"close_mw","h":2}`,
		`{"op":"create_pd"}` + "\n" + `{"op":"init_fast_mr","pd":1,"Depth":1,"Flags":1}` + "\n" + `{"op":"init_fast_mr","h":2,"Depth":99999999}` + "\n" + `{"op":"init_fast_mr","h":1,"Depth":1}`,
	} {
		f.Add([]byte(s))
	}
	bd := newBed(f)
	var n atomic.Uint64
	f.Fuzz(func(t *testing.T, in []byte) {
		r := dialRaw(t, bd.sock)
		for _, msg := range bytes.Split(in, []byte("\n")) {
			if len(msg) == 0 || len(msg) > proto.MaxMessage {
				continue
			}
			if _, err := r.c.Write(msg); err != nil {
				break
			}
		}
		// Read what comes back for a moment, then leave.
		buf := make([]byte, proto.MaxMessage)
		_ = r.c.SetReadDeadline(time.Now().Add(2 * time.Millisecond))
		for {
			if _, _, err := shm.RecvFDs(r.c, buf, shm.MaxFDs); err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					break
				}
				break
			}
		}
		r.c.Close()
		if n.Add(1)%64 == 0 {
			bd.healthy(t)
		}
		deadline := time.Now().Add(10 * time.Second)
		for bd.srv.Clients() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("session not dropped 10 s after the client left (input %q)", in)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// FuzzRingRecords writes each input into a fresh client's work rings as
// records (send records, then receive records, then a producer index the
// input picks), marks the QP and rings the engine, and checks that the
// daemon goes on serving and that another client's memory, whose tokens
// the input may name, is never touched.
func FuzzRingRecords(f *testing.F) {
	seed := make([]byte, proto.SendSize)
	(&proto.Send{Op: 3, NSGE: 1, RemoteAddr: 1 << 40, RemoteToken: 77}).Encode(seed)
	f.Add(seed, []byte{}, uint32(0))
	f.Add([]byte{}, make([]byte, proto.RecvSize), uint32(0))
	f.Add(seed, seed[:proto.RecvSize], uint32(1<<31))
	// Local operations, on the window (handle 4) and fast MR (handle 5)
	// each fuzzed client creates, and on handles it does not have.
	for _, rec := range []proto.Send{
		{Op: proto.OpBind, Handle: 4, RemoteAddr: 1 << 20, Length: 64, RemoteToken: 0x1234, Flags: 0x8},
		{Op: proto.OpBind, Handle: 5, Length: 1 << 40},
		{Op: proto.OpFastRegister, Handle: 5, Arena: 1, ArenaOff: 4000, Length: 200, RemoteAddr: 1 << 30, InvToken: 1, RemoteToken: 2, Flags: 0x30},
		{Op: proto.OpFastRegister, Handle: 4, Arena: 9, Length: 1},
		{Op: proto.OpInvalidate, InvToken: 0xffffffff},
	} {
		b := make([]byte, proto.SendSize)
		rec.Encode(b)
		f.Add(b, []byte{}, uint32(0))
	}
	bd := newBed(f)
	vmem, vmr := bd.victimClient(f)
	var runs atomic.Uint64
	f.Fuzz(func(t *testing.T, sends, recvs []byte, prodTweak uint32) {
		r := dialRaw(t, bd.sock)
		pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
		q := r.qp(pd.H)
		bd.peerQP(t, r, q)
		r.ok(&proto.Request{Op: proto.OpCreateMW, PD: pd.H})
		r.ok(&proto.Request{Op: proto.OpInitFastMR, PD: pd.H, Depth: 1, Flags: 1})
		r.arena(1, 4096)
		put := func(l shm.RingLayout, size int, in []byte) {
			p, err := shm.NewProducer(q.seg, l)
			if err != nil {
				t.Fatal(err)
			}
			for len(in) > 0 {
				slot := p.Reserve()
				if slot == nil {
					break
				}
				n := copy(slot, in)
				in = in[n:]
				// Aim SGEs at the victim's memory with its tokens,
				// the likeliest way to reach it.
				if size == proto.SendSize && n >= 80 {
					slot[64+12] = byte(vmr.LocalToken())
					slot[64+13] = byte(vmr.LocalToken() >> 8)
					slot[64+14] = byte(vmr.LocalToken() >> 16)
					slot[64+15] = byte(vmr.LocalToken() >> 24)
				}
			}
			p.Publish()
		}
		put(q.layout.Send, proto.SendSize, sends)
		put(q.layout.Recv, proto.RecvSize, recvs)
		if prodTweak != 0 {
			q.seg.Word32(q.layout.Send.Offset).Add(prodTweak)
		}
		r.post(q)
		bd.afterFuzzedSession(t, r, vmem, &runs)
	})
}

// victimClient is a well-behaved client of bd's daemon, open until the
// test ends, with 4096 bytes of 0xA5 registered for every access: memory a
// hostile client's input may name but must never change.
func (bd *bed) victimClient(t testing.TB) ([]byte, *ndk.MR) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	va, err := ndk.Dial(ctx, bd.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(va.Close)
	vpd, _ := va.CreatePD()
	vmem, _ := va.Memory(4096)
	for i := range vmem {
		vmem[i] = 0xA5
	}
	vmr, err := vpd.RegisterMR(vmem, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteRead|ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	return vmem, vmr
}

// afterFuzzedSession lets r's input act for a moment, closes r and checks
// that its session ended (the victim's stays), that no session's handling
// panicked, that the victim's memory is untouched, and every 32nd run that
// the daemon still serves a well-behaved client.
func (bd *bed) afterFuzzedSession(t *testing.T, r *raw, vmem []byte, runs *atomic.Uint64) {
	t.Helper()
	time.Sleep(2 * time.Millisecond)
	r.c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for bd.srv.Clients() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the fuzzed session was not dropped")
		}
		time.Sleep(time.Millisecond)
	}
	if n := bd.endedFor(t, "panic"); n != 0 {
		t.Fatalf("a session's handling panicked (%d contained): a missing check", n)
	}
	for i, b := range vmem {
		if b != 0xA5 {
			t.Fatalf("victim byte %d changed to %#x", i, b)
		}
	}
	if runs.Add(1)%32 == 0 {
		bd.healthy(t)
	}
}

// TestNotificationsWithoutEventfd: a client that brings no eventfd with
// its hello gets its CQ notifications as messages on the socket.
func TestNotificationsWithoutEventfd(t *testing.T) {
	bd := newBed(t)
	r := dialRaw(t, bd.sock)
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
	q := r.qp(pd.H)
	bq, _, bmr := bd.peerQP(t, r, q)
	recv, err := shm.NewProducer(q.seg, q.layout.Recv)
	if err != nil {
		t.Fatal(err)
	}
	rr := proto.Recv{Seq: 1} // a zero-length receive
	rr.Encode(recv.Reserve())
	recv.Publish()
	r.post(q)
	// Arm the CQ (ANY), then have the peer send.
	cl := proto.NewCQLayout(64)
	q.cqSeg.Word32(cl.Words).Store(3)
	r.bell.Ring()
	s, _ := bmr.SGE(0, 0)
	if err := bq.Send(nil, []ndk.SGE{s}, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, proto.MaxMessage)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_ = r.c.SetReadDeadline(deadline)
		n, _, err := shm.RecvFDs(r.c, buf, shm.MaxFDs)
		if err != nil {
			t.Fatalf("no CQ notification on the socket: %v", err)
		}
		var m proto.Message
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			t.Fatal(err)
		}
		if m.Ev == proto.EvCQ && m.H == q.cq {
			return
		}
	}
}
