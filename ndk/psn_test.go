package ndk

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// TestOutOfBandStartingPSNsAreRandom: the PSN a QP starts an out-of-band
// connection with (LocalEndpoint, then the first request on the wire) is
// drawn from crypto/rand, like the CM's: over 4,096 QPs every one of the
// 24 bits is set about half the time, almost no two QPs share a PSN, and
// consecutive QPs' PSNs have no fixed stride. A predictable starting PSN
// would let an off-path peer inject into a connection it can address
// (ReDMArk); the source check is the other half of that defence.
func TestOutOfBandStartingPSNsAreRandom(t *testing.T) {
	var firstPSN atomic.Int64
	firstPSN.Store(-1)
	p, err := porttest.NewPipe(porttest.PipeConfig{Depth: 1024, Filter: func(dir porttest.Direction, frame []byte) porttest.Verdict {
		var pkt rocev2.Packet
		if dir == porttest.AtoB && rocev2.Parse(frame, &pkt) == nil && pkt.BTH.Opcode == rocev2.RCSendOnly {
			firstPSN.CompareAndSwap(-1, int64(pkt.BTH.PSN))
		}
		return porttest.Pass
	}})
	if err != nil {
		t.Fatal(err)
	}
	x := newScaleSide(t, pipeAdapter(t, p.A(), "198.18.0.1", 1), 64)
	y := newScaleSide(t, pipeAdapter(t, p.B(), "198.18.0.2", 2), 64)
	const n = 4096
	var ones [24]int
	seen := make(map[uint32]bool, n)
	strides := make(map[uint32]int)
	var prev uint32
	for i := range n {
		psn := x.createQP(t).LocalEndpoint().PSN
		if psn > rocev2.PSNMask {
			t.Fatalf("PSN %#x beyond 24 bits", psn)
		}
		for b := range 24 {
			ones[b] += int(psn >> b & 1)
		}
		seen[psn] = true
		if i > 0 {
			strides[(psn-prev)&rocev2.PSNMask]++
		}
		prev = psn
	}
	// Binomial(4096, 1/2): mean 2048, standard deviation 32; the bounds
	// are 12 deviations out.
	for b, k := range ones {
		if k < 1664 || k > 2432 {
			t.Errorf("bit %d set in %d of %d PSNs", b, k, n)
		}
	}
	// 4,096 draws from 2^24 collide about 0.5 times.
	if len(seen) < n-8 {
		t.Errorf("%d distinct PSNs among %d QPs", len(seen), n)
	}
	for s, k := range strides {
		if k > 8 {
			t.Errorf("stride %#x between consecutive QPs %d times", s, k)
		}
	}

	// The PSN the endpoint announces is the one the wire carries.
	qx, qy := x.qps[0], y.createQP(t)
	connectOOB(t, qx, qy)
	rs, _ := y.mr.SGE(0, 64)
	ss, _ := x.mr.SGE(0, 64)
	if err := qy.Receive(nil, []SGE{rs}); err != nil {
		t.Fatal(err)
	}
	if err := qx.Send(nil, []SGE{ss}, 0); err != nil {
		t.Fatal(err)
	}
	waitN(t, y.rcq, 1, 5*time.Second)
	if got, want := firstPSN.Load(), int64(qx.LocalEndpoint().PSN); got != want {
		t.Fatalf("first SEND carried PSN %#x, the endpoint announced %#x", got, want)
	}
}
