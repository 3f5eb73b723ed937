package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// peerDemo is `demo -dev IF -peer ADDR`: this host's side and the report
// its phases write.
type peerDemo struct {
	f       demoFlags
	side    *demoSide
	peer    netip.AddrPort
	lines   []string
	rtt     baseline.Latency
	rttTail transportCounts
	// rttLabel and rttWhat name the round trips the RTT line times.
	rttLabel, rttWhat string
	// served says what served the phases, for the report's title.
	served string
}

// peerPhase is one phase against a demo server: what the REQ asks for,
// and the client's half of the phase, given the server's reply.
type peerPhase struct {
	name, what string
	req        demoRequest
	run        func(ctx context.Context, a *Host, qa *ndk.QP, rep demoReply) (phase, baseline.Latency, error)
	label      string // the report line's op; "" for the ping-pong
	size       int
}

func peerPhases(f demoFlags) []peerPhase {
	return []peerPhase{
		{"SEND", fmt.Sprintf("SEND: %d messages of %d bytes to the peer, contents verified there", f.messages, f.sendSize),
			demoRequest{Op: opSend, Size: uint32(f.sendSize), Count: uint32(f.messages)},
			func(ctx context.Context, a *Host, qa *ndk.QP, _ demoReply) (phase, baseline.Latency, error) {
				r, err := peerSend(ctx, a, qa, f.messages, f.sendSize)
				return r, baseline.Latency{}, err
			}, "SEND", f.sendSize},
		{"WRITE", fmt.Sprintf("WRITE: %d x %d bytes into the peer's memory, contents verified there", f.rdmaOps, f.rdmaSize),
			demoRequest{Op: opWrite, Size: uint32(f.rdmaSize), Count: uint32(f.rdmaOps)},
			func(ctx context.Context, a *Host, qa *ndk.QP, rep demoReply) (phase, baseline.Latency, error) {
				r, err := peerWrite(ctx, a, qa, f.rdmaOps, f.rdmaSize, rep)
				return r, baseline.Latency{}, err
			}, "WRITE", f.rdmaSize},
		{"READ", fmt.Sprintf("READ: %d x %d bytes from the peer's memory, contents verified", f.rdmaOps, f.rdmaSize),
			demoRequest{Op: opRead, Size: uint32(f.rdmaSize), Count: uint32(f.rdmaOps)},
			func(ctx context.Context, a *Host, qa *ndk.QP, rep demoReply) (phase, baseline.Latency, error) {
				r, err := peerRead(ctx, a, qa, f.rdmaOps, f.rdmaSize, rep)
				return r, baseline.Latency{}, err
			}, "READ", f.rdmaSize},
		{"ping-pong", fmt.Sprintf("ping-pong: %d SEND round trips of %d bytes", f.pings, pingSize),
			demoRequest{Op: opPingPong, Size: pingSize, Count: uint32(f.pings + pingWarmup)},
			func(ctx context.Context, a *Host, qa *ndk.QP, _ demoReply) (phase, baseline.Latency, error) {
				rtt, err := pingPeer(ctx, a, qa, f.pings)
				return phase{}, rtt, err
			}, "", pingSize},
	}
}

// run runs every phase against `demo -serve` at the peer, one connection
// each, and notes beside each phase's line the RNR NAKs and
// retransmissions this host counted during it.
func (p *peerDemo) run(ctx context.Context, stdout io.Writer) error {
	p.served, p.rttLabel, p.rttWhat = "ndkxdp demo -serve", "SEND", "round trips"
	fmt.Fprintf(stdout, "peer: %v (-peer-kind ndkxdp: ndkxdp demo -serve there serves every phase)\n", p.peer)
	phases := peerPhases(p.f)
	for i, ph := range phases {
		ph.req.Last = i == len(phases)-1
		r, rtt, during, err := p.runPhase(ctx, ph, stdout)
		if err != nil {
			return err
		}
		if ph.label == "" {
			p.rtt, p.rttTail = rtt, during
		} else {
			p.lines = append(p.lines, r.line(ph.label, ph.size)+during.note())
		}
	}
	fmt.Fprintf(stdout, "connections: %d set up with REQ/REP/RTU and torn down with DREQ/DREP\n", len(phases))
	return nil
}

func (p *peerDemo) runPhase(ctx context.Context, ph peerPhase, stdout io.Writer) (phase, baseline.Latency, transportCounts, error) {
	a := p.side.host
	cmdline.EnterPhase(ctx, "connection set-up for "+ph.name)
	cn, rep, err := connectPeer(ctx, a, p.peer, ph.req)
	if err != nil {
		return phase{}, baseline.Latency{}, transportCounts{}, fmt.Errorf("%s: %w", ph.name, err)
	}
	fmt.Fprintf(stdout, "%s (QP 0x%06x, connected through the IB CM: %v -> %v)...\n", ph.what, cn.qa.QPN(), cn.ca.LocalAddress(), cn.ca.PeerAddress())
	cmdline.EnterPhase(ctx, ph.name)
	before := adapterCounts(a.Adapter)
	r, rtt, err := ph.run(ctx, a, cn.qa, rep)
	during := adapterCounts(a.Adapter).since(before)
	if err == nil {
		cmdline.EnterPhase(ctx, "disconnection after "+ph.name)
	}
	if derr := cn.Disconnect(ctx); err == nil {
		err = derr
	}
	if err != nil {
		return phase{}, baseline.Latency{}, transportCounts{}, fmt.Errorf("%s: %w", ph.what, err)
	}
	return r, rtt, during, nil
}

// connectPeer connects a fresh QP on a to the demo server at peer with
// req, and returns the server's reply; a REJ or a REP that is not a demo
// server's is an error saying so.
func connectPeer(ctx context.Context, a *Host, peer netip.AddrPort, req demoRequest) (*Connection, demoReply, error) {
	if err := a.NewCQs(); err != nil {
		return nil, demoReply{}, err
	}
	cn := &Connection{}
	var err error
	if cn.qa, err = a.PD.CreateQP(demoQPConfig(a)); err != nil {
		return nil, demoReply{}, err
	}
	if cn.ca, err = a.Adapter.CreateConnector(); err != nil {
		cn.close()
		return nil, demoReply{}, err
	}
	const connectBound = 30 * time.Second
	cctx, cancel := context.WithTimeout(ctx, connectBound)
	defer cancel()
	if err := cn.ca.Connect(cctx, cn.qa, netip.AddrPort{}, peer, demoReadLimit, demoReadLimit, req.encode()); err != nil {
		cn.close()
		if ctx.Err() == nil && cctx.Err() != nil {
			return nil, demoReply{}, fmt.Errorf("the peer at %v did not answer within %v: is it up, and does %v reach it?", peer, connectBound, a.Name)
		}
		return nil, demoReply{}, peerConnectError(peer, err)
	}
	var buf [ndk.MaxCalleeData]byte
	_, _, n, err := cn.ca.GetConnectionData(buf[:])
	var rep demoReply
	if err == nil {
		rep, err = decodeDemoReply(buf[:n])
	}
	if err != nil {
		_ = cn.ca.Reject(rejectData(err.Error()))
		cn.close()
		return nil, demoReply{}, fmt.Errorf("the peer at %v: %w", peer, err)
	}
	if err := cn.ca.CompleteConnect(nil); err != nil {
		cn.close()
		return nil, demoReply{}, err
	}
	return cn, rep, nil
}

// peerConnectError says why Connect to peer failed: a demo server's REJ
// with its sentence, nobody listening, or the CM's error.
func peerConnectError(peer netip.AddrPort, err error) error {
	var rej *ndk.RejectError
	if !errors.As(err, &rej) {
		return fmt.Errorf("connect to %v: %w", peer, err)
	}
	if why, ok := rejectText(rej.PrivateData); ok {
		return fmt.Errorf("the peer at %v refused (REJ reason %d, %v): %s", peer, rej.Reason, rej.Reason, why)
	}
	if rej.Reason == rocev2.RejInvalidServiceID {
		return fmt.Errorf("nobody listens at %v (REJ reason %d, %v): start `ndkxdp demo -dev IF -serve` there, or give the port it serves on", peer, rej.Reason, rej.Reason)
	}
	return fmt.Errorf("the peer at %v refused (REJ reason %d, %v)", peer, rej.Reason, rej.Reason)
}

// verdictBound is how long the client waits for the server's verdict
// after its last request completed.
const verdictBound = 10 * time.Second

// awaitVerdict waits for the server's verdict in buf, received on a's
// receive CQ, and returns what it found wrong.
func awaitVerdict(ctx context.Context, a *Host, buf []byte) error {
	var r ndk.Result
	if err := WaitOne(ctx, a.RCQ, &r, time.Now().Add(verdictBound)); err != nil {
		return fmt.Errorf("the peer's verdict: %w", err)
	}
	v, err := decodeDemoNote(buf[:min(int(r.BytesTransferred), len(buf))])
	if err != nil {
		return err
	}
	if v.Failed {
		return fmt.Errorf("the peer found: %s", v.Text)
	}
	return nil
}

// noteBuffers gives n bytes of a's memory for the phase, followed by two
// notes' (the one it sends, the verdict it receives), registered as one
// MR; the verdict's receive is posted.
func noteBuffers(a *Host, qa *ndk.QP, n int, flags ndk.MRFlag) (mem, out, verdict []byte, mr *ndk.MR, err error) {
	all, err := a.Adapter.Memory(n + 2*demoNoteLen)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("%s: memory: %w", a.Name, err)
	}
	if mr, err = a.PD.RegisterMR(all, flags|ndk.MRFlagAllowLocalRead|ndk.MRFlagAllowLocalWrite); err != nil {
		return nil, nil, nil, nil, err
	}
	sge, err := mr.SGE(n+demoNoteLen, demoNoteLen)
	if err == nil {
		err = qa.Receive(nil, []ndk.SGE{sge})
	}
	if err != nil {
		mr.Deregister()
		return nil, nil, nil, nil, err
	}
	return all[:n], all[n : n+demoNoteLen], all[n+demoNoteLen:], mr, nil
}

// peerSend streams n SENDs of size bytes to the server, which checks each
// and answers with its verdict.
func peerSend(ctx context.Context, a *Host, qa *ndk.QP, n, size int) (phase, error) {
	s := newSendStream(a, nil, qa, nil, n, size)
	var verdict []byte
	var err error
	if s.src, _, verdict, s.smr, err = noteBuffers(a, qa, size*demoQueueDepth, 0); err != nil {
		return phase{}, err
	}
	defer s.smr.Deregister()
	t0 := time.Now()
	if err := s.send(ctx); err != nil {
		return phase{}, err
	}
	if err := awaitVerdict(ctx, a, verdict); err != nil {
		return phase{}, err
	}
	return phase{ops: n, bytes: uint64(n) * uint64(size), elapsed: time.Since(t0)}, nil
}

// peerWrite WRITEs n times into the server's slots, tells it the count,
// and waits for its verdict on its memory.
func peerWrite(ctx context.Context, a *Host, qa *ndk.QP, n, size int, rep demoReply) (phase, error) {
	src, done, verdict, mr, err := noteBuffers(a, qa, size*rdmaSlots, 0)
	if err != nil {
		return phase{}, err
	}
	defer mr.Deregister()
	p, err := writeSlots(ctx, a.ICQ, qa, mr, src, n, size, rep.Addr, rep.Token)
	if err != nil {
		return phase{}, err
	}
	demoNote{Value: uint64(n)}.put(done)
	sge, err := mr.SGE(len(src), demoNoteLen)
	if err == nil {
		err = qa.Send(nil, []ndk.SGE{sge}, ndk.OpFlagSilentSuccess)
	}
	if err != nil {
		return phase{}, err
	}
	if err := awaitVerdict(ctx, a, verdict); err != nil {
		return phase{}, err
	}
	return p, nil
}

// peerRead READs n times from the server's slots, which hold readFill's
// pattern, and checks each.
func peerRead(ctx context.Context, a *Host, qa *ndk.QP, n, size int, rep demoReply) (phase, error) {
	dst, err := a.Adapter.Memory(size * rdmaSlots)
	if err != nil {
		return phase{}, fmt.Errorf("%s: memory: %w", a.Name, err)
	}
	mr, err := a.PD.RegisterMR(dst, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		return phase{}, err
	}
	defer mr.Deregister()
	want := make([]byte, len(dst))
	readFill(want, size)
	return readSlots(ctx, a.ICQ, qa, mr, dst, want, n, size, rep.Addr, rep.Token)
}

// printReport prints the report in the shape of the embedded demo's, for
// this host alone: the peer's counters are the peer's.
func (p *peerDemo) printReport(w io.Writer) {
	fmt.Fprintf(w, "\nreport (against %s at %v):\n", p.served, p.peer)
	for _, l := range p.lines {
		fmt.Fprintln(w, l)
	}
	r := p.rtt
	fmt.Fprintf(w, "  %-6s RTT p50 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us (%d %s)%s\n",
		p.rttLabel, us(r.P50), us(r.P99), us(r.P999), us(r.Max), r.N, p.rttWhat, p.rttTail.note()+p.rttTail.waitsNote())
	var st ndk.EngineStats
	for _, s := range p.side.dev.Adapter.Stats() {
		st.Add(s)
	}
	fmt.Fprintf(w, "  %s: %d frames out, %d in, %d bad ICRC, %d retransmission rounds, %d RNR NAKs received\n",
		p.side.name, st.FramesOut, st.FramesIn, st.BadICRC, st.Retransmits, st.RNRReceived)
}
