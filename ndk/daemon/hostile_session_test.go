package daemon_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// The classes of client input that end the client's own session and
// nothing else: each test shows the daemon still serving a well-behaved
// client afterwards, the hostile session closed, and the end counted
// under its reason; a control shows that the same input within what the
// client was given is served.

// ended waits for the hostile client's socket to close, the daemon's
// answer to input no correct client sends.
func (r *raw) ended(t *testing.T) {
	t.Helper()
	buf := make([]byte, proto.MaxMessage)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_ = r.c.SetReadDeadline(deadline)
		n, _, _, _, err := r.c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return
		}
	}
	t.Fatal("the daemon did not end the hostile session")
}

// endedFor returns how many sessions the daemon ended for reason.
func (bd *bed) endedFor(t *testing.T, reason string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var st daemon.Status
	if err := daemon.Query(ctx, bd.sock, daemon.OpAdminStatus, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ended[reason]
}

// TestHostileBitmapSlot: a post or arm bit for a QP slot beyond every slot
// the session was given indexes nothing of the daemon's: the session ends,
// the daemon and the other sessions go on. Control: a bit of a freed slot
// (a post racing a close, which a correct client may make) is ignored.
func TestHostileBitmapSlot(t *testing.T) {
	bd := newBed(t)
	for _, bitmap := range []struct {
		name string
		off  int
	}{{"post", proto.PostBitmap}, {"arm", proto.ArmBitmap}} {
		t.Run(bitmap.name, func(t *testing.T) {
			before := bd.endedFor(t, "ring")
			r := dialRaw(t, bd.sock)
			pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
			q := r.qp(pd.H)
			gone := r.qp(pd.H)
			r.ok(&proto.Request{Op: proto.OpCloseQP, H: gone.h})
			// Control: the freed slot's bit, then the live QP's.
			w, bit := proto.SlotWord(gone.slot)
			r.sess.Word64(bitmap.off + 8*w).Or(bit)
			r.post(q)
			r.bell.Ring()
			r.ok(&proto.Request{Op: proto.OpCreatePD})
			if n := bd.endedFor(t, "ring"); n != before {
				t.Fatalf("a freed slot's bit ended the session (%d ended)", n-before)
			}
			// The last bit of the first word: slot 63 of a session given 2.
			r.sess.Word64(bitmap.off).Or(1 << 63)
			r.bell.Ring()
			r.ended(t)
			bd.healthy(t)
			if n := bd.endedFor(t, "ring"); n != before+1 {
				t.Fatalf("sessions ended for ring input: %d, want %d", n, before+1)
			}
		})
	}
}

// TestNoPageSharedBetweenSessions: a session's hello hands out its
// relay's eventfd and its own session segment, nothing another session
// maps: two sessions' segments are distinct memfds.
func TestNoPageSharedBetweenSessions(t *testing.T) {
	bd := newBed(t)
	inode := func(r *raw) uint64 {
		var st unix.Stat_t
		if err := unix.Fstat(r.sess.FD(), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	a, b := dialRaw(t, bd.sock), dialRaw(t, bd.sock)
	if inode(a) == inode(b) {
		t.Fatal("two sessions were handed the same segment")
	}
}

// TestHostileBellCannotStallOthers: a client that writes its doorbell's
// flags to say "the engine is awake, a ring is on its way" (sleeping 0,
// pending 1), over and over, withholds wake-ups from its own session at
// most. Another client's READs, each posted while the engine may sleep,
// complete as always.
func TestHostileBellCannotStallOthers(t *testing.T) {
	bd := newBed(t)
	h := dialRaw(t, bd.sock)
	pending, sleeping := h.sess.Word32(proto.RelayBell), h.sess.Word32(proto.RelayBell+4)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			select {
			case <-stop:
				return
			default:
			}
			sleeping.Store(0)
			pending.Store(1)
			runtime.Gosched()
		}
	}()
	defer func() { close(stop); <-done }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := ndk.Dial(ctx, bd.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	pd, err := a.CreatePD()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := a.Memory(4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegisterMR(mem, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := a.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	bpd, _ := bd.b.CreatePD()
	bcq, _ := bd.b.CreateCQ(16, nil)
	bq, err := bpd.CreateQP(ndk.QPConfig{ReceiveCQ: bcq, InitiatorCQ: bcq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte{0x5A}, 4096)
	bmr, err := bpd.RegisterMR(src, ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if err := bq.ConnectOOB(qp.LocalEndpoint(), ndk.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := qp.ConnectOOB(bq.LocalEndpoint(), ndk.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	sge, _ := mr.SGE(0, 64)
	res := make([]ndk.Result, 1)
	for i := range 50 {
		// Long enough for the engine to finish spinning and sleep.
		time.Sleep(2 * time.Millisecond)
		clear(mem[:64])
		if err := qp.Read(i, []ndk.SGE{sge}, bmr.Addr()+uint64(i), bmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for cq.GetResults(res) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("READ %d: no completion in 2 s beside a client that forges its doorbell", i)
			}
			runtime.Gosched()
		}
		if res[0].Status != ndk.StatusSuccess || !bytes.Equal(mem[:64], src[i:i+64]) {
			t.Fatalf("READ %d: status %v, bytes %x", i, res[0].Status, mem[:8])
		}
	}
}

// FuzzSharedWords writes each input into the words a client shares with
// the daemon outside its work records: the session segment (published
// WRITE counts, post and arm bitmaps, both doorbells, the event ring's
// indices), its QP segment's words and ring indices, and its CQ segment's
// arm and status words and ring indices, then rings the relay. Whatever
// the words say, the daemon goes on serving, no handling of them panics
// (a contained panic still counts as a finding), and another client's
// memory is untouched. Each input is a list of 11-byte writes: a target
// byte, a little-endian uint16 word index and a uint64 value.
func FuzzSharedWords(f *testing.F) {
	put := func(target byte, idx uint16, v uint64) []byte {
		b := []byte{target, byte(idx), byte(idx >> 8)}
		return binary.LittleEndian.AppendUint64(b, v)
	}
	f.Add(put(1, 0, 1<<63))                                        // post bit of slot 63
	f.Add(put(2, 1, ^uint64(0)))                                   // arm bits of slots 64-127
	f.Add(append(put(4, 0, 1), put(4, 0, 0)...))                   // the relay's doorbell flags
	f.Add(put(6, 1, 1<<40))                                        // a CQ ring consumer index far ahead
	f.Add(append(put(5, 0, 0xffffffff), put(7, 0, 0xffffffff)...)) // QP state, CQ arm word
	bd := newBed(f)
	vmem, _ := bd.victimClient(f)
	var runs atomic.Uint64
	f.Fuzz(func(t *testing.T, in []byte) {
		r := dialRaw(t, bd.sock)
		pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
		q := r.qp(pd.H)
		bd.peerQP(t, r, q)
		cl := proto.NewCQLayout(q.cqRing.Slots())
		regions := []struct {
			seg   *shm.Segment
			base  int
			words int
		}{
			{r.sess, 0, proto.MaxQueues},
			{r.sess, proto.PostBitmap, 64},
			{r.sess, proto.ArmBitmap, 64},
			{r.sess, proto.EventBell, shm.DoorbellSize / 8},
			{r.sess, proto.RelayBell, shm.DoorbellSize / 8},
			{q.seg, q.layout.Words, shm.CacheLine / 8},
			{q.cqSeg, cl.Ring.Offset, shm.RingHeaderSize / 8},
			{q.cqSeg, cl.Words, shm.CacheLine / 8},
			{r.sess, proto.Events, shm.RingHeaderSize / 8},
			{q.seg, q.layout.Send.Offset, shm.RingHeaderSize / 8},
		}
		for ; len(in) >= 11; in = in[11:] {
			g := regions[int(in[0])%len(regions)]
			idx := int(binary.LittleEndian.Uint16(in[1:])) % g.words
			g.seg.Word64(g.base + 8*idx).Store(binary.LittleEndian.Uint64(in[3:]))
		}
		r.bell.Ring()
		bd.afterFuzzedSession(t, r, vmem, &runs)
	})
}
