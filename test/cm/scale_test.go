package cm

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestThousandConnections opens 1,000 connections between the two
// namespaces, sends one SEND on each, disconnects and closes everything
// (connectors, QPs, MRs), and checks that goroutines and the heap are back
// where they were: nothing per connection is left behind in the CM, the
// engines or the adapters. The baseline is taken after a first round of
// 1,000, because Go maps keep the buckets of their high-water mark (about
// 1,500 connections sit in the CM's time-wait at once) and that memory is
// reused, not leaked.
func TestThousandConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 connections: not in -short")
	}
	forEachMode(t, func(t *testing.T, m mode) {
		p, a, b := pair(t, m, harness.Config{StaticNeighbours: true}, ndk.Options{}, ndk.Options{})
		dst := netip.AddrPortFrom(p.B.IPv4, 7200)
		srv := serve(t, b, dst, nil)

		one := func(i int) {
			cl := dial(t, a, dst, nil)
			sc := srv.next(t)
			exchange(t, a, b, cl.qp, sc.rb, []byte("one SEND per connection"))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			quitter := cl.c
			if i%2 == 1 {
				quitter = sc.c
			}
			if err := quitter.Disconnect(ctx); err != nil {
				t.Fatalf("connection %d: disconnect: %v", i, err)
			}
			cl.c.Close()
			sc.c.Close()
			<-cl.c.Closed()
			<-sc.c.Closed()
			for _, q := range []*ndk.QP{cl.qp, sc.qp} {
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.release(cl.rb); err != nil {
				t.Fatal(err)
			}
			if err := b.release(sc.rb); err != nil {
				t.Fatal(err)
			}
		}
		const n = 1000
		for i := range n {
			one(i)
		}
		settle := func() (int, uint64) {
			// Finished connections answer duplicates for their time-wait
			// (about 0.5 s, the path's ACK timeout); the disconnect events
			// and drain watchers end within it too.
			time.Sleep(1500 * time.Millisecond)
			runtime.GC()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return runtime.NumGoroutine(), ms.HeapInuse
		}
		g0, h0 := settle()
		start := time.Now()
		for i := range n {
			one(i)
		}
		elapsed := time.Since(start)
		g1, h1 := settle()
		t.Logf("%d connections opened, used and closed in %v (%v each); goroutines %d -> %d; heap in use %d KiB -> %d KiB",
			n, elapsed.Round(time.Millisecond), (elapsed / n).Round(time.Microsecond), g0, g1, h0>>10, h1>>10)
		if g1 > g0 {
			t.Errorf("%d goroutines after, %d before", g1, g0)
		}
		// The heap settles within a few hundred KiB of its level: how many
		// connections sit in time-wait at once varies from run to run, and
		// with it the high-water mark of the CM's maps (further rounds of
		// 1,000 stay flat). What one connection could leave behind is larger
		// than 1 KiB (its CM state alone, with the REQ and the MADs it keeps
		// for retransmission; a QP's rings are over 10 KiB), so 1,000 of them
		// exceed the margin.
		const margin = 1 << 20
		if h1 > h0+margin {
			t.Errorf("heap in use grew from %d to %d bytes over %d connections", h0, h1, n)
		}
		if got := srv.events(); got != 2*n {
			t.Errorf("%d connect events, want %d", got, 2*n)
		}
	})
}
