package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// perftestPhase is the perftest tool that serves a phase of the demo on
// a peer running perftest in rdma_cm mode (-R): one server per phase, on
// ports counted up from -peer's.
type perftestPhase struct {
	name string
	tool string
	verb perftest.Verb
	kind perftest.Kind
	size func(demoFlags) int
	n    func(demoFlags) int
}

var perftestPhases = []perftestPhase{
	{"SEND", "ib_send_bw", perftest.Send, perftest.BW, func(f demoFlags) int { return f.sendSize }, func(f demoFlags) int { return f.messages }},
	{"WRITE", "ib_write_bw", perftest.Write, perftest.BW, func(f demoFlags) int { return f.rdmaSize }, func(f demoFlags) int { return f.rdmaOps }},
	{"READ", "ib_read_bw", perftest.Read, perftest.BW, func(f demoFlags) int { return f.rdmaSize }, func(f demoFlags) int { return f.rdmaOps }},
	{"ping-pong", "ib_send_lat", perftest.Send, perftest.Lat, func(demoFlags) int { return pingSize }, func(f demoFlags) int { return f.pings }},
}

// command is what the peer runs to serve ph on port.
func (ph perftestPhase) command(f demoFlags, port uint16) string {
	return fmt.Sprintf("%s -R -p %d -s %d -n %d", ph.tool, port, ph.size(f), ph.n(f))
}

// checkPerftestFlags refuses counts and sizes perftest does not run.
func checkPerftestFlags(f demoFlags) error {
	for _, ph := range perftestPhases {
		if n := ph.n(f); n < perftest.MinIters {
			return cmdline.Usagef("-peer-kind perftest: %s's %s runs at least %d iterations, not %d", ph.name, ph.tool, perftest.MinIters, n)
		}
		if s := ph.size(f); s > perftest.MaxSize {
			return cmdline.Usagef("-peer-kind perftest: %s's %s moves at most %d bytes a message, not %d", ph.name, ph.tool, perftest.MaxSize, s)
		}
	}
	return nil
}

// runPerftest runs each phase whose perftest server answers at the peer
// and skips, saying why, those whose server does not.
func (p *peerDemo) runPerftest(ctx context.Context, stdout io.Writer) error {
	p.served, p.rttLabel, p.rttWhat = "perftest -R servers", "SEND", "round trips, ib_send_lat's one-way figures doubled"
	fmt.Fprintf(stdout, "peer: %v (-peer-kind perftest: one perftest server per phase, ports from %d; start them there first):\n", p.peer.Addr(), p.peer.Port())
	for i, ph := range perftestPhases {
		fmt.Fprintf(stdout, "  %-10s %s\n", ph.name+":", ph.command(p.f, p.peer.Port()+uint16(i)))
	}
	fmt.Fprintf(stdout, "  perftest's servers do not check what they receive: no phase verifies contents\n")
	ran := 0
	for i, ph := range perftestPhases {
		port := p.peer.Port() + uint16(i)
		params := perftest.Params{Verb: ph.verb, Kind: ph.kind, Size: ph.size(p.f), Iterations: ph.n(p.f), Port: port,
			MTU: p.side.dev.Adapter.PathMTU(), ConnectRetry: perftest.Retry{Attempts: 10, Interval: 100 * time.Millisecond},
			Comm: perftest.CommRDMACM} // the servers it names run -R
		cmdline.EnterPhase(ctx, ph.name+" ("+ph.tool+")")
		fmt.Fprintf(stdout, "%s: %s at %v:%d...\n", ph.name, ph.tool, p.peer.Addr(), port)
		before := adapterCounts(p.side.dev.Adapter)
		res, err := perftest.RunClient(ctx, params, &ndkverbs.Connector{Dev: p.side.dev, Peer: p.peer.Addr()}, io.Discard)
		during := adapterCounts(p.side.dev.Adapter).since(before)
		var rej *ndk.RejectError
		if errors.As(err, &rej) && rej.Reason == rocev2.RejInvalidServiceID && ctx.Err() == nil {
			fmt.Fprintf(stdout, "%s: skipped: nobody listens at %v:%d (REJ reason 8): the peer runs no %s\n", ph.name, p.peer.Addr(), port, ph.tool)
			p.lines = append(p.lines, fmt.Sprintf("  %-6s skipped (no %s at port %d)", ph.name, ph.tool, port))
			continue
		}
		if err != nil {
			return fmt.Errorf("%s (%s at %v:%d): %w", ph.name, ph.tool, p.peer.Addr(), port, err)
		}
		ran++
		if ph.kind == perftest.Lat {
			p.rtt, p.rttTail = rttFromPerftest(res.Lat), during
			continue
		}
		p.lines = append(p.lines, bwLine(ph, res.BW)+during.note())
	}
	if p.rtt.N == 0 {
		p.rttWhat = "round trips: no ib_send_lat answered"
	}
	fmt.Fprintf(stdout, "connections: %d perftest runs, each a control and a data connection\n", ran)
	return nil
}

// bwLine is a bandwidth phase's report line from perftest's row; it says
// that no byte was checked.
func bwLine(ph perftestPhase, r *perftest.Report) string {
	if r == nil {
		return fmt.Sprintf("  %-6s ran, but %s reported no bandwidth", ph.name, ph.tool)
	}
	return fmt.Sprintf("  %-6s %7d x %-8d %10.0f messages/s %8.2f Gbit/s (%s; contents not checked)",
		ph.name, r.Iters, r.Size, r.MsgRate*1e6, r.BWAvg*(1<<20)*8/1e9, ph.tool)
}

// rttFromPerftest turns ib_send_lat's row, which halves each round trip,
// back into round trips: typical (the median) as p50.
func rttFromPerftest(s *perftest.LatStats) baseline.Latency {
	if s == nil {
		return baseline.Latency{}
	}
	rt := func(v float64) time.Duration { return time.Duration(2 * v * float64(time.Microsecond)) }
	return baseline.Latency{N: s.Iters, P50: rt(s.Typical), P99: rt(s.Percentile99), P999: rt(s.Percentile999), Max: rt(s.Max)}
}
