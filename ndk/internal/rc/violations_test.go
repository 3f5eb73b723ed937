package rc

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// TestAccessViolationsLimitedPerSource: a peer that opens connection
// after connection to guess R_Keys gets its burst of guesses looked up
// (each a remote access error NAK that costs the connection); after that
// its requests that carry a key are dropped unlooked-at, on every
// connection, and counted. A WRITE with the right key from the same
// source is only delayed: it lands once the bucket refills.
func TestAccessViolationsLimitedPerSource(t *testing.T) {
	const guessers = 40
	a, b := newPair(t, pairOptions{qps: guessers + 1, depth: 4, params: func(p *ConnParams) {
		// A dropped guess is retried twice, within a few ms: all of
		// them end before the bucket's 250 ms refill.
		p.AckTimeout = timeScale * 2 * time.Millisecond
		p.RetryCount = 2
	}})
	src := a.buffer(8, 0, false)
	fill(src.b, 9)
	dst := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
	start := time.Now()
	for i := range guessers {
		mustPost(t, a.qps[i].PostSend(&SendWR{Op: OpWrite, Context: i, SGL: []SGE{src.sge(0, 8)},
			RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote ^ 0x100}))
		if i < violationBurst {
			// One at a time, so the burst is exactly the first 16.
			checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusAccessViolation, ndkpi.OpWrite, i)
		}
	}
	timedOut := 0
	for _, e := range waitCQ(t, a.scq, guessers-violationBurst, 10*time.Second) {
		if e.Status == ndkpi.StatusIOTimeout {
			timedOut++
		}
	}
	elapsed := time.Since(start)
	st := b.eng.Stats()
	// The bucket refills by one every 250 ms while the test runs.
	maxViolations := uint64(violationBurst) + uint64(elapsed/(250*time.Millisecond))
	if st.AccessViolations < violationBurst || st.AccessViolations > maxViolations {
		t.Fatalf("%d violations looked up in %v, want %d-%d", st.AccessViolations, elapsed, violationBurst, maxViolations)
	}
	if want := guessers - st.AccessViolations; uint64(timedOut) != want || st.AccessLimited < 3*want {
		t.Fatalf("%d guesses timed out and %d requests dropped; want %d guesses never answered, each sent 3 times", timedOut, st.AccessLimited, want)
	}
	sameBytes(t, "target memory", dst.b, bytes.Repeat([]byte{0xEE}, 64))

	// The right key from the same source waits out the limit, retrying.
	good := a.qps[guessers]
	if err := good.eng.do(func() { good.t.params.RetryCount, good.t.retryLeft, good.t.ackTO = 7, 7, int64(100*time.Millisecond) }); err != nil {
		t.Fatal(err)
	}
	dropped := st.AccessLimited
	mustPost(t, good.PostSend(&SendWR{Op: OpWrite, Context: "good", SGL: []SGE{src.sge(0, 8)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, "good")
	sameBytes(t, "written bytes", dst.b[:8], src.b)
	if !dst.guardsIntact() {
		t.Fatal("bytes outside the region changed")
	}
	st = b.eng.Stats()
	srcs := b.eng.ViolationSources()
	if len(srcs) != 1 || srcs[0].Source != a.ip || srcs[0].Violations != st.AccessViolations || srcs[0].Dropped != st.AccessLimited {
		t.Fatalf("violation table %+v; stats %d violations, %d dropped", srcs, st.AccessViolations, st.AccessLimited)
	}
	t.Logf("%d guessing connections: %d looked up, %d guesses never answered (%d requests dropped); the right key landed after %d drops",
		guessers, st.AccessViolations, timedOut, dropped, st.AccessLimited-dropped)
}

// TestViolationTableBounded: the table never holds more than its 256
// sources; a new source evicts the stalest one not over its limit, so a
// flood of one-off sources does not free a source being limited; the
// bucket refills with time.
func TestViolationTableBounded(t *testing.T) {
	var v violationTable
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}) }
	now := int64(1)
	bad := netip.MustParseAddr("198.19.0.1")
	for range violationBurst {
		v.note(bad, now)
	}
	if !v.limited(bad, now) || v.over != 1 {
		t.Fatalf("after its burst: limited %v, over %d", v.limited(bad, now), v.over)
	}
	for i := range 10 * violationSources {
		now++
		v.note(addr(i), now)
		if v.n > violationSources {
			t.Fatalf("%d entries", v.n)
		}
	}
	if v.n != violationSources || v.find(bad) == nil || !v.limited(bad, now) {
		t.Fatalf("after 2,560 one-off sources: %d entries, limited source kept %v", v.n, v.find(bad) != nil)
	}
	if v.find(addr(10*violationSources-1)) == nil || v.find(addr(0)) != nil {
		t.Fatal("eviction did not take the stalest source")
	}
	now += violationRefill
	if v.limited(bad, now) || v.over != 0 {
		t.Fatalf("after one refill period: limited %v, over %d", v.limited(bad, now), v.over)
	}
	// Every entry limited: a new source takes the oldest, and over stays
	// the count of limited entries.
	var w violationTable
	for i := range violationSources + 1 {
		for range violationBurst {
			w.note(addr(i), int64(i+1))
		}
	}
	if w.n != violationSources || w.over != violationSources || w.find(addr(0)) != nil {
		t.Fatalf("all limited: %d entries, over %d, oldest kept %v", w.n, w.over, w.find(addr(0)) != nil)
	}
	if n := testing.AllocsPerRun(100, func() { v.note(addr(7), now); v.limited(addr(7), now) }); n != 0 {
		t.Fatalf("%.1f allocations per violation", n)
	}
}

// TestInvalidateGuessesCountAsViolations: a SEND with Invalidate of a
// token the target may not invalidate is a guess at a key too. Each costs
// the connection; the source's first 16 are looked up, the rest dropped
// (the SENDs never reach a receive), and the target's receive queue sees
// only the 16 failed receives.
func TestInvalidateGuessesCountAsViolations(t *testing.T) {
	const guessers = 24
	a, b := newPair(t, pairOptions{qps: guessers, depth: 4, params: func(p *ConnParams) {
		p.AckTimeout = timeScale * 2 * time.Millisecond
		p.RetryCount = 2
	}})
	src := a.buffer(8, 0, false)
	dst := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, true)
	for i := range guessers {
		mustPost(t, b.qps[i].PostReceive(i, []SGE{dst.sge(0, 8)}))
		mustPost(t, a.qps[i].PostSend(&SendWR{Op: OpSendInvalidate, Context: i, SGL: []SGE{src.sge(0, 8)},
			InvalidateToken: dst.tokens.Remote ^ 0x100}))
		if i < violationBurst {
			// The target's invalid request NAK: STATUS_REMOTE_RESOURCES.
			checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusRemoteResources, ndkpi.OpSend, i)
		}
	}
	waitCQ(t, a.scq, guessers-violationBurst, 10*time.Second)
	st := b.eng.Stats()
	if st.AccessViolations < violationBurst || st.AccessViolations > violationBurst+2 || st.AccessLimited == 0 {
		t.Fatalf("%d violations looked up, %d requests dropped", st.AccessViolations, st.AccessLimited)
	}
	failed := 0
	for _, e := range waitCQ(t, b.rcq, int(st.AccessViolations), time.Second) {
		if e.Status == ndkpi.StatusAccessViolation {
			failed++
		}
	}
	if failed != int(st.AccessViolations) {
		t.Fatalf("%d receives failed on a bad token, %d violations", failed, st.AccessViolations)
	}
}
