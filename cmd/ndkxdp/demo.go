package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/ndkhost"
	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/ndk"
)

type demoFlags struct {
	dev        string
	mtu        int
	messages   int
	sendSize   int
	rdmaSize   int
	rdmaOps    int
	pings      int
	mode       string
	polling    string
	capture    string
	captureMax int
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f demoFlags
	fs.StringVar(&f.dev, "dev", "", "run on this real NIC instead of the embedded veth pair (not supported yet)")
	fs.IntVar(&f.mtu, "mtu", 1500, "MTU of the embedded veth pair (1500 gives path MTU 1024, 9000 gives 4096)")
	fs.IntVar(&f.messages, "messages", 20000, "SEND messages to exchange and verify")
	fs.IntVar(&f.sendSize, "send-size", 64, "bytes per SEND")
	fs.IntVar(&f.rdmaSize, "rdma-size", 64<<10, "bytes per WRITE and READ")
	fs.IntVar(&f.rdmaOps, "rdma-ops", 500, "WRITEs and READs to run and verify")
	fs.IntVar(&f.pings, "pings", 5000, "SEND ping-pong round trips to time")
	fs.StringVar(&f.mode, "xdp-mode", "auto", "XDP attach mode: auto, driver or generic")
	fs.StringVar(&f.polling, "polling", "adaptive", "engine polling: adaptive or busy")
	fs.StringVar(&f.capture, "capture", "", "write every RoCEv2 frame both hosts exchange to this pcap file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.dev != "" {
		return fmt.Errorf("-dev %s: running on a real NIC needs a remote peer and is not supported yet; omit -dev to use the embedded veth pair", f.dev)
	}
	switch {
	case f.messages < 1 || f.messages > 10_000_000:
		return errors.New("-messages must be in [1, 10000000]")
	case f.sendSize < 8 || f.sendSize > 1<<20:
		return errors.New("-send-size must be in [8, 1048576]")
	case f.rdmaSize < 1 || f.rdmaSize > 16<<20:
		return errors.New("-rdma-size must be in [1, 16777216]")
	case f.rdmaOps < 1 || f.rdmaOps > 1_000_000:
		return errors.New("-rdma-ops must be in [1, 1000000]")
	case f.pings < 1 || f.pings > 1_000_000:
		return errors.New("-pings must be in [1, 1000000]")
	}
	opts, err := adapterOptions(f.mode, f.polling)
	if err != nil {
		return err
	}
	if err := requireRoot(); err != nil {
		return err
	}

	start := time.Now()
	var capture *sharedCapture
	optsA, optsB := opts, opts
	if f.capture != "" {
		file, err := os.Create(f.capture)
		if err != nil {
			return err
		}
		defer file.Close()
		capture = &sharedCapture{w: file}
		optsA.Capture, optsB.Capture = capture.stream(), capture.stream()
	}
	p, err := vethpair.NewPair(vethpair.Config{MTU: f.mtu})
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Fprintf(stdout, "hosts: %s %s <-> %s %s (veth, MTU %d)\n", p.A.Name, p.A.IPv4, p.B.Name, p.B.IPv4, f.mtu)

	a, err := ndkhost.Open(p.A, ndkhost.Config{Options: optsA})
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := ndkhost.Open(p.B, ndkhost.Config{Options: optsB})
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(stdout, "adapters: ndkxdp on %s and %s, path MTU %d, %s polling\n", p.A.Link, p.B.Link, a.Adapter.PathMTU(), f.polling)

	// Each phase runs on a fresh, connected QP pair, so that no phase
	// inherits another's posted receives.
	var report []string
	var rtt baseline.Latency
	phases := []struct {
		what string
		run  func(qa, qb *ndk.QP) error
	}{
		{fmt.Sprintf("SEND: %d messages of %d bytes, A -> B, contents verified", f.messages, f.sendSize), func(qa, qb *ndk.QP) error {
			r, err := demoSend(ctx, a, b, qa, qb, f.messages, f.sendSize)
			report = append(report, r.line("SEND", f.sendSize))
			return err
		}},
		{fmt.Sprintf("WRITE: %d x %d bytes into B's memory, contents verified", f.rdmaOps, f.rdmaSize), func(qa, _ *ndk.QP) error {
			r, err := demoWrite(ctx, a, b, qa, f.rdmaOps, f.rdmaSize)
			report = append(report, r.line("WRITE", f.rdmaSize))
			return err
		}},
		{fmt.Sprintf("READ: %d x %d bytes from B's memory, contents verified", f.rdmaOps, f.rdmaSize), func(qa, _ *ndk.QP) error {
			r, err := demoRead(ctx, a, b, qa, f.rdmaOps, f.rdmaSize)
			report = append(report, r.line("READ", f.rdmaSize))
			return err
		}},
		{fmt.Sprintf("ping-pong: %d SEND round trips of 64 bytes", f.pings), func(qa, qb *ndk.QP) error {
			var err error
			rtt, err = demoPingPong(ctx, a, b, qa, qb, f.pings)
			return err
		}},
	}
	srv, err := listenCM(b, netip.AddrPortFrom(p.B.IPv4, demoPort))
	if err != nil {
		return err
	}
	defer srv.l.Close()
	for _, ph := range phases {
		cn, err := connectCM(ctx, a, b, srv)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s (QP 0x%06x <-> QP 0x%06x, connected through the IB CM: %v -> %v)...\n",
			ph.what, cn.qa.QPN(), cn.qb.QPN(), cn.ca.LocalAddress(), cn.ca.PeerAddress())
		err = ph.run(cn.qa, cn.qb)
		if derr := cn.disconnect(ctx); err == nil {
			err = derr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", ph.what, err)
		}
	}
	fmt.Fprintf(stdout, "connections: %d set up with REQ/REP/RTU and torn down with DREQ/DREP\n", len(phases))

	fmt.Fprintf(stdout, "\nreport:\n")
	for _, l := range report {
		fmt.Fprintln(stdout, l)
	}
	fmt.Fprintf(stdout, "  %-6s RTT p50 %.1f us, p99 %.1f us (%d round trips)\n", "SEND", us(rtt.P50), us(rtt.P99), rtt.N)
	for _, x := range []*ndkhost.Host{a, b} {
		var st ndk.EngineStats
		for _, s := range x.Adapter.Stats() {
			st.Add(s)
		}
		fmt.Fprintf(stdout, "  %s: %d frames out, %d in, %d bad ICRC, %d retransmission rounds, %d RNR NAKs received\n",
			x.Net.Name, st.FramesOut, st.FramesIn, st.BadICRC, st.Retransmits, st.RNRReceived)
	}
	a.Close()
	b.Close()
	if capture != nil {
		if err := capture.Err(); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		fmt.Fprintf(stdout, "capture: %s (RoCEv2 frames of both hosts)\n", f.capture)
	}
	fmt.Fprintf(stdout, "done in %v; namespaces removed\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func adapterOptions(mode, polling string) (ndk.Options, error) {
	var o ndk.Options
	switch mode {
	case "auto":
		o.XDPMode = ndk.XDPAuto
	case "driver":
		o.XDPMode = ndk.XDPDriver
	case "generic":
		o.XDPMode = ndk.XDPGeneric
	default:
		return o, fmt.Errorf("unknown -xdp-mode %q (want auto, driver or generic)", mode)
	}
	switch polling {
	case "adaptive":
		o.Polling = ndk.PollAdaptive
	case "busy":
		o.Polling = ndk.PollBusy
	default:
		return o, fmt.Errorf("unknown -polling %q (want adaptive or busy)", polling)
	}
	return o, nil
}

const demoQueueDepth = 1024

// demoPort is the port B listens on: its rdma_cm ServiceID is
// RDMA_PS_TCP | 7174, as for `rping -s -p 7174`.
const demoPort = 7174

// demoReadLimit is both sides' inbound and outbound read limit.
const demoReadLimit = 16

// cmServer is B's listener: each connect request is accepted with the QP
// the next phase handed it.
type cmServer struct {
	l        *ndk.Listener
	qps      chan *ndk.QP
	accepted chan acceptResult
}

type acceptResult struct {
	c   *ndk.Connector
	err error
}

func listenCM(b *ndkhost.Host, addr netip.AddrPort) (*cmServer, error) {
	s := &cmServer{qps: make(chan *ndk.QP, 1), accepted: make(chan acceptResult, 1)}
	var err error
	s.l, err = b.Adapter.CreateListener(func(c *ndk.Connector) {
		var qp *ndk.QP
		select {
		case qp = <-s.qps:
		default:
			c.Reject(nil) // a request the demo did not make
			c.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.accepted <- acceptResult{c, c.Accept(ctx, qp, demoReadLimit, demoReadLimit, nil, nil)}
	})
	if err != nil {
		return nil, err
	}
	if err := s.l.Listen(addr); err != nil {
		s.l.Close()
		return nil, err
	}
	return s, nil
}

// cmConnection is one phase's connection: a QP and a connector per side.
type cmConnection struct {
	qa, qb *ndk.QP
	ca, cb *ndk.Connector
}

// connectCM gives both hosts fresh CQs and QPs and connects them through
// the IB CM: A's Connector sends REQ to B's listener, which accepts (REP),
// and A completes (RTU).
func connectCM(ctx context.Context, a, b *ndkhost.Host, srv *cmServer) (*cmConnection, error) {
	cfg := func(x *ndkhost.Host) ndk.QPConfig {
		return ndk.QPConfig{ReceiveCQ: x.RCQ, InitiatorCQ: x.ICQ, ReceiveQueueDepth: demoQueueDepth,
			InitiatorQueueDepth: demoQueueDepth, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}
	}
	for _, x := range []*ndkhost.Host{a, b} {
		if err := x.NewCQs(); err != nil {
			return nil, err
		}
	}
	cn := &cmConnection{}
	var err error
	if cn.qa, err = a.PD.CreateQP(cfg(a)); err != nil {
		return nil, err
	}
	if cn.qb, err = b.PD.CreateQP(cfg(b)); err != nil {
		cn.qa.Close()
		return nil, err
	}
	if cn.ca, err = a.Adapter.CreateConnector(); err != nil {
		cn.close()
		return nil, err
	}
	srv.qps <- cn.qb
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cn.ca.Connect(cctx, cn.qa, netip.AddrPort{}, srv.l.LocalAddress(), demoReadLimit, demoReadLimit, nil); err != nil {
		select {
		case <-srv.qps: // the request never reached the listener
		default:
		}
		cn.close()
		return nil, fmt.Errorf("connect to %v: %w", srv.l.LocalAddress(), err)
	}
	if err := cn.ca.CompleteConnect(nil); err != nil {
		cn.close()
		return nil, err
	}
	select {
	case r := <-srv.accepted:
		cn.cb = r.c
		if r.err != nil {
			cn.close()
			return nil, fmt.Errorf("accept: %w", r.err)
		}
	case <-cctx.Done():
		cn.close()
		return nil, fmt.Errorf("accept: %w", cctx.Err())
	}
	return cn, nil
}

// disconnect ends the connection from A (DREQ, answered by DREP) and
// closes both connectors and QPs.
func (cn *cmConnection) disconnect(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := cn.ca.Disconnect(dctx)
	cn.close()
	if err != nil {
		return fmt.Errorf("disconnect: %w", err)
	}
	return nil
}

func (cn *cmConnection) close() {
	for _, c := range []*ndk.Connector{cn.ca, cn.cb} {
		if c != nil {
			c.Close()
			select {
			case <-c.Closed():
			case <-time.After(10 * time.Second):
			}
		}
	}
	for _, q := range []*ndk.QP{cn.qa, cn.qb} {
		if q != nil {
			q.Close()
		}
	}
}

type phase struct {
	ops     int
	bytes   uint64
	elapsed time.Duration
}

func (p phase) line(op string, size int) string {
	s := p.elapsed.Seconds()
	return fmt.Sprintf("  %-6s %7d x %-8d %10.0f messages/s %8.2f Gbit/s", op, p.ops, size, float64(p.ops)/s, float64(p.bytes)*8/s/1e9)
}

// waitOne polls cq until it yields one result or the deadline passes.
func waitOne(ctx context.Context, cq *ndk.CQ, r *ndk.Result, deadline time.Time) error {
	var rs [1]ndk.Result
	for cq.GetResults(rs[:]) == 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("no completion within 10s")
		}
		runtime.Gosched()
	}
	*r = rs[0]
	if r.Status != ndk.StatusSuccess {
		return fmt.Errorf("completion status %v", r.Status)
	}
	return nil
}

// demoSend streams n SENDs of size bytes from a to b; every message carries
// its sequence number and a pattern that b checks.
func demoSend(ctx context.Context, a, b *ndkhost.Host, qa, qb *ndk.QP, n, size int) (phase, error) {
	const slots = demoQueueDepth
	src := make([]byte, size*slots)
	dst := make([]byte, size*slots)
	smr, err := a.PD.RegisterMR(src, ndk.MRFlagAllowLocalRead)
	if err != nil {
		return phase{}, err
	}
	defer smr.Deregister()
	dmr, err := b.PD.RegisterMR(dst, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		return phase{}, err
	}
	defer dmr.Deregister()
	post := func(slot int) error {
		sge, err := dmr.SGE(slot*size, size)
		if err != nil {
			return err
		}
		return qb.Receive(slot, []ndk.SGE{sge})
	}
	for i := range slots {
		if err := post(i); err != nil {
			return phase{}, err
		}
	}
	errc := make(chan error, 1)
	go func() { // B: verify and repost each receive
		var rs [64]ndk.Result
		deadline := time.Now().Add(10 * time.Second)
		for got := 0; got < n; {
			k := b.RCQ.GetResults(rs[:])
			if k == 0 {
				if time.Now().After(deadline) || ctx.Err() != nil {
					errc <- fmt.Errorf("receiver: %d of %d messages after the deadline", got, n)
					return
				}
				runtime.Gosched()
				continue
			}
			deadline = time.Now().Add(10 * time.Second)
			for _, r := range rs[:k] {
				slot := r.RequestContext.(int)
				msg := dst[slot*size : (slot+1)*size]
				if r.Status != ndk.StatusSuccess || int(r.BytesTransferred) != size || !checkMessage(msg, uint64(got)) {
					errc <- fmt.Errorf("message %d arrived wrong (status %v, %d bytes)", got, r.Status, r.BytesTransferred)
					return
				}
				got++
				if err := post(slot); err != nil {
					errc <- err
					return
				}
			}
		}
		errc <- nil
	}()
	t0 := time.Now()
	var rs [64]ndk.Result
	inflight := 0
	for i := 0; i < n; {
		if inflight < slots/2 {
			slot := i % slots
			fillMessage(src[slot*size:(slot+1)*size], uint64(i))
			sge, _ := smr.SGE(slot*size, size)
			err := qa.Send(nil, []ndk.SGE{sge}, 0)
			if err == nil {
				i++
				inflight++
				continue
			}
			if !errors.Is(err, ndk.ErrInsufficientResources) {
				return phase{}, err
			}
		}
		k := a.ICQ.GetResults(rs[:])
		for _, r := range rs[:k] {
			if r.Status != ndk.StatusSuccess {
				return phase{}, fmt.Errorf("send completion %v", r.Status)
			}
		}
		inflight -= k
		if k == 0 {
			// The receiver gives up on ctx or its deadline and stops
			// reposting; the sender must stop too, not spin forever.
			if err := ctx.Err(); err != nil {
				return phase{}, err
			}
			select {
			case err := <-errc:
				if err == nil {
					err = errors.New("receiver stopped early")
				}
				return phase{}, err
			default:
			}
			runtime.Gosched()
		}
	}
	if err := <-errc; err != nil {
		return phase{}, err
	}
	elapsed := time.Since(t0)
	for deadline := time.Now().Add(10 * time.Second); inflight > 0; {
		var r ndk.Result
		if err := waitOne(ctx, a.ICQ, &r, deadline); err != nil {
			return phase{}, err
		}
		inflight--
	}
	return phase{ops: n, bytes: uint64(n) * uint64(size), elapsed: elapsed}, nil
}

func fillMessage(b []byte, seq uint64) {
	binary.LittleEndian.PutUint64(b, seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(seq) + byte(i)
	}
}

func checkMessage(b []byte, seq uint64) bool {
	if binary.LittleEndian.Uint64(b) != seq {
		return false
	}
	for i := 8; i < len(b); i++ {
		if b[i] != byte(seq)+byte(i) {
			return false
		}
	}
	return true
}

// rdmaSlots is how many WRITEs or READs the demo keeps in flight, each
// with its own slot of memory on both sides.
const rdmaSlots = 16

// demoWrite writes n messages of size bytes into b's memory, op i into slot
// i mod rdmaSlots with pattern i, keeping rdmaSlots in flight. A slot's
// source is refilled only after its previous WRITE completed; at the end
// every slot of b's memory must hold the last pattern written to it.
func demoWrite(ctx context.Context, a, b *ndkhost.Host, qa *ndk.QP, n, size int) (phase, error) {
	src := make([]byte, size*rdmaSlots)
	dst := make([]byte, size*rdmaSlots)
	smr, dmr, release, err := registerPair(a.PD, src, ndk.MRFlagAllowLocalRead, b.PD, dst, ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		return phase{}, err
	}
	defer release()
	t0 := time.Now()
	err = pipeline(ctx, a.ICQ, n, func(i int) error {
		slot := i % rdmaSlots
		fillMessage(src[slot*size:(slot+1)*size], uint64(i))
		sge, err := smr.SGE(slot*size, size)
		if err != nil {
			return err
		}
		return qa.Write(nil, []ndk.SGE{sge}, dmr.Addr()+uint64(slot*size), dmr.RemoteToken(), 0)
	}, nil)
	if err != nil {
		return phase{}, err
	}
	elapsed := time.Since(t0)
	b.Adapter.Stats() // orders this goroutine after B's engine placed the bytes
	if !bytes.Equal(dst, src) {
		return phase{}, errors.New("B's memory does not hold the last WRITE of every slot")
	}
	return phase{ops: n, bytes: uint64(n) * uint64(size), elapsed: elapsed}, nil
}

// registerPair registers src on spd and dst on dpd; release deregisters
// both.
func registerPair(spd *ndk.PD, src []byte, sflags ndk.MRFlag, dpd *ndk.PD, dst []byte, dflags ndk.MRFlag) (smr, dmr *ndk.MR, release func(), err error) {
	if smr, err = spd.RegisterMR(src, sflags); err != nil {
		return nil, nil, nil, err
	}
	if dmr, err = dpd.RegisterMR(dst, dflags); err != nil {
		smr.Deregister()
		return nil, nil, nil, err
	}
	return smr, dmr, func() { dmr.Deregister(); smr.Deregister() }, nil
}

// demoRead reads n messages of size bytes from b's memory, op i from slot
// i mod rdmaSlots into the same slot of a's memory, and checks each one as
// it completes.
func demoRead(ctx context.Context, a, b *ndkhost.Host, qa *ndk.QP, n, size int) (phase, error) {
	src := make([]byte, size*rdmaSlots)
	for slot := range rdmaSlots {
		fillMessage(src[slot*size:(slot+1)*size], uint64(slot)+0xabc)
	}
	dst := make([]byte, size*rdmaSlots)
	smr, dmr, release, err := registerPair(b.PD, src, ndk.MRFlagAllowRemoteRead, a.PD, dst, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		return phase{}, err
	}
	defer release()
	t0 := time.Now()
	err = pipeline(ctx, a.ICQ, n, func(i int) error {
		slot := i % rdmaSlots
		clear(dst[slot*size : (slot+1)*size])
		sge, err := dmr.SGE(slot*size, size)
		if err != nil {
			return err
		}
		return qa.Read(slot, []ndk.SGE{sge}, smr.Addr()+uint64(slot*size), smr.RemoteToken(), 0)
	}, func(r ndk.Result) error {
		slot := r.RequestContext.(int)
		if !bytes.Equal(dst[slot*size:(slot+1)*size], src[slot*size:(slot+1)*size]) {
			return fmt.Errorf("READ into slot %d returned other bytes than B's memory holds", slot)
		}
		return nil
	})
	if err != nil {
		return phase{}, err
	}
	return phase{ops: n, bytes: uint64(n) * uint64(size), elapsed: time.Since(t0)}, nil
}

// pipeline posts n requests with post(i), keeping at most rdmaSlots in
// flight, and hands each completion to done. Completions of one QP arrive
// in posting order, so request i's slot is free again once i-rdmaSlots has
// completed.
func pipeline(ctx context.Context, cq *ndk.CQ, n int, post func(i int) error, done func(ndk.Result) error) error {
	var rs [rdmaSlots]ndk.Result
	completed := 0
	deadline := time.Now().Add(30 * time.Second)
	for posted := 0; completed < n; {
		for posted < n && posted-completed < rdmaSlots {
			if err := post(posted); err != nil {
				return err
			}
			posted++
		}
		k := cq.GetResults(rs[:])
		for _, r := range rs[:k] {
			if r.Status != ndk.StatusSuccess {
				return fmt.Errorf("completion status %v", r.Status)
			}
			if done != nil {
				if err := done(r); err != nil {
					return err
				}
			}
		}
		completed += k
		if k == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d requests completed within 30s", completed, n)
			}
			runtime.Gosched()
		}
	}
	return nil
}

// demoPingPong bounces a 64-byte SEND between a and b.
func demoPingPong(ctx context.Context, a, b *ndkhost.Host, qa, qb *ndk.QP, n int) (baseline.Latency, error) {
	const size = 64
	buf := func(x *ndkhost.Host, flags ndk.MRFlag) (ndk.SGE, func(), error) {
		mr, err := x.PD.RegisterMR(make([]byte, size), flags)
		if err != nil {
			return ndk.SGE{}, nil, err
		}
		sge, err := mr.SGE(0, size)
		return sge, func() { mr.Deregister() }, err
	}
	sa, da, err := buf(a, ndk.MRFlagAllowLocalRead)
	if err != nil {
		return baseline.Latency{}, err
	}
	defer da()
	ra, dra, err := buf(a, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		return baseline.Latency{}, err
	}
	defer dra()
	sb, db, err := buf(b, ndk.MRFlagAllowLocalRead)
	if err != nil {
		return baseline.Latency{}, err
	}
	defer db()
	rb, drb, err := buf(b, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		return baseline.Latency{}, err
	}
	defer drb()
	if err := qa.Receive(nil, []ndk.SGE{ra}); err != nil {
		return baseline.Latency{}, err
	}
	if err := qb.Receive(nil, []ndk.SGE{rb}); err != nil {
		return baseline.Latency{}, err
	}
	stop := make(chan struct{})
	echo := make(chan error, 1)
	go func() {
		var r [1]ndk.Result
		for {
			select {
			case <-stop:
				echo <- nil
				return
			default:
			}
			if b.RCQ.GetResults(r[:]) == 0 {
				runtime.Gosched()
				continue
			}
			if err := qb.Receive(nil, []ndk.SGE{rb}); err != nil {
				echo <- err
				return
			}
			if err := qb.Send(nil, []ndk.SGE{sb}, ndk.OpFlagSilentSuccess); err != nil {
				echo <- err
				return
			}
		}
	}()
	samples := make([]time.Duration, 0, n)
	deadline := time.Now().Add(30 * time.Second)
	var r ndk.Result
	for i := 0; i < n+100; i++ {
		t0 := time.Now()
		if err = qa.Send(nil, []ndk.SGE{sa}, ndk.OpFlagSilentSuccess); err != nil {
			break
		}
		if err = waitOne(ctx, a.RCQ, &r, deadline); err != nil {
			break
		}
		rtt := time.Since(t0)
		if err = qa.Receive(nil, []ndk.SGE{ra}); err != nil {
			break
		}
		if i >= 100 {
			samples = append(samples, rtt)
		}
	}
	close(stop)
	if e := <-echo; err == nil {
		err = e
	}
	return baseline.Summarize(samples), err
}
