package daemon_test

import (
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
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
	arena, err := shm.NewSegment("refill-test", 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { arena.Close() })
	r.ok(&proto.Request{Op: proto.OpArena, Arena: 1, Size: 4096}, arena.FD())
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
