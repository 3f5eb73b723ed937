package rdma

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// BenchmarkLargeReads measures, in one run on one veth pair (MTU 1500),
// READs of 256 KiB and of 8 MiB from B's responder into A, sixteen
// outstanding, and reports the 8 MiB rate as a share of the 256 KiB one
// (read-8M/256K, target >= 0.8) and the bytes B sent again as a share of
// those A asked for (retx-share-*, target <= 0.05). An 8 MiB READ is
// 8,192 response frames that leave as fast as the responder builds
// them; a requester slower than that loses them from its receive ring,
// and each loss resends the rest of the READ. Run with -benchtime 1x.
func BenchmarkLargeReads(b *testing.B) {
	x, y := newHosts(b, setup{daemon: os.Getenv("NDKXDP_BENCH_DAEMON") == "1"})
	for b.Loop() {
		small := readRate(b, x, y, 256<<10, 640)
		large := readRate(b, x, y, 8<<20, 20)
		ratio := large.mbps / small.mbps
		for _, f := range []struct {
			name string
			f    readFigures
		}{{"READ 256 KiB x640", small}, {"READ 8 MiB x20   ", large}} {
			fmt.Printf("%s: %.0f MB/s, %.3f of the bytes resent, %d retransmission rounds (%d ACK timeouts), %d READs answered again\n",
				f.name, f.f.mbps, f.f.retx, f.f.rounds, f.f.timeouts, f.f.duplicates)
		}
		fmt.Printf("8 MiB / 256 KiB rate: %.2f (target >= 0.80)\n", ratio)
		b.ReportMetric(small.mbps, "read-256K-MB/s")
		b.ReportMetric(large.mbps, "read-8M-MB/s")
		b.ReportMetric(ratio, "read-8M/256K")
		b.ReportMetric(small.retx, "retx-share-256K")
		b.ReportMetric(large.retx, "retx-share-8M")
	}
}

type readFigures struct {
	mbps   float64
	retx   float64 // response bytes sent beyond those asked for, as a share of those
	rounds uint64  // the requester's go-back-N rounds
	// timeouts are the requester's ACK timeouts among the rounds;
	// duplicates the READs the responder answered again.
	timeouts, duplicates uint64
}

// outstanding is how many READs the requester keeps posted: perftest's
// read_bw keeps its outbound read limit (16) busy.
const outstanding = 16

// readRate has x READ size bytes from y n times, outstanding at a time.
func readRate(b *testing.B, x, y *host, size, n int) readFigures {
	x.freshCQs()
	y.freshCQs()
	qa, qb := x.pairWith(y, ndk.ConnectOptions{})
	defer qa.Close()
	defer qb.Close()
	src := y.region(size, ndk.MRFlagAllowRemoteRead)
	dst := x.region(size, ndk.MRFlagAllowLocalWrite)
	sgl := dst.sgl(0, size)
	pmtu := x.Adapter.PathMTU()
	before, beforeA := y.Adapter.Stats()[0], x.Adapter.Stats()[0]
	rs := make([]ndk.Result, 16)
	posted, done := 0, 0
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for done < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d READs of %d bytes in 60s", done, n, size)
		}
		if posted < n && posted-done < outstanding {
			err := qa.Read(nil, sgl, src.mr.Addr(), src.mr.RemoteToken(), 0)
			switch {
			case err == nil:
				posted++
				continue
			case !errors.Is(err, ndk.ErrInsufficientResources):
				b.Fatal(err)
			}
		}
		k := x.ICQ.GetResults(rs)
		for _, r := range rs[:k] {
			if r.Status != ndk.StatusSuccess {
				b.Fatalf("read: %v", r.Status)
			}
		}
		done += k
		if k == 0 {
			runtime.Gosched()
		}
	}
	elapsed := time.Since(start)
	after, afterA := y.Adapter.Stats()[0], x.Adapter.Stats()[0]
	frames := uint64(n * ((size + pmtu - 1) / pmtu))
	sent := after.FramesOut - before.FramesOut
	extra := float64(0)
	if sent > frames {
		extra = float64(sent-frames) / float64(frames)
	}
	return readFigures{mbps: float64(n*size) / elapsed.Seconds() / 1e6, retx: extra, rounds: afterA.Retransmits - beforeA.Retransmits,
		timeouts: afterA.Timeouts - beforeA.Timeouts, duplicates: after.Duplicates - before.Duplicates}
}
