package daemon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// TestHostileLocalRecords: Bind, FastRegister and Invalidate records that
// name what is not the client's own (a handle never given out, or of
// another type, another client's MR or fast MR, memory outside its
// arenas, the token keys it has now) complete with an error status and
// touch nothing; an SRQ record no correct client writes ends that SRQ
// with STATUS_INTERNAL_ERROR. The daemon, and the victim, go on.
func TestHostileLocalRecords(t *testing.T) {
	bd := newBed(t)

	vmem, vmr, vfast := victim(t, bd)

	r := dialRaw(t, bd.sock)
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
	q := r.qp(pd.H)
	_, pmem, _ := bd.peerQP(t, r, q)
	mw, _ := r.ok(&proto.Request{Op: proto.OpCreateMW, PD: pd.H})
	fast, _ := r.ok(&proto.Request{Op: proto.OpInitFastMR, PD: pd.H, Depth: 1, Flags: 1})
	r.arena(1, 8192)

	seq := uint64(100)
	post := func(what string, rec proto.Send, want ndk.Status) {
		t.Helper()
		seq++
		rec.Seq = seq
		slot := q.send.Reserve()
		if slot == nil {
			t.Fatal("send ring full")
		}
		rec.Encode(slot)
		q.send.Publish()
		r.post(q)
		c := q.completion(t, what)
		if ndk.Status(c.Status) != want || c.Seq != seq {
			t.Fatalf("%s completed %#x seq %d, want %v seq %d", what, c.Status, c.Seq, want, seq)
		}
	}
	bind := proto.Send{Op: proto.OpBind, Flags: uint32(ndk.OpFlagAllowRemoteRead), RemoteAddr: vmr.Addr(), Length: 64}
	b := bind
	b.Handle, b.InvToken = 9999, vmr.LocalToken()
	post("a Bind of a window never given out", b, ndk.StatusInvalidHandle)
	b.Handle = pd.H
	post("a Bind of a PD handle", b, ndk.StatusInvalidHandle)
	b.Handle = mw.H
	post("a Bind to another client's MR", b, ndk.StatusAccessViolation)

	fr := proto.Send{Op: proto.OpFastRegister, Handle: fast.H, Arena: 1, RemoteAddr: 0x10000, Length: 64,
		Flags: uint32(ndk.OpFlagAllowRemoteWrite)}
	f := fr
	f.Arena = 77
	post("a FastRegister of memory in no arena", f, ndk.StatusAccessViolation)
	f = fr
	f.ArenaOff = 8190
	post("a FastRegister past its arena", f, ndk.StatusAccessViolation)
	f = fr
	f.InvToken, f.RemoteToken = fast.Local, fast.Remote
	post("a FastRegister keeping its keys", f, ndk.StatusAccessViolation)
	f = fr
	f.Handle = mw.H
	post("a FastRegister of a window", f, ndk.StatusInvalidHandle)

	// Another client's fast MR, by its token: refused by the PD check,
	// and, as a failed Invalidate, it ends the hostile QP.
	post("an Invalidate of another client's MR", proto.Send{Op: proto.OpInvalidate, InvToken: vfast.LocalToken()}, ndk.StatusInvalidDeviceRequest)

	malformedSRQRecord(t, r, pd.H)

	time.Sleep(20 * time.Millisecond)
	for i, b := range vmem {
		if b != 0x5A {
			t.Fatalf("victim byte %d changed to %#x", i, b)
		}
	}
	for i, b := range pmem {
		if b != 0xEE {
			t.Fatalf("peer byte %d changed to %#x", i, b)
		}
	}
	bd.healthy(t)
}

// malformedSRQRecord writes an SRQ record with 200 SGEs: the SRQ is read
// no more and says so.
func malformedSRQRecord(t *testing.T, r *raw, pd uint32) {
	t.Helper()
	sm, sfds := r.ok(&proto.Request{Op: proto.OpCreateSRQ, PD: pd, Depth: 4, RecvSGE: 1})
	sseg, err := shm.MapSegment(sfds[0], sm.Seg.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer sseg.Close()
	sl := proto.NewSRQLayout(sm.Seg.Slots)
	ring, err := shm.NewProducer(sseg, sl.Ring)
	if err != nil {
		t.Fatal(err)
	}
	slot := ring.Reserve()
	(&proto.Recv{Seq: 1, NSGE: 1}).Encode(slot)
	slot[8] = 200
	ring.Publish()
	sseg.Word32(sl.Words).Store(1)
	r.bell.Ring()
	ev := r.event(t, proto.EvSRQ)
	if ev.H != sm.H || ndk.Status(ev.Status) != ndk.StatusInternalError {
		t.Fatalf("SRQ event %+v, want STATUS_INTERNAL_ERROR for SRQ %d", ev, sm.H)
	}

}

// victim is a well-behaved client with 8 KiB of memory set to 0x5A, a
// registered MR over its first half and an initialized fast MR.
func victim(t *testing.T, bd *bed) ([]byte, *ndk.MR, *ndk.MR) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	va, err := ndk.Dial(ctx, bd.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(va.Close)
	vpd, _ := va.CreatePD()
	vmem, _ := va.Memory(8192)
	for i := range vmem {
		vmem[i] = 0x5A
	}
	vmr, err := vpd.RegisterMR(vmem[:4096], ndk.MRFlagAllowLocalWrite|ndk.MRFlagAllowRemoteRead|ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	vfast, err := vpd.CreateMR(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := vfast.InitializeFastRegister(1, true); err != nil {
		t.Fatal(err)
	}
	return vmem, vmr, vfast
}

// event waits for the next event named ev.
func (r *raw) event(t *testing.T, ev string) *proto.Message {
	t.Helper()
	buf := make([]byte, proto.MaxMessage)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_ = r.c.SetReadDeadline(deadline)
		n, fds, err := shm.RecvFDs(r.c, buf, shm.MaxFDs)
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err != nil || n == 0 {
			break
		}
		var m proto.Message
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			t.Fatal(err)
		}
		if m.Ev == ev {
			return &m
		}
	}
	t.Fatalf("no %s event in 5 s", ev)
	return nil
}
