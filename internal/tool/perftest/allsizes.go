package perftest

import (
	"context"
	"fmt"
	"io"
)

// All sizes (-a) as perftest's main()s run them (RUN_ALL): the buffer is
// sized for MaxSize, and each size from 2 to 2^23 bytes is one run of
// Iterations with its own report row. RC has no size limit below that;
// perftest caps the sizes at the MTU for UD only. Between sizes:
//
//   - write, read bw: the client warms up and runs each size without a
//     word to the server, which waits at the handshake and prints the one
//     row the client sends in xchg_bw_reports, the last size's.
//   - send bw: before each size the server posts -r receives and both
//     shake hands (the first size's is the last pre-run handshake), and
//     after each size both shake hands again.
//   - send lat: before each size the receives and a handshake, as send bw;
//     none after.
//   - write lat: nothing; the sizes' last bytes, where each side polls,
//     are bytes no smaller size wrote.
//   - read lat: the client reads size after size; the server idles.
//
// atomic_bw refuses -a (its size cannot change), and so does -D.

// sizes are the message sizes a run measures: with -a every power of two
// from 2 to MaxSize, else Size.
func (p *Params) sizes() []int {
	if !p.AllSizes {
		return []int{p.Size}
	}
	var s []int
	limit := MaxSize
	if p.UD {
		limit = p.Size // the MTU (fitUD)
	}
	for size := 2; size <= limit; size *= 2 {
		s = append(s, size)
	}
	return s
}

// at is p for the run of one size.
func (p *Params) at(size int) *Params {
	q := *p
	q.Size = size
	return &q
}

// addBW records a bandwidth row.
func (r *Result) addBW(rep Report, all bool) {
	r.BW = &rep
	if all {
		r.AllBW = append(r.AllBW, rep)
	}
}

// clientBW is the client's measurement of a bandwidth test, size after
// size, a row printed for each.
func clientBW(ctx context.Context, p *Params, ctl *control, d *data, res *Result, out io.Writer) error {
	var posted, completed []uint64
	if p.Duration == 0 {
		posted, completed = make([]uint64, p.Iterations), make([]uint64, p.Iterations)
	}
	for i, size := range p.sizes() {
		q := p.at(size)
		d.setSize(size)
		if (p.Verb == Send && i > 0) || p.WriteImm {
			if _, err := ctl.handshake(ctx, &res.Local); err != nil {
				return fmt.Errorf("sync before %d bytes: %w", size, err)
			}
		}
		if p.Verb != Send && !p.WriteImm { // perftest 24.01: no warm-up for WRITE_IMM
			if err := warmUp(ctx, q, d, res.Peer); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		var rep Report
		var err error
		if p.Duration > 0 {
			rep, err = postBWFor(ctx, q, d, res.Peer)
		} else if err = postBW(ctx, q, d, res.Peer, posted, completed); err == nil {
			rep = bwReport(q, posted, completed)
		}
		if err != nil {
			return fmt.Errorf("%d bytes: %w", size, err)
		}
		res.addBW(rep, p.AllSizes)
		PrintBW(out, rep, p.ReportGbits)
		// write_bw.c syncs after a WRITE_IMM size only under -a
		// (RUN_ALL); a single size goes on to the closing handshake.
		if p.AllSizes && (p.Verb == Send || p.WriteImm) {
			if _, err := ctl.handshake(ctx, &res.Local); err != nil {
				return fmt.Errorf("sync after %d bytes: %w", size, err)
			}
		}
	}
	return nil
}

// serverSendBW is the send_bw server's run_iter_bw_server, size after
// size, a row printed for each. With --write_with_imm it is the write_bw
// server's (perftest 24.01 and later): every size's receives, of no
// bytes ("Write w/imm completions have zero recieve buffer length",
// ctx_set_recv_wqes), are posted after the connection and announced by
// a handshake, and under -a a handshake follows every size.
func serverSendBW(ctx context.Context, p *Params, ctl *control, d *data, res *Result, out io.Writer) error {
	for i, size := range p.sizes() {
		q := p.at(size)
		d.setSize(size)
		if p.WriteImm {
			d.recv.Len = 0
		}
		if i > 0 || p.WriteImm {
			if err := d.postRecvs(ctx, q, ctl, &res.Local); err != nil {
				return err
			}
		}
		var rep Report
		var err error
		if p.Duration > 0 {
			rep, err = recvBWFor(ctx, q, d)
		} else {
			rep, err = recvBW(ctx, q, d)
		}
		if err != nil {
			return fmt.Errorf("%d bytes: %w", q.Size, err)
		}
		res.addBW(rep, p.AllSizes)
		PrintBW(out, rep, p.ReportGbits)
		if p.AllSizes {
			if _, err := ctl.handshake(ctx, &res.Local); err != nil {
				return fmt.Errorf("sync after %d bytes: %w", size, err)
			}
		}
	}
	return nil
}

// postRecvs is ctx_set_recv_wqes and the handshake after it that keeps
// the client from sending before the receives of the next size are
// posted.
func (d *data) postRecvs(ctx context.Context, p *Params, ctl *control, local *Dest) error {
	for range p.RxDepth {
		if err := d.postRecv(); err != nil {
			return fmt.Errorf("post receive for %d bytes: %w", p.Size, err)
		}
	}
	if _, err := ctl.handshake(ctx, local); err != nil {
		return fmt.Errorf("sync before %d bytes: %w", p.Size, err)
	}
	return nil
}

// latRuns runs a latency test size after size on one side, printing a
// row for each: print_report_lat, or print_report_lat_duration with -D.
func latRuns(ctx context.Context, p *Params, ctl *control, d *data, res *Result, out io.Writer) error {
	var posted []uint64
	if p.Duration == 0 {
		posted = make([]uint64, p.Iterations)
	}
	for i, size := range p.sizes() {
		q := p.at(size)
		d.setSize(size)
		if p.WriteImm {
			// write_lat.c with WRITE_IMM: each size's receives, of no
			// bytes, then a handshake, on both sides.
			d.recv.Len = 0
		}
		if (p.Verb == Send && i > 0) || p.WriteImm {
			if err := d.postRecvs(ctx, q, ctl, &res.Local); err != nil {
				return err
			}
		}
		if p.Duration > 0 {
			row, err := latFor(ctx, q, d, res.Peer, ctl.client)
			if err != nil {
				return err
			}
			res.LatDur = &row
			PrintLatDuration(out, row)
			continue
		}
		var err error
		switch p.Verb {
		case Read, Atomic:
			err = readLat(ctx, q, d, res.Peer, posted)
		case Write:
			if p.WriteImm {
				err = writeImmLat(ctx, q, d, res.Peer, posted, ctl.client)
			} else {
				err = writeLat(ctx, q, d, res.Peer, posted, ctl.client)
			}
		case Send:
			err = sendLat(ctx, q, d, posted, ctl.client)
		}
		if err != nil {
			return fmt.Errorf("%d bytes: %w", size, err)
		}
		st := latReport(q, posted)
		res.Lat, res.Hist = &st, latHistogram(q, posted)
		if p.AllSizes {
			res.AllLat = append(res.AllLat, st)
		}
		if _, figuresOnly := out.(*figures); !figuresOnly {
			PrintSamples(out, posted, p.Verb != Read && p.Verb != Atomic, p.ReportUnsorted, p.ReportHistogram)
		}
		PrintLat(out, st)
	}
	return nil
}
