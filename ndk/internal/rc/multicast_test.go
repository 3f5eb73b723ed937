package rc

import (
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// udQP makes another active UD QP on h.
func (h *host) udQP(t *testing.T, qpn, qkey uint32) *QP {
	t.Helper()
	q, err := h.eng.CreateQP(QPConfig{QPN: qpn, PD: testPD, RecvCQ: h.rcq, SendCQ: h.scq, Context: qpn,
		RecvDepth: 64, SendDepth: 64, MaxRecvSGE: 4, MaxSendSGE: 4, UD: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.ActivateUD(UDParams{Local: Endpoint{IP: h.ip, MAC: h.mac, QPN: qpn}, QKey: qkey, PathMTU: rocev2.MTU1024}); err != nil {
		t.Fatal(err)
	}
	return q
}

func groupDest(t *testing.T, group netip.Addr, qkey uint32) UDDest {
	t.Helper()
	mac, ok := rocev2.MulticastMAC(group)
	if !ok {
		t.Fatalf("%v: no multicast MAC", group)
	}
	return UDDest{IP: group, MAC: mac, QPN: rocev2.MulticastQPN, QKey: qkey}
}

// noEntry fails if h's receive CQ has an entry after a pause.
func noEntry(t *testing.T, h *host, what string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	if n := h.rcq.Len(); n != 0 {
		t.Fatalf("%s: %d receive completions, want none", what, n)
	}
}

// TestUD_Multicast: a datagram to a group completes one receive on every
// member QP with the group's Q_Key, names the sender's QPN, and carries
// the group as the GRH's destination; a member with another Q_Key drops
// it (BadQKey); a detached or closed QP takes no more, and a datagram for
// a group without members is an unknown-QP drop. A frame with the group's
// IP but another MAC is dropped.
func TestUD_Multicast(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name, group := "IPv4", netip.MustParseAddr("239.1.2.3")
		if v6 {
			name, group = "IPv6", netip.MustParseAddr("ff0e::1:2:3")
		}
		t.Run(name, func(t *testing.T) {
			a, b, qa, qb := udPair(t, pairOptions{v6: v6}, testQKey, testQKey)
			qb2, qb3 := b.udQP(t, 0x301, testQKey), b.udQP(t, 0x302, 0x42)
			for _, q := range []*QP{qb, qb2, qb3} {
				if err := q.AttachMulticast(group); err != nil {
					t.Fatal(err)
				}
			}
			if err := qb.AttachMulticast(group); err != nil { // again: nothing
				t.Fatal(err)
			}
			const n = 100
			src := a.buffer(n, 0, false)
			fill(src.b, 7)
			bufs := map[*QP]*buffer{}
			for _, q := range []*QP{qb, qb2, qb3} {
				bufs[q] = b.buffer(2*(GRHLen+n), memreg.AccessLocalWrite, false)
				mustPost(t, q.PostReceive(q, []SGE{bufs[q].sge(0, GRHLen+n)}))
				mustPost(t, q.PostReceive(q, []SGE{bufs[q].sge(GRHLen+n, GRHLen+n)}))
			}
			send := func(d UDDest) {
				t.Helper()
				mustPost(t, qa.PostSend(&SendWR{Op: OpSendImm, Imm: 0xabcd, Context: "s", SGL: []SGE{src.sge(0, n)}, UD: d}))
				checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpSend, "s")
			}
			send(groupDest(t, group, testQKey))
			got := map[any]bool{}
			for _, r := range waitCQ(t, b.rcq, 2, 5*time.Second) {
				checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, r.RequestContext)
				if r.BytesTransferred != GRHLen+n || r.TypeSpecificCompletionOutput != uint64(qa.QPN()) || !r.HasImmediate || r.Immediate != 0xabcd {
					t.Fatalf("receive %+v: want %d bytes from QPN %#x with immediate 0xabcd", r, GRHLen+n, qa.QPN())
				}
				got[r.RequestContext] = true
			}
			if !got[qb] || !got[qb2] {
				t.Fatalf("receives completed on %v, want QPs %#x and %#x", got, qb.QPN(), qb2.QPN())
			}
			for _, q := range []*QP{qb, qb2} {
				sameBytes(t, "payload", bufs[q].b[GRHLen:GRHLen+n], src.b)
				checkGRH(t, bufs[q].b[:GRHLen], a.ip, group)
			}
			noEntry(t, b, "the member with another Q_Key")
			if s := b.eng.Stats(); s.BadQKey != 1 {
				t.Fatalf("BadQKey %d, want 1 (QP %#x's Q_Key is not the datagram's)", s.BadQKey, qb3.QPN())
			}

			// Another MAC with the group's IP: dropped.
			d := groupDest(t, group, testQKey)
			d.MAC = b.mac
			send(d)
			eventually(t, "wrong MAC counted", func() bool { return b.eng.Stats().WrongDestination == 1 })
			noEntry(t, b, "a frame for the group's IP and another MAC")

			if err := qb2.DetachMulticast(group); err != nil {
				t.Fatal(err)
			}
			if err := qb2.DetachMulticast(group); !errors.Is(err, ErrNotAttached) {
				t.Fatalf("second detach: %v, want ErrNotAttached", err)
			}
			send(groupDest(t, group, testQKey))
			if r := waitCQ(t, b.rcq, 1, 5*time.Second)[0]; r.RequestContext != qb {
				t.Fatalf("after QP %#x left, the datagram completed on %v", qb2.QPN(), r.RequestContext)
			}
			noEntry(t, b, "the detached QP")

			if err := qb.Close(); err != nil {
				t.Fatal(err)
			}
			if err := qb3.Close(); err != nil {
				t.Fatal(err)
			}
			for _, r := range waitCQ(t, b.rcq, 2, 5*time.Second) { // qb3's receives, flushed
				if r.RequestContext != qb3 || r.Status == ndkpi.StatusSuccess {
					t.Fatalf("after the closes: %+v, want QP %#x's receives flushed", r, qb3.QPN())
				}
			}
			before := b.eng.Stats().UnknownQP
			send(groupDest(t, group, testQKey))
			eventually(t, "a datagram for a group without members counted", func() bool { return b.eng.Stats().UnknownQP == before+1 })
			noEntry(t, b, "no member left")
			if gs := qb2.MulticastGroups(); len(gs) != 0 {
				t.Fatalf("QP %#x still lists %v", qb2.QPN(), gs)
			}
		})
	}
}

// TestUD_MulticastAttachRefused: only UD QPs attach, only to multicast
// addresses.
func TestUD_MulticastAttachRefused(t *testing.T) {
	_, b, _, qb := udPair(t, pairOptions{}, testQKey, testQKey)
	if err := qb.AttachMulticast(netip.MustParseAddr("198.18.0.9")); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("attach to a unicast address: %v, want ErrBadConfig", err)
	}
	rcq := b.createQP(0x400, 16)
	if err := rcq.AttachMulticast(netip.MustParseAddr("239.1.1.1")); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("attach an RC QP: %v, want ErrBadConfig", err)
	}
	if err := qb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := qb.AttachMulticast(netip.MustParseAddr("239.1.1.1")); !errors.Is(err, ErrBadState) {
		t.Fatalf("attach a closed QP: %v, want ErrBadState", err)
	}
}

// groupRig is udPair with a second engine on B's adapter (Config.Groups
// names it for group) and a UD QP on it, QPN 0x500, sharing B's memory
// and CQs.
func groupRig(t *testing.T, group netip.Addr) (a, b *host, qa, qb, qg *QP) {
	t.Helper()
	var g *Engine
	groups := func(x netip.Addr) []*Engine {
		if x == group && g != nil {
			return []*Engine{g}
		}
		return nil
	}
	owner := func(uint32) *Engine { return nil }
	a, b, qa, qb = udPair(t, pairOptions{owner: owner, groups: groups}, testQKey, testQKey)
	pg, err := porttest.NewPipe(porttest.PipeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g, err = NewEngine(Config{Port: pg.A(), Regions: b.regions, Owner: owner, Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	gh := &host{t: t, eng: g, regions: b.regions, rcq: b.rcq, scq: b.scq, ip: b.ip, mac: b.mac}
	return a, b, qa, qb, gh.udQP(t, 0x500, testQKey)
}

// TestUD_MulticastAcrossEngines: a datagram for a group arriving on one
// engine of an adapter reaches a member on another (Config.Groups), and
// its own members too; nothing is forwarded twice.
func TestUD_MulticastAcrossEngines(t *testing.T) {
	group := netip.MustParseAddr("239.9.9.9")
	a, b, qa, qb, qg := groupRig(t, group)
	for _, q := range []*QP{qb, qg} {
		if err := q.AttachMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
	const n = 64
	src := a.buffer(n, 0, false)
	fill(src.b, 3)
	dst := b.buffer(2*(GRHLen+n), memreg.AccessLocalWrite, false)
	mustPost(t, qb.PostReceive(qb, []SGE{dst.sge(0, GRHLen+n)}))
	mustPost(t, qg.PostReceive(qg, []SGE{dst.sge(GRHLen+n, GRHLen+n)}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, Context: "s", SGL: []SGE{src.sge(0, n)}, UD: groupDest(t, group, testQKey)}))
	got := map[any]bool{}
	for _, r := range waitCQ(t, b.rcq, 2, 5*time.Second) {
		checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, r.RequestContext)
		got[r.RequestContext] = true
	}
	if !got[qb] || !got[qg] {
		t.Fatalf("receives on %v, want the arrival engine's QP and the other engine's", got)
	}
	sameBytes(t, "forwarded payload", dst.b[2*GRHLen+n:], src.b)
	if bs, gs := b.eng.Stats(), qg.Engine().Stats(); bs.ForwardedOut != 1 || gs.ForwardedIn != 1 || gs.ForwardedOut != 0 {
		t.Fatalf("arrival %+v\nother %+v", bs, gs)
	}
}

// TestUD_MulticastLoopback: a datagram a QP sends to a group reaches the
// sending adapter's own members (the wire does not bring it back), the
// sender itself too if it is a member, but not with BlockSelfLoopback; a
// member on another engine of the adapter gets its forwarded copy. The
// peer's member gets it from the wire as ever.
func TestUD_MulticastLoopback(t *testing.T) {
	group := netip.MustParseAddr("239.4.4.4")
	a, b, qa, qb, qg := groupRig(t, group)
	quiet, err := b.eng.CreateQP(QPConfig{QPN: 0x501, PD: testPD, RecvCQ: b.rcq, SendCQ: b.scq, Context: 0x501,
		RecvDepth: 8, SendDepth: 8, MaxRecvSGE: 1, MaxSendSGE: 1, UD: true, BlockSelfLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := quiet.ActivateUD(UDParams{Local: Endpoint{IP: b.ip, MAC: b.mac, QPN: 0x501}, QKey: testQKey, PathMTU: rocev2.MTU1024}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*QP{qa, qb, qg, quiet} {
		if err := q.AttachMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
	const n = 64
	src := b.buffer(n, 0, false)
	fill(src.b, 9)
	slot := GRHLen + n
	bufs := b.buffer(6*slot, memreg.AccessLocalWrite, false)
	abuf := a.buffer(2*slot, memreg.AccessLocalWrite, false)
	for i, q := range []*QP{qb, qg, quiet} {
		mustPost(t, q.PostReceive(q, []SGE{bufs.sge(2*i*slot, slot)}))
		mustPost(t, q.PostReceive(q, []SGE{bufs.sge((2*i+1)*slot, slot)}))
	}
	mustPost(t, qa.PostReceive(qa, []SGE{abuf.sge(0, slot)}))
	send := func(from *QP) {
		t.Helper()
		mustPost(t, from.PostSend(&SendWR{Op: OpSend, Context: "s", SGL: []SGE{src.sge(0, n)}, UD: groupDest(t, group, testQKey)}))
		checkEntry(t, waitCQ(t, b.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpSend, "s")
	}
	// qb sends: qb itself, qg on the other engine and quiet take it
	// here; qa takes it from the wire.
	send(qb)
	got := map[any]int{}
	for _, r := range waitCQ(t, b.rcq, 3, 5*time.Second) {
		checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, r.RequestContext)
		if r.TypeSpecificCompletionOutput != uint64(qb.QPN()) {
			t.Fatalf("receive %+v names QPN %#x, want the sender %#x", r, r.TypeSpecificCompletionOutput, qb.QPN())
		}
		got[r.RequestContext]++
	}
	if got[qb] != 1 || got[qg] != 1 || got[quiet] != 1 {
		t.Fatalf("looped back to %v, want one each to the sender, the other engine's member and the blocking QP", got)
	}
	sameBytes(t, "looped-back payload", bufs.b[GRHLen:slot], src.b)
	checkGRH(t, bufs.b[:GRHLen], b.ip, group)
	if r := waitCQ(t, a.rcq, 1, 5*time.Second)[0]; r.RequestContext != qa {
		t.Fatalf("the peer's member: %+v", r)
	}
	// quiet sends with BlockSelfLoopback: qb and qg take it, quiet not.
	send(quiet)
	got = map[any]int{}
	for _, r := range waitCQ(t, b.rcq, 2, 5*time.Second) {
		got[r.RequestContext]++
	}
	noEntry(t, b, "the blocking sender")
	if got[qb] != 1 || got[qg] != 1 {
		t.Fatalf("looped back to %v, want qb and qg", got)
	}
	if s := b.eng.Stats(); s.UnknownQP != 0 {
		t.Fatalf("UnknownQP %d after loopback", s.UnknownQP)
	}
}

// TestUD_MulticastAllocatesNothing: a datagram to a group, delivered to a
// member across the wire and looped back to the sender's own member,
// allocates nothing.
func TestUD_MulticastAllocatesNothing(t *testing.T) {
	group := netip.MustParseAddr("239.5.5.5")
	a, b, qa, qb := udPair(t, pairOptions{poll: PollBusy}, testQKey, testQKey)
	qa2 := a.udQP(t, 0x201, testQKey)
	for _, q := range []*QP{qb, qa2} {
		if err := q.AttachMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
	src := a.buffer(64, 0, false)
	dstB := b.buffer(GRHLen+64, memreg.AccessLocalWrite, false)
	dstA := a.buffer(GRHLen+64, memreg.AccessLocalWrite, false)
	wr := SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 64)}, UD: groupDest(t, group, testQKey)}
	rb, ra := []SGE{dstB.sge(0, GRHLen+64)}, []SGE{dstA.sge(0, GRHLen+64)}
	var e cq.Entry
	round := func() {
		qb.PostReceive(nil, rb)
		qa2.PostReceive(nil, ra)
		qa.PostSend(&wr)
		for !a.scq.Pop(&e) {
			runtime.Gosched()
		}
		for !a.rcq.Pop(&e) {
			runtime.Gosched()
		}
		for !b.rcq.Pop(&e) {
			runtime.Gosched()
		}
	}
	for i := 0; i < 50; i++ {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per multicast datagram, want 0", n)
	}
}
