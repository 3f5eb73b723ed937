package rdma

import (
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestBulkProcs_WriteAndReadMoveData runs BenchmarkBulk's ndkxdp jobs
// briefly over a 2-queue pair: A's WRITEs into B's memory and B's READs
// of A's memory, each side a process, must complete (a child that sees
// an error completion, such as a READ of memory not registered for
// remote read, fails the run) and move full 64 KiB messages, the frames
// leaving from A's engines in both cases (for a READ, as its
// responses).
func TestBulkProcs_WriteAndReadMoveData(t *testing.T) {
	p := harness.New(t, harness.Config{MTU: 4096, Queues: 2, StaticNeighbours: true})
	pm, _ := rocev2.MTUForNetdev(4096)
	perMsg := uint64((benchWrite + pm.Bytes() - 1) / pm.Bytes())
	for _, op := range []string{"write", "read"} {
		rx, tx := sides(p, procJob{Kind: "rdma", Op: op, Size: benchWrite, Queues: 2, QPs: 2})
		r, w, err := runProcs(rx, tx, 100*time.Millisecond, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		// The side that posts counts its completions.
		done := w
		if op == "read" {
			done = r
		}
		if done.Messages == 0 || done.Bytes != done.Messages*benchWrite {
			t.Fatalf("%s: %d messages, %d bytes in the window; want some, %d bytes each", op, done.Messages, done.Bytes, benchWrite)
		}
		if w.Engine == nil || r.Engine == nil {
			t.Fatalf("%s: a side reported no engine counters", op)
		}
		// Messages in flight at the window's edges were partly sent
		// outside it: half their frames is a bound no other sender
		// reaches.
		if w.Engine.FramesOut < done.Messages*perMsg/2 {
			t.Fatalf("%s: A's engines sent %d frames for %d messages of %d frames", op, w.Engine.FramesOut, done.Messages, perMsg)
		}
	}
}

// TestCostProcs_NotifyReceiverWaits runs BenchmarkCPUCost's ndkxdp SEND
// job with a sender that pauses between bursts: the Notify receiver must
// receive the messages and, between bursts, wait for its CQ's
// notification instead of polling; the polling receiver never waits. The
// pauses are long (200ms): verbs.Backoff looks at its spin's time every
// 16 yields, and beside processes that keep the cores each yield can
// take a slice (3-4ms), so with 1ms and 20ms pauses loaded runs found the
// CQ emptied again before the spin ended.
func TestCostProcs_NotifyReceiverWaits(t *testing.T) {
	p := harness.New(t, harness.Config{MTU: 4096, StaticNeighbours: true})
	for _, notify := range []bool{false, true} {
		rx, tx := sides(p, procJob{Kind: "rdma", Op: "send", Size: benchMsg, Queues: 1, QPs: 1, Notify: notify, Pause: 200 * time.Millisecond})
		r, _, err := runProcs(rx, tx, 100*time.Millisecond, time.Second)
		if err != nil {
			t.Fatalf("notify %v: %v", notify, err)
		}
		t.Logf("notify %v: %d messages, %d waits, receiver %.3f CPU-s", notify, r.Messages, r.Waits, r.CPU())
		switch {
		case r.Messages == 0:
			t.Fatalf("notify %v: nothing received in the window", notify)
		case notify && r.Waits == 0:
			t.Fatal("the Notify receiver never waited for a notification though its sender paused 200ms every 64 messages")
		case !notify && r.Waits != 0:
			t.Fatalf("the polling receiver waited %d times", r.Waits)
		}
	}
}
