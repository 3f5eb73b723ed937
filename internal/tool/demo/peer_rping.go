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
	"github.com/ndkxdp/ndkxdp/internal/tool/rping"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// rpingMapping is what of the demo a peer running rping -s (Linux rping,
// hardware or rxe, or `ndkxdp rping -s`) serves, and why not the rest.
var rpingMapping = []struct{ phase, text string }{
	{"connect", "runs: one connection through the IB CM (REQ/REP/RTU) with rping's parameters"},
	{"SEND", "skipped: rping -s takes only its 16-byte buffer adverts; a stream of the demo's messages would end its run as bogus data"},
	{"WRITE", "skipped: rping -s advertises no memory to WRITE into; it WRITEs into this host's instead (in each round trip)"},
	{"READ", "skipped: rping -s advertises no memory to READ; it READs this host's instead (in each round trip)"},
	{"ping-pong", "runs as rping's round trips: per ping a SEND, the peer's READ of the ping, a go-ahead, a SEND, the peer's WRITE of it back, a go-ahead; each pong compared with its ping (rping -V)"},
}

// runRping runs the phases rping -s at the peer serves: rping's round
// trips, timed as the ping-pong is.
func (p *peerDemo) runRping(ctx context.Context, stdout io.Writer) error {
	p.served, p.rttLabel = "rping -s", "rping"
	fmt.Fprintf(stdout, "peer: %v (-peer-kind rping: rping -s there serves rping's exchange, not the demo's phases)\n", p.peer)
	for _, m := range rpingMapping {
		fmt.Fprintf(stdout, "  %-10s %s\n", m.phase+":", m.text)
	}
	a := p.side.dev.Adapter
	samples := make([]time.Duration, 0, p.f.pings)
	cfg := rping.Config{Size: pingSize, Count: p.f.pings + pingWarmup, Validate: true,
		Phase: func(s string) { cmdline.EnterPhase(ctx, "rping "+s) },
		Timed: func(ping int, rtt time.Duration) {
			if ping >= pingWarmup {
				samples = append(samples, rtt)
			}
		}}
	fmt.Fprintf(stdout, "rping: %d round trips of %d bytes (%d untimed first)...\n", cfg.Count, pingSize, pingWarmup)
	before := adapterCounts(a)
	st, err := rping.RunClient(ctx, cfg, &ndkverbs.Connector{Dev: p.side.dev, Peer: p.peer.Addr()}, p.peer.Port())
	if err != nil {
		return fmt.Errorf("rping, after %d round trips: %w", st.Pings, rpingPeerError(p, err))
	}
	p.rtt, p.rttTail = baseline.Summarize(samples), adapterCounts(a).since(before)
	p.rttWhat = fmt.Sprintf("round trips of %d bytes", pingSize)
	p.lines = append(p.lines, fmt.Sprintf("  %-6s %7d x %-8d READ by the peer and written back, each compared: %d bytes each way",
		"rping", st.Pings, pingSize, st.Pings*pingSize))
	fmt.Fprintf(stdout, "connections: 1 set up with REQ/REP/RTU and torn down with DREQ/DREP\n")
	return nil
}

// rpingPeerError says what an rping run's failure means at the peer.
func rpingPeerError(p *peerDemo, err error) error {
	var rej *ndk.RejectError
	if errors.As(err, &rej) && rej.Reason == rocev2.RejInvalidServiceID {
		return fmt.Errorf("nobody listens at %v (REJ reason %d, %v): start rping -s -a %v -P there (or ndkxdp rping -s), or give the port it serves on",
			p.peer, rej.Reason, rej.Reason, p.peer.Addr())
	}
	if errors.As(err, &rej) {
		if why, ok := rejectText(rej.PrivateData); ok {
			return fmt.Errorf("the peer at %v refused (REJ reason %d, %v): %s (is ndkxdp demo -serve there? then leave out -peer-kind)", p.peer, rej.Reason, rej.Reason, why)
		}
		return fmt.Errorf("the peer at %v refused (REJ reason %d, %v): %w", p.peer, rej.Reason, rej.Reason, err)
	}
	return err
}
