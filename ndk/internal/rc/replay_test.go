package rc

import (
	"testing"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestReplayBudgetDefersAndCounts: a duplicate READ restarts a run of 16
// responses. One loop sends at most replayBudget of them; the rest wait
// for later loops (counted in ReplaysDeferred) and all of them still
// leave, in order. A READ of another QP that arrives in the same batch
// is answered in the first loop, ahead of the rest of the replay: the
// budget is what keeps a duplicate flood from delaying its neighbours. The
// control: the first, genuine run of the same READ is not held back.
func TestReplayBudgetDefersAndCounts(t *testing.T) {
	const n = 16 // packets of the READ, pmtu 256
	h := newHostile(t, hostileOptions{})
	// A second connection, whose PSNs are far from the first's.
	const qpn2, psn2 = 0x200, rocev2.PSN(0x400000)
	qa2, qb2 := h.a.createQP(qpn2, 64), h.b.createQP(qpn2, 64)
	pA := defaultParams(hostileMTU)
	pA.Local = Endpoint{IP: h.a.ip, MAC: h.a.mac, QPN: qpn2, PSN: uint32(psn2)}
	pA.Remote = Endpoint{IP: h.b.ip, MAC: h.b.mac, QPN: qpn2, PSN: uint32(psn2)}
	pB := pA
	pB.Local, pB.Remote = pA.Remote, pA.Local
	if err := qa2.Connect(pA); err != nil {
		t.Fatal(err)
	}
	if err := qb2.Connect(pB); err != nil {
		t.Fatal(err)
	}
	src := h.region(n*pmtu, allRemote, testPD, false)

	before := h.b.eng.Stats()
	h.inj.inject(h.read(e0, src.addr(0), src.tokens.Remote, n*pmtu))
	h.settle()
	first := h.rec.take()
	mid := h.b.eng.Stats()
	if len(first) != n || mid.ReplaysDeferred != before.ReplaysDeferred {
		t.Fatalf("first run: %d responses, %d deferrals; want %d, none", len(first), mid.ReplaysDeferred-before.ReplaysDeferred, n)
	}

	other := h.hdr(rocev2.RCReadRequest, psn2)
	other.BTH.DestQP = qpn2
	other.RETH = rocev2.RETHFields{VA: src.addr(0), RKey: src.tokens.Remote, DMALen: 64}
	h.inj.inject(h.read(e0, src.addr(0), src.tokens.Remote, n*pmtu), h.frame(other, nil))
	h.settle()
	got := h.rec.take()
	after := h.b.eng.Stats()
	if len(got) != n+1 {
		t.Fatalf("%d answers after the duplicate and the other QP's READ, want %d: %+v", len(got), n+1, got)
	}
	at := -1
	replayed := 0
	for i, a := range got {
		if a.psn == psn2 {
			at = i
			continue
		}
		if want := e0.Add(uint32(replayed)); a.psn != want {
			t.Fatalf("replay answer %d has PSN %#x, want %#x", replayed, a.psn, want)
		}
		replayed++
	}
	if at < 0 || at > replayBudget {
		t.Fatalf("the other QP's READ answered after %d of the replay's %d responses, want at most %d", at, n, replayBudget)
	}
	if d := after.ReplaysDeferred - mid.ReplaysDeferred; d == 0 {
		t.Fatal("a 16-packet replay with a budget of 4 a loop was not deferred")
	}
	if h.qb.State() != StateConnected || qb2.State() != StateConnected {
		t.Fatal("a QP failed")
	}
}
