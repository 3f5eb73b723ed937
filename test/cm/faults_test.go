package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/testhooks"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// fastCM shortens the CM's timers so that lost MADs cost milliseconds: a
// REQ is resent after 2·2^(10-8) + 2^(10-8) = 12 ms.
var fastCM = ndk.CMOptions{ResponseTimeout: 10, PacketLifeTime: 10}

// lossy is a MAD fault hook (testhooks.SetMADFaults) that drops, duplicates and delays MADs with a
// seeded generator, and counts what it did by attribute.
type lossy struct {
	mu               sync.Mutex
	rng              *rand.Rand
	drop, dup        float64
	delay            time.Duration
	dropped, doubled map[rocev2.AttributeID]int
}

func newLossy(seed uint64, drop, dup float64, delay time.Duration) *lossy {
	return &lossy{rng: rand.New(rand.NewPCG(seed, 1)), drop: drop, dup: dup, delay: delay,
		dropped: map[rocev2.AttributeID]int{}, doubled: map[rocev2.AttributeID]int{}}
}

func (l *lossy) fault(mad []byte) (int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := rocev2.AttributeID(binary.BigEndian.Uint16(mad[16:]))
	d := time.Duration(l.rng.Int64N(int64(l.delay) + 1))
	switch x := l.rng.Float64(); {
	case x < l.drop:
		l.dropped[id]++
		return 0, 0
	case x < l.drop+l.dup:
		l.doubled[id]++
		return 2, d
	}
	return 1, d
}

func (l *lossy) counts() (dropped, doubled int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.dropped {
		dropped += n
	}
	for _, n := range l.doubled {
		doubled += n
	}
	return dropped, doubled
}

// TestLossyConnections runs connections over a veth pair whose CM
// datagrams are dropped (25%), duplicated (25%) and delayed (up to 15 ms,
// so they also overtake each other) in both directions: every connection
// forms exactly once, carries data, and disconnects.
func TestLossyConnections(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		la, lb := newLossy(1, 0.25, 0.25, 15*time.Millisecond), newLossy(2, 0.25, 0.25, 15*time.Millisecond)
		cmA, cmB := fastCM, fastCM
		if m.daemon {
			// The RTU leaves on the client's CompleteConnect, two
			// messages over the daemon's socket after the REP came: the
			// listener's REP retries (15 of 2^(ResponseTimeout-8) ms,
			// ResponseTimeout from A's REQ, capped by B's own) must
			// outlast a stall of the client on a loaded machine, 60 ms
			// do not.
			cmA.ResponseTimeout, cmB.ResponseTimeout = 12, 12
		}
		p, a, b := pair(t, m, harness.Config{StaticNeighbours: true}, ndk.Options{CM: cmA}, ndk.Options{CM: cmB})
		testhooks.SetMADFaults(a.Served, la.fault)
		testhooks.SetMADFaults(b.Served, lb.fault)
		srv := serve(t, b, netip.AddrPortFrom(p.B.IPv4, 7100), nil)
		const n = 30
		for i := range n {
			cl := dial(t, a, netip.AddrPortFrom(p.B.IPv4, 7100), []byte{byte(i)})
			sc := srv.next(t)
			if sc.data[0] != byte(i) {
				t.Fatalf("connection %d: the listener got the request of connection %d", i, sc.data[0])
			}
			exchange(t, a, b, cl.qp, sc.rb, []byte("through the noise"))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := cl.c.Disconnect(ctx)
			cancel()
			// A DREQ whose every copy was lost times out; the peer then
			// learns of the end from its own time-wait, not from us.
			if err != nil && !errors.Is(err, ndk.ErrIOTimeout) {
				t.Fatalf("connection %d: disconnect: %v", i, err)
			}
			cl.c.Close()
			sc.c.Close()
			closed(t, "active close", cl.c.Closed(), 5*time.Second)
			closed(t, "passive close", sc.c.Closed(), 5*time.Second)
			cl.qp.Close()
			sc.qp.Close()
		}
		// Late duplicates (up to 15 ms) must not start another connection.
		time.Sleep(100 * time.Millisecond)
		if got := srv.events(); got != n {
			t.Fatalf("%d connect events for %d connections", got, n)
		}
		da, ua := la.counts()
		db, ub := lb.counts()
		sa, sb := a.Adapter.CMStats(), b.Adapter.CMStats()
		t.Logf("A dropped %d, duplicated %d; B dropped %d, duplicated %d; retransmits A %d B %d; duplicates answered A %d B %d",
			da, ua, db, ub, sa.Retransmits, sb.Retransmits, sa.Duplicates, sb.Duplicates)
		if da == 0 || db == 0 || ua == 0 || ub == 0 || sa.Retransmits+sb.Retransmits == 0 || sb.Duplicates == 0 {
			t.Fatal("the faults did not happen or were not recovered from")
		}
	})
}

// TestConnectTimesOutAfterRetries: every REQ is lost, so Connect fails
// with IO_TIMEOUT after the first REQ and exactly MaxRetries more.
func TestConnectTimesOutAfterRetries(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dropREQ := func(mad []byte) (int, time.Duration) {
			if rocev2.AttributeID(binary.BigEndian.Uint16(mad[16:])) == rocev2.AttrREQ {
				return 0, 0
			}
			return 1, 0
		}
		cmOpts := fastCM
		cmOpts.MaxRetries = 4
		p, a, b := pair(t, m, harness.Config{StaticNeighbours: true}, ndk.Options{CM: cmOpts}, ndk.Options{})
		testhooks.SetMADFaults(a.Served, dropREQ)
		srv := serve(t, b, netip.AddrPortFrom(p.B.IPv4, 7101), nil)
		start := time.Now()
		_, err := tryDial(t, a, netip.AddrPort{}, netip.AddrPortFrom(p.B.IPv4, 7101), nil)
		if !errors.Is(err, ndk.ErrIOTimeout) {
			t.Fatalf("connect: %v, want IO_TIMEOUT", err)
		}
		if s := a.Adapter.CMStats(); s.Sent[rocev2.AttrREQ] != 1+4 || s.Retransmits != 4 {
			t.Fatalf("sent %d REQs with %d retransmissions, want 5 and 4", s.Sent[rocev2.AttrREQ], s.Retransmits)
		}
		if srv.events() != 0 {
			t.Fatal("the listener saw a request")
		}
		t.Logf("IO_TIMEOUT after %v", time.Since(start))
	})
}

// TestAcceptTimesOutWithoutRTU: every REP is lost, so no RTU (and no
// data) ever comes: Accept fails with IO_TIMEOUT after the REP's retries,
// which are the REQ's MaxCMRetries (IBTA 12.6.5; cm.c takes
// max_cm_retries from the REQ), while the active side still resends its
// REQ.
func TestAcceptTimesOutWithoutRTU(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		dropAll := func([]byte) (int, time.Duration) { return 0, 0 }
		// The REP is resent every 2^(10-8) ms; the REQ every 2·2^(14-8) +
		// 2^(10-8) ms, so the active side outlasts the passive one by far
		// even when the listener is slow to accept.
		cmOpts := ndk.CMOptions{ResponseTimeout: 10, PacketLifeTime: 14, MaxRetries: 5}
		p, a, b := pair(t, m, harness.Config{StaticNeighbours: true}, ndk.Options{CM: cmOpts}, ndk.Options{CM: fastCM})
		testhooks.SetMADFaults(b.Served, dropAll)
		srv := serve(t, b, netip.AddrPortFrom(p.B.IPv4, 7102), nil)
		c, err := a.Adapter.CreateConnector()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		go c.Connect(ctx, a.qp(), netip.AddrPort{}, netip.AddrPortFrom(p.B.IPv4, 7102), 1, 1, nil)
		select {
		case sc := <-srv.conns:
			if !errors.Is(sc.err, ndk.ErrIOTimeout) {
				t.Fatalf("accept: %v, want IO_TIMEOUT", sc.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("accept did not end")
		}
		if s := b.Adapter.CMStats(); s.Retransmits != 5 {
			t.Fatalf("%d REP retransmissions, want the REQ's MaxCMRetries 5 (stats %+v)", s.Retransmits, s)
		}
	})
}
