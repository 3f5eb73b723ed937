package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Several QPs (-q, Params.QPs), as perftest 4.5-0.17 runs them in rdma_cm
// mode (doc.go has the message flow): one control connection, then
// between the two zeroed handshakes of create_rdma_cm_connection one data
// connection per QP to the same port, the n-th accepted becoming QP n.
// Our client connects them one after another, each once the previous one
// is established, so the server meets the REQs in QP order; perftest's
// client sends them all at once in the order it numbers its QPs. The
// pingpong_dest handshakes go once per QP, QP 0 first, where perftest's
// main() loops over its QPs (gather, print), and once for QP 0 where it
// shakes hands once (send bw's sync after the gather, the sync before the
// run). Each QP has a buffer of its own (perftest's --mr_per_qp layout;
// by default perftest carves one MR into per-QP halves, which the peer
// cannot tell apart: it writes where each QP's pingpong_dest says).
//
// The client keeps up to -t requests outstanding on every QP, posting
// round-robin and signaling every -Q-th and the last of each QP, as
// run_iter_bw does; every QP runs the full -n, and the report counts
// -n x -q messages, stamped in posting and completion order across all
// QPs. The send bw server counts -n receives per QP, reposting each QP's
// own. One Backoff spans the QPs: a poll of every QP that finds nothing
// idles, and blocks in verbs.AnyWaiter.WaitAny over all of them.
//
// With -b (bidir.go) both sides run the test over their QPs at once.
//
// Not with -q > 1: -a, -D, --write_with_imm, --use-srq, -c UD.

// Bounds on -q: perftest's MIN_QP_NUM and MAX_QP_NUM.
const (
	MinQPs = 1
	MaxQPs = 16384
)

// normalizeQPs defaults QPs to 1 and refuses what does not run with more.
func (p *Params) normalizeQPs(bad func(format string, a ...any) error) error {
	if p.QPs == 0 {
		p.QPs = 1
	}
	if p.QPs < MinQPs || p.QPs > MaxQPs {
		return bad("num of Qps should be between %d and %d, not %d", MinQPs, MaxQPs, p.QPs)
	}
	if p.QPs == 1 {
		return nil
	}
	if p.Kind != BW {
		// perftest_parameters.c, case 'q'.
		return bad("-q %d: Multiple QPs only available on bw tests", p.QPs)
	}
	for _, c := range []struct {
		on   bool
		what string
	}{{p.AllSizes, "-a"}, {p.Duration > 0, "-D"}, {p.WriteImm, "--write_with_imm"}, {p.UseSRQ, "--use-srq"}, {p.UD, "-c UD"}} {
		if c.on {
			return fmt.Errorf("perftest: -q %d with %s: several QPs run in iterations mode on RC, one size, each QP with its own receives: %w", p.QPs, c.what, ErrUnsupported)
		}
	}
	return nil
}

// qpSet is the data QPs of a -q test, polled together.
type qpSet struct {
	ds   []*data
	eps  []verbs.Endpoint
	any  verbs.AnyWaiter
	idle verbs.Backoff
	n    []counts        // per QP
	ats  []verbs.Atomics // per QP, atomic_bw
}

// Wait implements verbs.Waiter for the Backoff: any QP's news.
func (g *qpSet) Wait(ctx context.Context) error { return g.any.WaitAny(ctx, g.eps) }

// pollAll polls every QP once, tallying into g.n, and idles when none
// had a completion. It allocates nothing.
func (g *qpSet) pollAll(ctx context.Context) error {
	got := 0
	for i, d := range g.ds {
		k, err := d.w.ep.Poll(d.w.buf[:])
		if err != nil {
			return fmt.Errorf("qp %d: %w", i, err)
		}
		for j := range d.w.buf[:k] {
			c := &d.w.buf[j]
			if c.Err != nil {
				return fmt.Errorf("qp %d: %v %d failed: %w", i, c.Op, c.ID, c.Err)
			}
			switch c.Op {
			case verbs.OpSend:
				g.n[i].sends++
			case verbs.OpReceive, verbs.OpRecvRDMAWithImm:
				g.n[i].recvs++
			default:
				g.n[i].rdma++
			}
		}
		got += k
	}
	if got == 0 {
		return g.idle.Idle(ctx, g)
	}
	g.idle.Reset()
	return nil
}

// waits is how often the test's polling blocked, on all QPs.
func (g *qpSet) waits() uint64 {
	w := g.idle.Waits
	for _, d := range g.ds {
		w += d.w.idle.Waits
	}
	return w
}

// multiSession is session's part from the data connections on, for
// p.QPs > 1.
func multiSession(ctx context.Context, p *Params, ctl *control, out io.Writer, cycle int, res Result, open opener, fail func(string, error) (Result, error)) (Result, error) {
	g := &qpSet{ds: make([]*data, p.QPs), eps: make([]verbs.Endpoint, p.QPs), n: make([]counts, p.QPs)}
	g.idle.Busy, g.idle.Spin = p.BusyPoll, p.Spin
	// The QPs disconnect at once, not one after another: a peer that has
	// gone without answering a DREQ (perftest 25.01's client exits right
	// after the closing handshake) costs each close its wait for the DREP.
	defer func() {
		var wg sync.WaitGroup
		for _, ep := range g.eps {
			if ep != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ep.Close()
				}()
			}
		}
		wg.Wait()
	}()
	// Without -R (ctl.oob) the QPs are made here and connected out of
	// band after the gather below (ctx_connect); with it each is an
	// rdma_cm connection, and a zeroed handshake follows them.
	oob := make([]verbs.OOB, p.QPs)
	res.Locals, res.Peers = make([]Dest, p.QPs), make([]Dest, p.QPs)
	for i := range g.ds {
		d := &data{}
		params := func() (verbs.ConnParams, error) { return connParams(p, prepareData(d, p, cycle)), nil }
		var ep verbs.Endpoint
		var err error
		if ctl.oob != nil {
			cp, _ := params()
			if oob[i], err = ctl.oob(cp); err == nil {
				ep = oob[i]
				res.Locals[i] = directDest(p, d, oob[i])
			}
		} else if ep, err = open(ctx, params); err == nil {
			res.Locals[i] = d.dest(p)
		}
		if err != nil {
			return fail(fmt.Sprintf("data connection of qp %d", i), err)
		}
		g.ds[i], g.eps[i] = d, ep
	}
	var ok bool
	if g.any, ok = g.eps[0].(verbs.AnyWaiter); !ok {
		return fail("-q", fmt.Errorf("%T cannot wait on several endpoints: %w", g.eps[0], ErrUnsupported))
	}
	if ctl.oob == nil {
		var zero Dest
		if _, err := ctl.handshake(ctx, &zero); err != nil {
			return fail("sync after the data connections", err)
		}
	}
	perQP := func(what string) error {
		for i := range res.Locals {
			peer, err := ctl.handshake(ctx, &res.Locals[i])
			if err != nil {
				return fmt.Errorf("%s of qp %d: %w", what, i, err)
			}
			res.Peers[i] = peer
		}
		return nil
	}
	// write_bw.c, read_bw.c, atomic_bw.c: gather per QP, print per QP,
	// one after RTR; send_bw.c: gather per QP, one, print per QP, one
	// before the run (after its receives).
	if err := perQP("exchange of pingpong_dest"); err != nil {
		return fail("handshake", err)
	}
	for i, ep := range oob {
		if ep == nil {
			continue
		}
		if err := connectTo(ctx, p, ep, &res.Locals[i], &res.Peers[i], res.MTU); err != nil {
			return fail(fmt.Sprintf("data connection of qp %d", i), err)
		}
	}
	if p.Verb == Send {
		if _, err := ctl.handshake(ctx, &res.Locals[0]); err != nil {
			return fail("sync after the gather", err)
		}
	}
	if err := perQP("exchange of pingpong_dest"); err != nil {
		return fail("handshake", err)
	}
	if _, err := ctl.handshake(ctx, &res.Locals[0]); err != nil {
		return fail("sync before the run", err)
	}
	res.Local, res.Peer = res.Locals[0], res.Peers[0]
	for i := range res.Locals {
		printDest(out, "local", p, &res.Locals[i])
	}
	for i := range res.Peers {
		printDest(out, "remote", p, &res.Peers[i])
	}
	res, err := multiBW(ctx, p, ctl, g, res, out, fail)
	res.Waits = g.waits()
	return res, err
}

// multiBW is bwSession for several QPs.
func multiBW(ctx context.Context, p *Params, ctl *control, g *qpSet, res Result, out io.Writer, fail func(string, error) (Result, error)) (Result, error) {
	PrintBWHeader(out, p.ReportGbits)
	switch {
	case p.Bidir:
		if err := bidirMulti(ctx, p, ctl, g, &res, out); err != nil {
			return fail("test", err)
		}
	case p.Verb != Send && !ctl.client:
		// "server just waits for client to exit".
		if _, err := ctl.handshake(ctx, &res.Local); err != nil {
			return fail("waiting for the client", err)
		}
		rep, err := ctl.reports(ctx, Report{})
		if err != nil {
			return fail("reports", err)
		}
		res.BW = &rep
		PrintBW(out, rep, p.ReportGbits)
	case p.Verb == Send && !ctl.client:
		rep, err := recvBWMulti(ctx, p, g)
		res.PerQP = perQPCounts(g, func(c counts) int { return c.recvs })
		if err != nil {
			return fail("receiving", err)
		}
		res.BW = &rep
		PrintBW(out, rep, p.ReportGbits)
	default:
		if p.Verb != Send {
			for i, d := range g.ds {
				if err := warmUp(ctx, p, d, res.Peers[i]); err != nil {
					return fail("warm-up", fmt.Errorf("qp %d: %w", i, err))
				}
			}
		}
		tot := p.Iterations * p.QPs
		posted, completed := make([]uint64, tot), make([]uint64, tot)
		err := postBWMulti(ctx, p, g, res.Peers, posted, completed)
		res.PerQP = perQPCounts(g, func(c counts) int { return c.done })
		if err != nil {
			return fail("test", err)
		}
		rep := bwReport(p, posted, completed)
		res.BW = &rep
		PrintBW(out, rep, p.ReportGbits)
		if p.Verb != Send {
			if _, err := ctl.handshake(ctx, &res.Local); err != nil {
				return fail("sync after the test", err)
			}
			if _, err := ctl.reports(ctx, rep); err != nil {
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

func perQPCounts(g *qpSet, f func(counts) int) []int {
	n := make([]int, len(g.n))
	for i, c := range g.n {
		n[i] = f(c)
	}
	return n
}

// postBWMulti is run_iter_bw over several QPs: round-robin, each QP's
// window kept full up to TxDepth (for READ and atomics OutReads), each
// signaling every CQMod-th and its last request, every post and signaled
// completion stamped in the order it happens across the QPs. It
// allocates nothing once g.ats is made.
func postBWMulti(ctx context.Context, p *Params, g *qpSet, peers []Dest, posted, completed []uint64) error {
	if len(g.ats) != len(g.ds) {
		g.ats = make([]verbs.Atomics, len(g.ds))
	}
	for i, d := range g.ds {
		at, err := d.atomics(p)
		if err != nil {
			return err
		}
		g.ats[i] = at
	}
	for i := range g.n {
		g.n[i] = counts{}
	}
	iters, win, tot := p.Iterations, window(p), len(posted)
	clk := clock{time.Now()}
	totS, totC := 0, 0
	for totC < tot {
		for i, d := range g.ds {
			n := &g.n[i]
			for n.posted < iters && n.posted-n.done < win {
				signaled := (n.posted+1)%p.CQMod == 0 || n.posted == iters-1
				if !p.NoPeak || totS == 0 {
					posted[totS] = clk.now()
				}
				err := d.post(p, g.ats[i], &peers[i], signaled)
				if errors.Is(err, verbs.ErrQueueFull) {
					break
				}
				if err != nil {
					return fmt.Errorf("qp %d: post %v %d: %w", i, p.Verb, n.posted, err)
				}
				n.posted++
				totS++
			}
		}
		if err := g.pollSignaled(ctx, p, iters, &totC, completed, clk); err != nil {
			return fmt.Errorf("after %d of %d completions: %w", totC, tot, err)
		}
	}
	if p.NoPeak {
		completed[0] = clk.now()
	}
	return nil
}

// pollSignaled polls every QP once and turns each signaled completion
// into the CQMod requests (or the last few) of its QP it stands for.
func (g *qpSet) pollSignaled(ctx context.Context, p *Params, iters int, totC *int, completed []uint64, clk clock) error {
	got := 0
	for i, d := range g.ds {
		k, err := d.w.ep.Poll(d.w.buf[:])
		if err != nil {
			return fmt.Errorf("qp %d: %w", i, err)
		}
		n := &g.n[i]
		for j := range d.w.buf[:k] {
			c := &d.w.buf[j]
			if c.Err != nil {
				return fmt.Errorf("qp %d: %v %d failed: %w", i, c.Op, c.ID, c.Err)
			}
			adv := min(n.done+p.CQMod, iters) - n.done
			n.done += adv
			*totC += adv
			if !p.NoPeak {
				completed[*totC-1] = clk.now()
			}
		}
		got += k
	}
	if got == 0 {
		return g.idle.Idle(ctx, g)
	}
	g.idle.Reset()
	return nil
}

// recvBWMulti is run_iter_bw_server over several QPs: Iterations
// receives on each, each QP reposting its own while fewer than
// Iterations are posted on it. The report spans the first receive to
// the last, over Iterations x QPs messages, without a peak.
func recvBWMulti(ctx context.Context, p *Params, g *qpSet) (Report, error) {
	clk := clock{time.Now()}
	posts := make([]int, len(g.ds))
	for i := range posts {
		posts[i] = p.RxDepth
	}
	tot := p.Iterations * len(g.ds)
	var first uint64
	total := 0
	for total < tot {
		if err := g.pollAll(ctx); err != nil {
			return Report{}, fmt.Errorf("after %d of %d receives: %w", total, tot, err)
		}
		sum := 0
		for i, d := range g.ds {
			n := &g.n[i]
			if n.recvs > p.Iterations || n.sends+n.rdma > 0 {
				return Report{}, fmt.Errorf("qp %d: %d receives and %d other completions, expected %d receives: %w", i, n.recvs, n.sends+n.rdma, p.Iterations, ErrProtocol)
			}
			for ; posts[i] < p.Iterations && posts[i] < n.recvs+p.RxDepth; posts[i]++ {
				if err := d.postRecv(); err != nil {
					return Report{}, fmt.Errorf("qp %d: repost receive: %w", i, err)
				}
			}
			sum += n.recvs
		}
		if total == 0 && sum > 0 {
			first = clk.now()
		}
		total = sum
	}
	last := clk.now()
	q := *p
	q.NoPeak = true
	posted, completed := make([]uint64, tot), make([]uint64, tot)
	posted[0], completed[0] = first, last
	return bwReport(&q, posted, completed), nil
}
