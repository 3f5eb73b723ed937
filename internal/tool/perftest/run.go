package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Result is what a run measured and learned.
type Result struct {
	Params      Params // after defaults
	PeerVersion string
	MTU         int // agreed path MTU in bytes
	Local, Peer Dest
	// BW is the bandwidth row the side printed: the client's own, and on a
	// write/read/atomic server the one the client sent (perftest's server
	// prints that). Nil for latency tests and for a read_lat server.
	BW *Report
	// Lat is the latency row the side printed (clients; both sides of
	// send and write latency).
	Lat *LatStats
	// LatDur is Lat's row in duration mode (-D).
	LatDur *LatDuration
	// Own is, under -b, this side's own row of the last size; BW is the
	// sum of both sides' that it printed.
	Own *Report
	// AllBW and AllLat are -a's rows, one a size; BW and Lat are the last.
	AllBW  []Report
	AllLat []LatStats
	// Hist is the distribution of Lat's samples (nil where Lat is).
	Hist *Histogram
	// Locals and Peers are every QP's pingpong_dest under -q, QP 0's
	// also in Local and Peer; nil with one QP.
	Locals, Peers []Dest
	// PerQP is, under -q, how many requests each QP completed (the
	// client) or receives it consumed (the send bw server).
	PerQP []int
	// Waits is how often the data path's polling blocked (verbs.Backoff):
	// each costs a wake-up, which is where tails come from.
	Waits uint64
}

// data is the test QP with its buffer: 2 x BUFF_SIZE, the first half the
// source and sink of our own requests, the second half the target the peer
// names (set_up_connection advertises buf + BUFF_SIZE).
type data struct {
	grh   int // -c UD: each receive's room for the GRH (verbs.GRHLen)
	w     waiter
	srq   verbs.SRQ       // --use-srq: the receives go here
	imm   verbs.Immediate // --write_with_imm: the WRITEs go here
	buf   verbs.Region
	half  int
	local verbs.Segment // [0, size)
	recv  verbs.Segment // [half, half+size)
}

func prepareData(d *data, p *Params, cycle int) func(verbs.Endpoint) error {
	return func(ep verbs.Endpoint) error {
		d.w.ep = ep
		d.w.idle.Busy, d.w.idle.Spin = p.BusyPoll, p.Spin
		if p.UD {
			d.grh = verbs.GRHLen // UD_ADDITION
		}
		if p.WriteImm {
			imm, ok := ep.(verbs.Immediate)
			if !ok {
				return fmt.Errorf("--write_with_imm: %T has no RDMA WRITE with immediate: %w", ep, ErrUnsupported)
			}
			d.imm = imm
		}
		d.half = max(p.Size+d.grh, cycle) // BUFF_SIZE(size, cycle_buffer)
		access := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
		if p.Verb == Atomic {
			access |= verbs.AccessRemoteAtomic
		}
		buf, err := ep.Alloc(2 * d.half)
		if err != nil {
			return fmt.Errorf("allocate test buffer: %w", err)
		}
		if d.buf, err = ep.Register(buf, access); err != nil {
			return fmt.Errorf("register test buffer: %w", err)
		}
		d.setSize(p.sizes()[0])
		// Send tests post their receives before the connection exists, so
		// no SEND of the peer can find an empty queue.
		if p.Verb == Send {
			for i := 0; i < p.RxDepth; i++ {
				if err := d.postRecv(); err != nil {
					return fmt.Errorf("post receive %d: %w", i, err)
				}
			}
		}
		return nil
	}
}

// setSize points the request and receive segments at the first size
// bytes of each half: -a measures one size after another in the buffer
// of the largest.
func (d *data) setSize(size int) {
	d.local, _ = d.buf.Seg(0, size)
	d.recv, _ = d.buf.Seg(d.half, size+d.grh)
}

// postRecv posts one receive of the test buffer: to the SRQ with
// --use-srq (ctx_set_recv_wqes, run_iter_bw_server: ibv_post_srq_recv),
// else to the QP.
func (d *data) postRecv() error {
	if d.srq != nil {
		return d.srq.Receive(idRecv, d.recv)
	}
	return d.w.ep.Receive(idRecv, d.recv)
}

// wantsSRQ says whether a side of the test has an SRQ (perftest's
// srq_exists): with --use-srq the server, and both sides of a latency
// test or of a bidirectional one (-b); a bandwidth client otherwise posts
// no receives.
func wantsSRQ(p *Params, client bool) bool {
	return p.UseSRQ && (!client || p.Kind == Lat || p.Bidir)
}

// srqMaker returns the maker of the side's SRQ, or nil when the side has
// none; ErrUnsupported when it needs one that m cannot make.
func srqMaker(p *Params, client bool, m any) (verbs.SRQMaker, error) {
	if !wantsSRQ(p, client) {
		return nil, nil
	}
	mk, ok := m.(verbs.SRQMaker)
	if !ok {
		return nil, fmt.Errorf("perftest: --use-srq: %T has no shared receive queues: %w", m, ErrUnsupported)
	}
	return mk, nil
}

// Work request IDs on the data QP.
const (
	idRecv uint64 = iota + 1
	idSend
	idRDMA
)

func connParams(p *Params, prepare func(verbs.Endpoint) error) verbs.ConnParams {
	cp := verbs.ConnParams{RetryCount: 7, RNRRetryCount: 7, Prepare: prepare, UDAnnounce: p.UD && p.Kind == Lat, Unordered: p.Bidir && p.Verb == Send, UC: p.UC}
	if p.Verb == Read || p.Verb == Atomic {
		// rdma_cm_route_handler / rdma_cm_connection_request_handler.
		cp.ResponderResources, cp.InitiatorDepth = uint8(p.OutReads), uint8(p.OutReads)
	}
	return cp
}

// GIDer is optionally implemented by endpoints that know their GID (for
// pingpong_dest.gid; perftest peers only print it).
type GIDer interface{ GID() [16]byte }

// QPNumberer is optionally implemented by endpoints that know their QPN.
type QPNumberer interface{ QPN() uint32 }

func (d *data) dest(p *Params) Dest {
	dst := Dest{OutReads: int32(p.OutReads), PSN: int32(rand.Uint32() & 0xFFFFFF), RKey: d.buf.RKey, VAddr: d.buf.Addr + uint64(d.half), GIDIndex: p.GIDIndex}
	if g, ok := d.w.ep.(GIDer); ok {
		dst.GID = g.GID()
	}
	if q, ok := d.w.ep.(QPNumberer); ok {
		dst.QPN = int32(q.QPN())
	}
	return dst
}

// RunClient runs one perftest test as the client (`ib_<verb>_<bw|lat> -R
// <server>`), printing perftest's report table to out.
func RunClient(ctx context.Context, p Params, c verbs.Connector, out io.Writer) (Result, error) {
	if err := p.normalize(); err != nil {
		return Result{}, err
	}
	out = reportTo(out, &p)
	mk, err := srqMaker(&p, true, c)
	if err != nil {
		return Result{Params: p}, err
	}
	dc, err := dataConnector(&p, c)
	if err != nil {
		return Result{Params: p}, err
	}
	ctl := &control{client: true}
	ep, err := dialControl(ctx, &p, c, ctl)
	if err != nil {
		return Result{Params: p}, fmt.Errorf("perftest: control connection to port %d: %w", p.Port, err)
	}
	defer ctl.release(ep)
	ctx, cancel := durationBound(ctx, &p)
	defer cancel()
	res, err := session(ctx, &p, ctl, out, mk, func(ctx context.Context, params func() (verbs.ConnParams, error)) (verbs.Endpoint, error) {
		return connectData(ctx, dc, &p, params)
	})
	if err != nil {
		return res, boundErr(ctx, err)
	}
	return res, checkLimits(&p, &res)
}

// RunServer runs one perftest test as the server (`ib_<verb>_<bw|lat> -R`)
// for one client that connects to l. The data connection is accepted on
// the same listener, which stays bound throughout, so a client's second
// REQ always finds it (no REJ reason 8 from our side).
func RunServer(ctx context.Context, p Params, l verbs.Listener, out io.Writer) (Result, error) {
	if err := p.normalize(); err != nil {
		return Result{}, err
	}
	out = reportTo(out, &p)
	mk, err := srqMaker(&p, false, l)
	if err != nil {
		return Result{Params: p}, err
	}
	accept, err := dataAcceptor(&p, l)
	if err != nil {
		return Result{Params: p}, err
	}
	ctl, ep, err := acceptControl(ctx, &p, l, out)
	if err != nil {
		return Result{Params: p}, fmt.Errorf("perftest: accept control connection: %w", err)
	}
	defer ctl.release(ep)
	ctx, cancel := durationBound(ctx, &p)
	defer cancel()
	res, err := session(ctx, &p, ctl, out, mk, func(ctx context.Context, params func() (verbs.ConnParams, error)) (verbs.Endpoint, error) {
		cp, err := params()
		if err != nil {
			return nil, err
		}
		return accept(ctx, cp)
	})
	if err != nil {
		return res, boundErr(ctx, err)
	}
	return res, checkLimits(&p, &res)
}

// durationSlack is what a -D run may take beyond its duration, from the
// control connection on: the data connection (a client retries it for up
// to 10 s), the handshakes and the report. A variable for the tests.
var durationSlack = 30 * time.Second

// errDurationOver is the cause of a -D run's end at its bound.
var errDurationOver = errors.New("duration bound")

// durationBound bounds a -D run, on either side, to its duration and
// durationSlack from the control connection on. Each side times only its
// own run (duration.go), and the side that waits for the other's report
// (the write, read and atomic bw server) would otherwise wait for a peer
// that went silent, without a DREQ, until the caller's own timeout.
func durationBound(ctx context.Context, p *Params) (context.Context, context.CancelFunc) {
	if p.Duration <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, p.Duration+durationSlack, errDurationOver)
}

// boundErr names the bound when it ended the run.
func boundErr(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errDurationOver) {
		return fmt.Errorf("the -D run did not end within its duration and %v (the peer went silent; ETIMEDOUT): %w", durationSlack, err)
	}
	return err
}

// session is main() of the test from exchange_versions on (see doc.go for
// the message sequence). open opens the data connection with the
// parameters its argument gives, once per attempt. With an SRQ maker the
// data QP is made on an SRQ of RxDepth receives (create_srq before the
// QPs, as perftest does), a new one for each attempt.
func session(ctx context.Context, p *Params, ctl *control, out io.Writer, mk verbs.SRQMaker, open opener) (Result, error) {
	res := Result{Params: *p}
	fail := func(what string, err error) (Result, error) {
		return res, fmt.Errorf("perftest %v %v %s: %s: %w", p.Verb, kindName(p.Kind), role(ctl.client), what, err)
	}
	peer, cycle, mtu, err := ctl.prologue(ctx, p)
	res.PeerVersion, res.MTU = peer, 128<<mtu
	if err != nil {
		return fail("prologue", err)
	}
	if err := p.fitUD(res.MTU, out); err != nil {
		return fail("UD message size", err)
	}
	res.Params.Size = p.Size
	// create_rdma_cm_connection: a handshake of zeroed dests, the data
	// connection, another zeroed handshake.
	var zero Dest
	syncPeers := func() error {
		_, err := ctl.handshake(ctx, &zero)
		return err
	}
	if p.QPs > 1 {
		if ctl.oob == nil {
			if err := syncPeers(); err != nil {
				return fail("sync before the data connection", err)
			}
		}
		return multiSession(ctx, p, ctl, out, cycle, res, open, fail)
	}
	d := &data{}
	// The SRQ is closed after the data QP made on it (deferred first).
	defer func() {
		if d.srq != nil {
			d.srq.Close()
		}
	}()
	params := func() (verbs.ConnParams, error) {
		cp := connParams(p, prepareData(d, p, cycle))
		if mk == nil {
			return cp, nil
		}
		// A failed attempt's endpoint is closed, and its memory with it:
		// the receives it posted to its SRQ go with that SRQ.
		if d.srq != nil {
			d.srq.Close()
		}
		srq, err := mk.CreateSRQ(p.RxDepth)
		if err != nil {
			d.srq = nil
			return cp, fmt.Errorf("create srq: %w", err)
		}
		d.srq, cp.SRQ = srq, srq
		return cp, nil
	}
	var dep verbs.Endpoint
	shakes := p.preRunHandshakes()
	if ctl.oob != nil {
		// QPs connected out of band (without -R): no zeroed handshakes;
		// the first of the test's own carries the QP's address, and the
		// QP connects after it.
		if dep, err = connectDirect(ctx, p, ctl, d, params, &res); err != nil {
			return fail("data connection", err)
		}
		defer dep.Close()
		return runSession(ctx, p, ctl, d, res, out, fail, shakes-1)
	}
	if p.UD && !ctl.client {
		var syncErr error
		dep, syncErr, err = acceptServedBeforeSync(ctx, open, params, syncPeers)
		if syncErr != nil {
			return fail("sync before the data connection", syncErr)
		}
	} else {
		if err := syncPeers(); err != nil {
			return fail("sync before the data connection", err)
		}
		dep, err = open(ctx, params)
	}
	if err != nil {
		return fail("data connection", err)
	}
	defer dep.Close()
	if _, err := ctl.handshake(ctx, &zero); err != nil {
		return fail("sync after the data connection", err)
	}
	res.Local = d.dest(p)
	return runSession(ctx, p, ctl, d, res, out, fail, shakes)
}

// runSession is the rest of session once the data QP is connected:
// shakes handshakes, the addresses, the test.
func runSession(ctx context.Context, p *Params, ctl *control, d *data, res Result, out io.Writer, fail func(string, error) (Result, error), shakes int) (Result, error) {
	var err error
	for i := 0; i < shakes; i++ {
		if res.Peer, err = ctl.handshake(ctx, &res.Local); err != nil {
			return fail("exchange of pingpong_dest", err)
		}
	}
	printDest(out, "local", p, &res.Local)
	printDest(out, "remote", p, &res.Peer)
	run := bwSession
	if p.Kind == Lat {
		run = latSession
	}
	res, err = run(ctx, p, ctl, d, res, out, fail)
	res.Waits = d.w.idle.Waits
	return res, err
}

func bwSession(ctx context.Context, p *Params, ctl *control, d *data, res Result, out io.Writer, fail func(string, error) (Result, error)) (Result, error) {
	switch {
	case p.Bidir:
		// Both sides run the test and print both sides' sum (bidir.go).
		PrintBWHeader(out, p.ReportGbits)
		if err := bidirBW(ctx, p, ctl, d, &res, out, ctl.client); err != nil {
			return fail("test", err)
		}
	case p.WriteImm && !ctl.client:
		// write_bw.c with WRITE_IMM: the server receives as send bw's
		// does (run_iter_bw_server), with receives of no bytes.
		PrintBWHeader(out, p.ReportGbits)
		if err := serverSendBW(ctx, p, ctl, d, &res, out); err != nil {
			return fail("receiving", err)
		}
	case p.Verb != Send && !ctl.client:
		// The server of a one-sided test waits for the client to finish,
		// then prints the client's numbers (write_bw.c: "server just waits
		// for client to exit").
		if _, err := ctl.handshake(ctx, &res.Local); err != nil {
			return fail("waiting for the client", err)
		}
		rep, err := ctl.reports(ctx, Report{})
		if err != nil {
			return fail("reports", err)
		}
		res.BW = &rep
		PrintBWHeader(out, p.ReportGbits)
		PrintBW(out, rep, p.ReportGbits)
	case p.Verb == Send && !ctl.client:
		// run_iter_bw_server. Debian 12's perftest (4.5+0.17) has no sync
		// between the pingpong_dest handshakes and the run: live rxe
		// answers 5 handshakes after the data connection, not 6. Our
		// receives were posted when the connection was prepared.
		PrintBWHeader(out, p.ReportGbits)
		if err := serverSendBW(ctx, p, ctl, d, &res, out); err != nil {
			return fail("receiving", err)
		}
	default:
		PrintBWHeader(out, p.ReportGbits)
		if err := clientBW(ctx, p, ctl, d, &res, out); err != nil {
			return fail("test", err)
		}
		if p.Verb != Send && !p.WriteImm {
			if _, err := ctl.handshake(ctx, &res.Local); err != nil {
				return fail("sync after the test", err)
			}
			if _, err := ctl.reports(ctx, *res.BW); err != nil {
				return fail("reports", err)
			}
		}
	}
	PrintFooter(out)
	if err := ctl.closingHandshake(ctx, &res.Local); err != nil {
		return fail("closing handshake", err)
	}
	return res, nil
}

func latSession(ctx context.Context, p *Params, ctl *control, d *data, res Result, out io.Writer, fail func(string, error) (Result, error)) (Result, error) {
	if (p.Verb == Read || p.Verb == Atomic) && !ctl.client {
		// read_lat.c and atomic_lat.c: "Only Client post read request."
		if err := ctl.closingHandshake(ctx, &res.Local); err != nil {
			return fail("closing handshake", err)
		}
		return res, nil
	}
	// send_lat.c: the receives were posted when the connection was
	// prepared; like send_bw, Debian 12's perftest has no sync before the
	// run (live rxe).
	if p.Duration > 0 {
		PrintLatDurationHeader(out)
	} else {
		PrintLatHeader(out)
	}
	if err := latRuns(ctx, p, ctl, d, &res, out); err != nil {
		return fail("test", err)
	}
	PrintFooter(out)
	if p.Verb == Write {
		// write_lat.c's main() returns right after the report: no closing
		// handshake (live rxe disconnects, as server and as client, without
		// one). In iterations mode each side has its last WRITE
		// acknowledged and the peer's last WRITE in place, so nothing is
		// left in flight; in duration mode a peer still running sees the
		// disconnect as the end of its run (phases.stop).
		return res, nil
	}
	if err := ctl.closingHandshake(ctx, &res.Local); err != nil {
		return fail("closing handshake", err)
	}
	return res, nil
}

func kindName(k Kind) string {
	if k == Lat {
		return "lat"
	}
	return "bw"
}

func role(client bool) string {
	if client {
		return "client"
	}
	return "server"
}

// clock returns monotonic nanoseconds since base.
type clock struct{ base time.Time }

func (c clock) now() uint64 { return uint64(time.Since(c.base)) }

// printDest prints a side's pingpong_dest as ctx_print_pingpong_data does
// once the connection is up (C's %#06x: no 0x for zero).
func printDest(w io.Writer, side string, p *Params, d *Dest) {
	fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	// ctx_print_pingpong_data: READ_FMT falls through to RDMA_FMT; send
	// and atomic tests print neither.
	switch p.Verb {
	case Read:
		fmt.Fprintf(w, " OUT %s", cHex(uint64(d.OutReads), 4))
		fallthrough
	case Write:
		fmt.Fprintf(w, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	g := d.GID
	fmt.Fprintf(w, "\n GID: %02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d\n",
		g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15])
}

// cHex is printf's %#0*x: width counts the 0x, which zero does not get.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*d", width, 0)
	}
	return fmt.Sprintf("0x%0*x", width-2, v)
}

// opener opens the data connection with the parameters params gives, once
// per attempt.
type opener func(ctx context.Context, params func() (verbs.ConnParams, error)) (verbs.Endpoint, error)

// acceptServedBeforeSync accepts a UD data connection whose service
// answers before the sync that lets the client resolve it, as perftest's
// server listens on rdma_cm's UDP port space before that sync and the
// kernel holds a SIDR_REQ for a listener until the accept. Otherwise a
// client quicker than the accept's preparation has its SIDR_REQ answered
// IB_SIDR_UNSUPPORTED, and perftest's client, which does not retry,
// fails with RDMA_CM_EVENT_UNREACHABLE while this server waits for it.
// An endpoint that never says it is served (Served not called) is synced
// after it is accepted. syncErr is the sync's failure, err the accept's.
func acceptServedBeforeSync(ctx context.Context, open opener, params func() (verbs.ConnParams, error), syncPeers func() error) (ep verbs.Endpoint, syncErr, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan struct{})
	var once sync.Once
	type accepted struct {
		ep  verbs.Endpoint
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		ep, err := open(ctx, func() (verbs.ConnParams, error) {
			cp, err := params()
			cp.Served = func() { once.Do(func() { close(served) }) }
			return cp, err
		})
		done <- accepted{ep, err}
	}()
	select {
	case <-served:
	case a := <-done:
		if a.err != nil {
			return nil, nil, a.err
		}
		if err := syncPeers(); err != nil {
			a.ep.Close()
			return nil, err, nil
		}
		return a.ep, nil, nil
	}
	if err := syncPeers(); err != nil {
		cancel()
		if a := <-done; a.err == nil {
			a.ep.Close()
		}
		return nil, err, nil
	}
	a := <-done
	return a.ep, nil, a.err
}
