package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Bidirectional mode (-b, Params.Bidir; perftest's duplex) on RC, as
// write_bw.c, read_bw.c, atomic_bw.c and send_bw.c of perftest 4.5+0.17
// and 25.01 run it: both sides run the test against each other at once
// and each prints the sum of both sides' rows. With -q every QP runs the
// full -n on both sides (multiqp.go's handshakes, then the same steps);
// -D is bidirFor's.
//
//   - write, read and atomic bw: each side warms up, then one handshake
//     starts the run (run_iter_bw on both); under -a one more handshake
//     follows each size (the "version >= 4.6" sync, which both perftest
//     versions and our announced 6.06 make). There is no "server waits
//     for the client" handshake: the report exchange follows the run.
//   - send bw: both sides post -r receives before the connection (as a
//     send bw server does), the fourth pre-run handshake starts the run,
//     and each side runs run_iter_bi: sends and receives in one loop, the
//     server's first SEND after its first receive, the receives reposted
//     while fewer than -n are posted. Under -a each later size posts its
//     receives and handshakes first, and a handshake follows each size.
//   - then xchg_bw_reports (both sides, the client first) and
//     print_full_bw_report(mine, theirs): size and iterations are this
//     side's, peak, average and message rate the sums; six decimals in
//     Gb/s (inc_accuracy) by this side's own average, as perftest decides
//     before it adds the peer's.

// bidirBW is a bandwidth test's run on either side under -b, size after
// size, a summed row printed for each.
func bidirBW(ctx context.Context, p *Params, ctl *control, d *data, res *Result, out io.Writer, client bool) error {
	if p.Duration > 0 {
		return bidirFor(ctx, p, ctl, d, res, out, client)
	}
	posted, completed := make([]uint64, p.Iterations), make([]uint64, p.Iterations)
	for i, size := range p.sizes() {
		q := p.at(size)
		d.setSize(size)
		var err error
		if p.Verb == Send {
			if i > 0 {
				if err := d.postRecvs(ctx, q, ctl, &res.Local); err != nil {
					return err
				}
			}
			err = bidirSend(ctx, q, d, client, posted, completed)
		} else {
			if err := warmUp(ctx, q, d, res.Peer); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
			if _, err := ctl.handshake(ctx, &res.Local); err != nil {
				return fmt.Errorf("sync before %d bytes: %w", size, err)
			}
			err = postBW(ctx, q, d, res.Peer, posted, completed)
		}
		if err != nil {
			return fmt.Errorf("%d bytes: %w", size, err)
		}
		if p.AllSizes && p.Verb != Send {
			if _, err := ctl.handshake(ctx, &res.Local); err != nil {
				return fmt.Errorf("sync after %d bytes: %w", size, err)
			}
		}
		if err := sumRows(ctx, ctl, bwReport(q, posted, completed), true, res, p, out); err != nil {
			return err
		}
		if p.AllSizes && p.Verb == Send {
			if _, err := ctl.handshake(ctx, &res.Local); err != nil {
				return fmt.Errorf("sync after %d bytes: %w", size, err)
			}
		}
	}
	return nil
}

// sumRows exchanges this side's row (xchg_bw_reports) and prints the sum
// (sumRow). The peer's row must be of the same size and, where the run
// counted -n (sameCount, not -D), of the same count.
func sumRows(ctx context.Context, ctl *control, mine Report, sameCount bool, res *Result, p *Params, out io.Writer) error {
	theirs, err := ctl.reports(ctx, mine)
	if err != nil {
		return err
	}
	if theirs.Size != mine.Size || (sameCount && theirs.Iters != mine.Iters) {
		return fmt.Errorf("the peer reported %d x %d bytes against our %d x %d: not the same test: %w", theirs.Iters, theirs.Size, mine.Iters, mine.Size, ErrProtocol)
	}
	sumRow(res, mine, theirs, p, out)
	return nil
}

// sumRow keeps this side's row and prints and keeps the sum; with
// --report-both (not under -a, as perftest's RUN_ALL has none) each
// side's own row follows in a table of its own.
func sumRow(res *Result, mine, theirs Report, p *Params, out io.Writer) {
	res.Own = &mine
	sum := mine.plus(theirs)
	res.addBW(sum, p.AllSizes)
	printBWSum(out, mine, sum, p.ReportGbits)
	if !p.ReportBoth || p.AllSizes {
		return
	}
	for i, r := range []Report{mine, theirs} {
		fmt.Fprint(out, resultLine+[]string{"\n Local results: \n", "\n Remote results: \n"}[i])
		PrintBWHeader(out, p.ReportGbits)
		PrintBW(out, r, p.ReportGbits)
	}
}

// bidirFor is bidirBW in duration mode (-D): each side times its own
// run (duration.go). write, read and atomic bw warm up, handshake, run
// run_iter_bw's duration loop, exchange the rows and print the sum, whose
// #iterations is this side's count (the sides' counts differ). send bw
// runs run_iter_bi's duration loop and, as send_bw.c does for -D, neither
// exchanges rows nor sums: each side prints its own.
func bidirFor(ctx context.Context, p *Params, ctl *control, d *data, res *Result, out io.Writer, client bool) error {
	if p.Verb == Send {
		mine, err := bidirSendFor(ctx, p, d, client)
		if err != nil {
			return err
		}
		res.Own = &mine
		res.addBW(mine, false)
		PrintBW(out, mine, p.ReportGbits)
		return nil
	}
	if err := warmUp(ctx, p, d, res.Peer); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := ctl.handshake(ctx, &res.Local); err != nil {
		return fmt.Errorf("sync before the run: %w", err)
	}
	mine, err := postBWFor(ctx, p, d, res.Peer)
	if err != nil {
		return err
	}
	return sumRows(ctx, ctl, mine, false, res, p, out)
}

// bidirSendFor is run_iter_bi in duration mode: the client's timer starts
// with the run, the server's at its first receive (it sends nothing
// before); every SEND completion in the sample window counts CQMod, every
// receive is reposted. The loop allocates nothing.
func bidirSendFor(ctx context.Context, p *Params, d *data, client bool) (Report, error) {
	var c counts
	for !client && c.recvs == 0 {
		if _, err := d.poll(ctx, &c); err != nil {
			return Report{}, fmt.Errorf("waiting for the first receive: %w", err)
		}
	}
	ph := startPhases(p)
	dctx, cancel := context.WithDeadline(ctx, ph.deadline())
	defer cancel()
	n, err := bidirSendLoopFor(ctx, dctx, p, d, &c, &ph)
	if err != nil {
		return Report{}, err
	}
	return durationBW(p, n, &ph), nil
}

// bidirSendLoopFor is bidirSendFor's loop from the receives in c on; dctx
// ends at the phases' end.
func bidirSendLoopFor(ctx, dctx context.Context, p *Params, d *data, c *counts, ph *phases) (uint64, error) {
	var n uint64
	scnt, ccnt, reposted := 0, 0, 0
	for {
		for ; reposted < c.recvs; reposted++ {
			if err := d.postRecv(); err != nil {
				return n, fmt.Errorf("repost receive: %w", err)
			}
		}
		if ph.over() {
			return n, nil
		}
		for scnt-ccnt < p.TxDepth {
			err := d.w.ep.Send(idSend, d.local, (scnt+1)%p.CQMod == 0)
			if errors.Is(err, verbs.ErrQueueFull) {
				break // wait for completions
			}
			if err != nil {
				return n, ph.stop(ctx, fmt.Errorf("post send %d: %w", scnt, err))
			}
			scnt++
		}
		sends := c.sends
		if _, err := d.poll(dctx, c); err != nil {
			return n, ph.stop(ctx, err)
		}
		done := c.sends - sends
		ccnt += done * p.CQMod
		if done > 0 && ph.sampling(ph.clk.now()) {
			n += uint64(done * p.CQMod)
		}
	}
}

// bidirMulti is bidirBW over several QPs (-q): write, read and atomic bw
// warm up every QP, handshake and run run_iter_bw over all of them; send
// bw runs run_iter_bi over all of them. Both exchange the rows and print
// the sum; each row counts -n x -q messages.
func bidirMulti(ctx context.Context, p *Params, ctl *control, g *qpSet, res *Result, out io.Writer) error {
	tot := p.Iterations * p.QPs
	posted, completed := make([]uint64, tot), make([]uint64, tot)
	var err error
	if p.Verb == Send {
		err = bidirSendMulti(ctx, p, g, ctl.client, posted, completed)
	} else {
		for i, d := range g.ds {
			if err := warmUp(ctx, p, d, res.Peers[i]); err != nil {
				return fmt.Errorf("warm-up of qp %d: %w", i, err)
			}
		}
		if _, err := ctl.handshake(ctx, &res.Local); err != nil {
			return fmt.Errorf("sync before the run: %w", err)
		}
		err = postBWMulti(ctx, p, g, res.Peers, posted, completed)
	}
	res.PerQP = perQPCounts(g, func(c counts) int { return c.done })
	if err != nil {
		return err
	}
	return sumRows(ctx, ctl, bwReport(p, posted, completed), true, res, p, out)
}

// bidirSendMulti is run_iter_bi over several QPs: round-robin, each QP's
// send window kept full up to TxDepth (the server's only from its first
// receive on), every CQMod-th and the last SEND of each QP signaled, each
// post and signaled completion stamped in the order it happens across the
// QPs, each QP's receives reposted while fewer than Iterations are posted
// on it.
func bidirSendMulti(ctx context.Context, p *Params, g *qpSet, client bool, posted, completed []uint64) error {
	for i := range g.n {
		g.n[i] = counts{}
	}
	recvPosts := make([]int, len(g.ds))
	for i := range recvPosts {
		recvPosts[i] = p.RxDepth
	}
	iters, tot := p.Iterations, len(posted)
	clk := clock{time.Now()}
	started := client
	totS, totC, totR := 0, 0, 0
	for totC < tot || totR < tot {
		for i, d := range g.ds {
			n := &g.n[i]
			for started && n.posted < iters && n.posted-n.done < p.TxDepth {
				signaled := (n.posted+1)%p.CQMod == 0 || n.posted == iters-1
				if !p.NoPeak || totS == 0 {
					posted[totS] = clk.now()
				}
				err := d.w.ep.Send(idSend, d.local, signaled)
				if errors.Is(err, verbs.ErrQueueFull) {
					break
				}
				if err != nil {
					return fmt.Errorf("qp %d: post send %d: %w", i, n.posted, err)
				}
				n.posted++
				totS++
			}
		}
		got := 0
		for i, d := range g.ds {
			k, err := d.w.ep.Poll(d.w.buf[:])
			if err != nil {
				return fmt.Errorf("qp %d, after %d of %d send completions and %d of %d receives: %w", i, totC, tot, totR, tot, err)
			}
			n := &g.n[i]
			for j := range d.w.buf[:k] {
				c := &d.w.buf[j]
				if c.Err != nil {
					return fmt.Errorf("qp %d: %v %d failed: %w", i, c.Op, c.ID, c.Err)
				}
				if c.Op != verbs.OpSend {
					n.recvs++
					totR++
					continue
				}
				adv := min(n.done+p.CQMod, iters) - n.done
				n.done += adv
				totC += adv
				if !p.NoPeak {
					completed[totC-1] = clk.now()
				}
			}
			if n.recvs > iters {
				return fmt.Errorf("qp %d: %d receives completed, %d posted: %w", i, n.recvs, iters, ErrProtocol)
			}
			for ; recvPosts[i] < iters && recvPosts[i] < n.recvs+p.RxDepth; recvPosts[i]++ {
				if err := d.postRecv(); err != nil {
					return fmt.Errorf("qp %d: repost receive: %w", i, err)
				}
			}
			got += k
		}
		started = started || totR > 0
		if got == 0 {
			if err := g.idle.Idle(ctx, g); err != nil {
				return fmt.Errorf("after %d of %d send completions and %d of %d receives: %w", totC, tot, totR, tot, err)
			}
		} else {
			g.idle.Reset()
		}
	}
	if p.NoPeak {
		completed[0] = clk.now()
	}
	return nil
}

// plus is r with the peer's peak, average and message rate added
// (print_full_bw_report with a remote report).
func (r Report) plus(peer Report) Report {
	r.BWPeak += peer.BWPeak
	r.BWAvg += peer.BWAvg
	r.MsgRate += peer.MsgRate
	return r
}

// printBWSum prints the summed row, in six decimals where this side's
// own Gb/s average is below 0.1.
func printBWSum(w io.Writer, mine, sum Report, gbits bool) {
	printBWRow(w, sum, gbits && mine.BWAvg < 0.1)
}

// bidirSend is run_iter_bi for one RC QP: keep the send window full (the
// server only from its first receive on, so that it does not send before
// the client runs), signal every CQMod-th SEND and the last, stamp each
// post and each signaled completion, and repost each consumed receive
// while fewer than Iterations are posted for this size (RxDepth were).
// It allocates nothing.
func bidirSend(ctx context.Context, p *Params, d *data, client bool, posted, completed []uint64) error {
	iters, win := p.Iterations, p.TxDepth
	clk := clock{time.Now()}
	started := client
	scnt, ccnt, posts := 0, 0, p.RxDepth
	var c counts
	for ccnt < iters || c.recvs < iters {
		for started && scnt < iters && scnt-ccnt < win {
			signaled := (scnt+1)%p.CQMod == 0 || scnt == iters-1
			if !p.NoPeak || scnt == 0 {
				posted[scnt] = clk.now()
			}
			err := d.w.ep.Send(idSend, d.local, signaled)
			if errors.Is(err, verbs.ErrQueueFull) {
				break // wait for completions
			}
			if err != nil {
				return fmt.Errorf("post send %d: %w", scnt, err)
			}
			scnt++
		}
		sends := c.sends
		if _, err := d.poll(ctx, &c); err != nil {
			return fmt.Errorf("after %d of %d send completions and %d of %d receives: %w", ccnt, iters, c.recvs, iters, err)
		}
		if c.recvs > iters {
			return fmt.Errorf("%d receives completed, %d posted: %w", c.recvs, iters, ErrProtocol)
		}
		started = started || c.recvs > 0
		for ; posts < iters && posts < c.recvs+p.RxDepth; posts++ {
			if err := d.postRecv(); err != nil {
				return fmt.Errorf("repost receive: %w", err)
			}
		}
		ccnt = stampDone(p, c.sends-sends, ccnt, completed, clk)
	}
	if p.NoPeak {
		completed[0] = clk.now()
	}
	return nil
}
