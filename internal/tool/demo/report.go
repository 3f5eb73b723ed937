package demo

import (
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

type phase struct {
	ops     int
	bytes   uint64
	elapsed time.Duration
}

func (p phase) line(op string, size int) string {
	s := p.elapsed.Seconds()
	return fmt.Sprintf("  %-6s %7d x %-8d %10.0f messages/s %8.2f Gbit/s", op, p.ops, size, float64(p.ops)/s, float64(p.bytes)*8/s/1e9)
}

// transportCounts are the recoveries that lengthen a latency tail: RNR
// NAKs (a SEND found no receive posted and waited out the RNR timer),
// go-back-N retransmission rounds and ACK timeouts, over both hosts.
type transportCounts struct {
	rnr, retransmits, timeouts uint64
	// The engines' waits: sleeps of adaptive polling, and idle yields
	// another thread answered with a whole time slice (a shared core).
	sleeps, slowYields uint64
}

func (d *demo) counts() transportCounts { return adapterCounts(d.served[:]...) }

// adapterCounts sums the recoveries and waits of the adapters' engines.
func adapterCounts(as ...*ndk.Adapter) transportCounts {
	var c transportCounts
	for _, a := range as {
		var st ndk.EngineStats
		for _, s := range a.Stats() {
			st.Add(s)
		}
		c.rnr += st.RNRReceived
		c.retransmits += st.Retransmits
		c.timeouts += st.Timeouts
		c.sleeps += st.Sleeps
		c.slowYields += st.SlowYields
	}
	return c
}

func (c transportCounts) since(before transportCounts) transportCounts {
	return transportCounts{c.rnr - before.rnr, c.retransmits - before.retransmits, c.timeouts - before.timeouts,
		c.sleeps - before.sleeps, c.slowYields - before.slowYields}
}

// note names the recoveries of a phase beside its figures, where they
// explain a tail; a clean phase gets no note.
func (c transportCounts) note() string {
	if c.rnr == 0 && c.retransmits == 0 && c.timeouts == 0 {
		return ""
	}
	return fmt.Sprintf("; %d RNR NAKs, %d retransmission rounds, %d ACK timeouts during this phase (each adds a timer's wait to some requests)",
		c.rnr, c.retransmits, c.timeouts)
}

// waitsNote names, beside a latency line, the engines' waits during the
// phase, which lengthen a tail when no recovery does.
func (c transportCounts) waitsNote() string {
	if c.sleeps == 0 && c.slowYields == 0 {
		return ""
	}
	return fmt.Sprintf("; engines slept %d times and lost %d time slices to other threads", c.sleeps, c.slowYields)
}
