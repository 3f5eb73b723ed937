package daemon_test

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestUDReceivePostedBeforeThePass: a receive a client published to its
// UD QP's ring takes a datagram that arrives before the relay's pass has
// moved it (here: the client never marks the QP in the post bitmap nor
// rings, so no pass ever would), as a receive posted in process does: the
// engine, finding the daemon's receive queue empty, has the relay move
// the client's receives first (relay.refill). UD has no retry, so
// without it the datagram is dropped and the receive waits for the next.
func TestUDReceivePostedBeforeThePass(t *testing.T) {
	bd := newBed(t)
	r := dialRaw(t, bd.sock)
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
	arena := r.arena(1, 4096)
	const va = 1 << 40
	mr, _ := r.ok(&proto.Request{Op: proto.OpRegister, PD: pd.H, Arena: 1, Len: 4096, VA: va, Flags: uint32(ndk.MRFlagAllowLocalWrite)})
	q := r.udQP(pd.H)
	recv, err := shm.NewProducer(q.seg, q.layout.Recv)
	if err != nil {
		t.Fatal(err)
	}
	rr := proto.Recv{Seq: 7, NSGE: 1}
	rr.SGL[0] = proto.SGE{Addr: va, Length: 4096, Token: mr.Local}
	rr.Encode(recv.Reserve())
	recv.Publish()

	bq, _, bmr := bd.peerUDQP(t, []byte("ping"), 0)
	sge, _ := bmr.SGE(0, 4)
	to := ndk.UDDestination{IP: bd.a.LocalAddress(), MAC: rocev2.MAC(bd.a.MAC()), QPN: q.qpn, QKey: ndk.RDMAUDPQKey}
	if err := bq.SendToWithImmediate("s", []ndk.SGE{sge}, to, 0xfeed, 0); err != nil {
		t.Fatal(err)
	}
	got := q.completion(t, "the receive published before the datagram")
	if ndk.Status(got.Status) != ndk.StatusSuccess || got.Seq != 7 || got.Kind != proto.KindRecv || got.Bytes != ndk.UDGRHSize+4 || got.Flags&proto.CompletionWithImmediate == 0 {
		t.Fatalf("the client's receive completed %+v, want success of seq 7 with %d bytes", got, ndk.UDGRHSize+4)
	}
	if p := arena.Bytes()[ndk.UDGRHSize : ndk.UDGRHSize+4]; string(p) != "ping" {
		t.Fatalf("payload %q, want ping", p)
	}
	for i, e := range bd.a.Stats() {
		if e.UDDropped != 0 {
			t.Fatalf("the daemon's engine %d dropped %d datagrams", i, e.UDDropped)
		}
	}
	bd.healthy(t)
}

// TestUDRefillMovesFastRegistersFirst: a receive into memory that a
// FastRegister posted just before it, on another QP, registers takes a
// datagram that arrives before the relay's pass, as in process. The UD QP
// is on queue 1, whose engine refills it while queue 0's engine, which
// runs the relay, sleeps (the client marks the registering QP but does
// not ring): the refill moves the FastRegister before the receive. Moving
// the receive alone, the daemon's QP refused its token, the receive
// completed STATUS_ACCESS_VIOLATION and the datagram was dropped.
func TestUDRefillMovesFastRegistersFirst(t *testing.T) {
	bd := newBedQueues(t, daemon.Config{}, 0o600, 2)
	r := dialRaw(t, bd.sock)
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
	arena := r.arena(1, 4096)
	fast, _ := r.ok(&proto.Request{Op: proto.OpInitFastMR, PD: pd.H, Depth: 1})
	fq := r.qp(pd.H)
	bd.peerQP(t, r, fq)
	var q *rawQP
	for range 4 {
		u, m := r.qpWith(proto.Request{Op: proto.OpCreateQP, PD: pd.H, Depth: 16, SendDepth: 16, RecvSGE: 1, SendSGE: 1,
			UD: true, QKey: ndk.RDMAUDPQKey})
		if m.Queue == 1 {
			q = u
			break
		}
	}
	if q == nil {
		t.Fatal("no UD QP on queue 1 in four")
	}
	recv, err := shm.NewProducer(q.seg, q.layout.Recv)
	if err != nil {
		t.Fatal(err)
	}
	bq, _, bmr := bd.peerUDQP(t, []byte("ping"), 0)
	sge, _ := bmr.SGE(0, 4)
	to := ndk.UDDestination{IP: bd.a.LocalAddress(), MAC: rocev2.MAC(bd.a.MAC()), QPN: q.qpn, QKey: ndk.RDMAUDPQKey}

	// Fresh keys for the FastRegister, as a client draws them.
	mask := uint32(1)<<fast.KeyBits - 1
	local := fast.Local&^mask | (fast.Local+1)&mask
	remote := fast.Remote&^mask | (fast.Remote+1)&mask
	if remote&mask == local&mask {
		remote = fast.Remote&^mask | (fast.Remote+2)&mask
	}
	const va = 1 << 40
	for round := range 20 {
		// Queue 0's engine goes to sleep.
		time.Sleep(20 * time.Millisecond)
		fr := proto.Send{Op: proto.OpFastRegister, Seq: uint64(2 * round), Flags: uint32(ndk.OpFlagAllowLocalWrite | ndk.OpFlagSilentSuccess),
			Handle: fast.H, Arena: 1, RemoteAddr: va, Length: 4096, InvToken: local, RemoteToken: remote}
		fr.Encode(fq.send.Reserve())
		fq.send.Publish()
		w, bit := proto.SlotWord(fq.slot)
		r.sess.Word64(proto.PostBitmap + 8*w).Or(bit)
		rr := proto.Recv{Seq: uint64(round), NSGE: 1}
		rr.SGL[0] = proto.SGE{Addr: va, Length: 4096, Token: local}
		rr.Encode(recv.Reserve())
		recv.Publish()
		if err := bq.SendTo(nil, []ndk.SGE{sge}, to, 0); err != nil {
			t.Fatal(err)
		}
		got := q.completion(t, "the receive into the fresh registration")
		if ndk.Status(got.Status) != ndk.StatusSuccess || got.Seq != uint64(round) || got.Bytes != ndk.UDGRHSize+4 {
			t.Fatalf("round %d: the receive completed %v (seq %d, %d bytes), want success of seq %d with %d bytes",
				round, ndk.Status(got.Status), got.Seq, got.Bytes, round, ndk.UDGRHSize+4)
		}
		if p := arena.Bytes()[ndk.UDGRHSize : ndk.UDGRHSize+4]; string(p) != "ping" {
			t.Fatalf("round %d: payload %q, want ping", round, p)
		}
		clear(arena.Bytes())
		// Invalidate, for the next round's keys to be fresh again.
		inv := proto.Send{Op: proto.OpInvalidate, Seq: uint64(2*round + 1), Flags: uint32(ndk.OpFlagSilentSuccess), InvToken: local}
		inv.Encode(fq.send.Reserve())
		fq.send.Publish()
		r.post(fq)
		local, remote = local&^mask|(local+1)&mask, remote&^mask|(remote+1)&mask
		if remote&mask == local&mask {
			remote = remote&^mask | (remote+1)&mask
		}
	}
	for i, e := range bd.a.Stats() {
		if e.UDDropped != 0 {
			t.Fatalf("the daemon's engine %d dropped %d datagrams", i, e.UDDropped)
		}
	}
	bd.healthy(t)
}
