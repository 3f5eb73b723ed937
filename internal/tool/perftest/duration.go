package perftest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Duration mode (-D) as perftest runs it (perftest_resources.c:
// run_iter_bw, run_iter_bw_server, run_iter_lat, run_iter_lat_write,
// run_iter_lat_send, catch_alarm): each side times its own run, and
// nothing on the wire says when to stop. From its start a side runs for
// the margin (START_STATE), counts what completes in the sample window of
// Duration - 2 x margin (SAMPLE_STATE), runs on for the margin
// (STOP_SAMPLE_STATE), then stops with whatever is in flight (END_STATE).
// The report divides the count by the window.
//
// A bandwidth client, both sides of write_lat and the read_lat client
// start their timer when the run starts; the send_bw server and both sides
// of send_lat at their first receive (set_on_first_rx_packet). The server
// of write, read and atomic bw runs no timer: it waits at the handshake
// for the client's report, as in iterations mode.

// phases is a side's duration-mode clock; times are nanoseconds since
// clk's base.
type phases struct {
	clk           clock
	from, to, end uint64
}

func startPhases(p *Params) phases {
	m := uint64(p.margin())
	return phases{clk: clock{time.Now()}, from: m, to: uint64(p.Duration) - m, end: uint64(p.Duration)}
}

func (ph *phases) deadline() time.Time    { return ph.clk.base.Add(time.Duration(ph.end)) }
func (ph *phases) sampling(t uint64) bool { return t >= ph.from && t < ph.to }
func (ph *phases) over() bool             { return ph.clk.now() >= ph.end }

// window is the sample window's length in nanoseconds.
func (ph *phases) window() uint64 { return ph.to - ph.from }

// stop says whether err, from a post or a wait under the phases' deadline, ends
// the run as perftest's END_STATE does (nil) or fails it. The deadline
// ends it; so does the peer's disconnect once the window has opened: a
// peer whose timer started a little earlier ends first, and write_lat
// leaves without a closing handshake. The window then ends where the
// peer left.
func (ph *phases) stop(ctx context.Context, err error) error {
	now := ph.clk.now()
	if ctx.Err() != nil {
		return err
	}
	if now >= ph.end {
		return nil
	}
	if errors.Is(err, verbs.ErrDisconnected) || errors.Is(err, verbs.ErrFlushed) {
		if now > ph.from {
			ph.to = min(ph.to, now)
			return nil
		}
		return fmt.Errorf("the peer left before the sample window opened: %w", err)
	}
	return err
}

// durationBW is print_report_bw in duration mode: no peak, the count of
// the window over its length.
func durationBW(p *Params, n uint64, ph *phases) Report {
	format := float64(mbFactor)
	if p.ReportGbits {
		format = gbFactor
	}
	sum := float64(ph.window())
	return Report{
		Size:    uint64(p.Size),
		Iters:   n,
		BWAvg:   float64(p.Size) * float64(n) * nsPerSecond / (sum * format),
		MsgRate: float64(n) * nsPerSecond / (sum * 1e6),
	}
}

// LatDuration is the row print_report_lat_duration prints.
type LatDuration struct {
	Size  int
	Iters uint64
	// Avg is t_avg[usec]: the window over the count, halved for the round
	// trips of send and write; 0 when nothing completed in the window
	// (where perftest divides by zero).
	Avg float64
	// TPS is "tps average": the count per second of window.
	TPS float64
}

func durationLat(p *Params, n uint64, ph *phases) LatDuration {
	rtt := 2.0
	if p.Verb == Read || p.Verb == Atomic {
		rtt = 1
	}
	w := float64(ph.window())
	r := LatDuration{Size: p.Size, Iters: n, TPS: float64(n) * nsPerSecond / w}
	if n > 0 {
		r.Avg = w / nsPerUsec / rtt / float64(n)
	}
	return r
}

// postBWFor is run_iter_bw in duration mode: the window kept full, every
// CQMod-th request signaled, each signaled completion in the sample
// window counting CQMod.
func postBWFor(ctx context.Context, p *Params, d *data, peer Dest) (Report, error) {
	at, err := d.atomics(p)
	if err != nil {
		return Report{}, err
	}
	ph := startPhases(p)
	dctx, cancel := context.WithDeadline(ctx, ph.deadline())
	defer cancel()
	n, err := bwLoopFor(ctx, dctx, p, d, at, &peer, &ph)
	if err != nil {
		return Report{}, err
	}
	return durationBW(p, n, &ph), nil
}

// bwLoopFor is postBWFor's loop; dctx ends at the phases' end. It
// allocates nothing.
func bwLoopFor(ctx, dctx context.Context, p *Params, d *data, at verbs.Atomics, peer *Dest, ph *phases) (uint64, error) {
	win := window(p)
	scnt, ccnt := 0, 0
	var n uint64
	var c counts
	for !ph.over() {
		for scnt-ccnt < win {
			err := d.post(p, at, peer, (scnt+1)%p.CQMod == 0)
			if errors.Is(err, verbs.ErrQueueFull) {
				break // wait for completions
			}
			if err != nil {
				return n, ph.stop(ctx, fmt.Errorf("post %v %d: %w", p.Verb, scnt, err))
			}
			scnt++
		}
		before := c.rdma + c.sends
		if _, err := d.poll(dctx, &c); err != nil {
			return n, ph.stop(ctx, err)
		}
		done := c.rdma + c.sends - before
		ccnt += done * p.CQMod
		if done > 0 && ph.sampling(ph.clk.now()) {
			n += uint64(done * p.CQMod)
		}
	}
	return n, nil
}

// recvBWFor is run_iter_bw_server in duration mode: the timer starts at
// the first receive, every receive is reposted, those in the window
// counted.
func recvBWFor(ctx context.Context, p *Params, d *data) (Report, error) {
	var c counts
	for c.recvs == 0 {
		if _, err := d.poll(ctx, &c); err != nil {
			return Report{}, fmt.Errorf("waiting for the first receive: %w", err)
		}
	}
	ph := startPhases(p)
	dctx, cancel := context.WithDeadline(ctx, ph.deadline())
	defer cancel()
	n, err := recvLoopFor(ctx, dctx, d, &c, &ph)
	if err != nil {
		return Report{}, err
	}
	return durationBW(p, n, &ph), nil
}

// recvLoopFor is recvBWFor's loop from the first receives in c on. It
// allocates nothing.
func recvLoopFor(ctx, dctx context.Context, d *data, c *counts, ph *phases) (uint64, error) {
	var n uint64
	got := c.recvs
	for {
		if ph.sampling(ph.clk.now()) {
			n += uint64(got)
		}
		for range got {
			if err := d.postRecv(); err != nil {
				return 0, fmt.Errorf("repost receive: %w", err)
			}
		}
		if ph.over() {
			return n, nil
		}
		before := c.recvs
		if _, err := d.poll(dctx, c); err != nil {
			return n, ph.stop(ctx, err)
		}
		got = c.recvs - before
	}
}

// latFor runs a latency test's duration mode on one side and returns its
// row.
func latFor(ctx context.Context, p *Params, d *data, peer Dest, client bool) (LatDuration, error) {
	if p.Verb == Send {
		return sendLatFor(ctx, p, d, client)
	}
	ph := startPhases(p)
	dctx, cancel := context.WithDeadline(ctx, ph.deadline())
	defer cancel()
	var n uint64
	var err error
	if p.Verb == Read || p.Verb == Atomic {
		n, err = readLatFor(ctx, dctx, p, d, &peer, &ph)
	} else {
		n, err = writeLatFor(ctx, dctx, p, d, &peer, &ph, client)
	}
	if err != nil {
		return LatDuration{}, err
	}
	return durationLat(p, n, &ph), nil
}

// readLatFor is run_iter_lat in duration mode: one READ (or atomic) at a
// time, each completion in the window counted.
func readLatFor(ctx, dctx context.Context, p *Params, d *data, peer *Dest, ph *phases) (uint64, error) {
	at, err := d.atomics(p)
	if err != nil {
		return 0, err
	}
	var n uint64
	var c counts
	for i := 1; !ph.over(); i++ {
		if err := d.post(p, at, peer, true); err != nil {
			return n, ph.stop(ctx, fmt.Errorf("post %v %d: %w", p.Verb, i, err))
		}
		for c.rdma < i {
			if _, err := d.poll(dctx, &c); err != nil {
				return n, ph.stop(ctx, err)
			}
		}
		if ph.sampling(ph.clk.now()) {
			n++
		}
	}
	return n, nil
}

// writeLatFor is run_iter_lat_write in duration mode: the ping-pong of
// writeLat, each of the side's WRITEs completed in the window counted.
func writeLatFor(ctx, dctx context.Context, p *Params, d *data, peer *Dest, ph *phases, client bool) (uint64, error) {
	pollAt, postAt := d.half+p.Size-1, p.Size-1
	var n uint64
	var c counts
	for scnt, rcnt := 0, 0; !ph.over(); {
		if !(scnt < 1 && !client) {
			rcnt++
			if err := d.awaitByte(dctx, pollAt, byte(rcnt), &c); err != nil {
				return n, ph.stop(ctx, err)
			}
		}
		scnt++
		d.buf.Buf[postAt] = byte(scnt)
		if err := d.w.ep.Write(idRDMA, d.local, peer.VAddr, peer.RKey, true); err != nil {
			return n, ph.stop(ctx, fmt.Errorf("post write %d: %w", scnt, err))
		}
		for c.rdma < scnt {
			if _, err := d.poll(dctx, &c); err != nil {
				return n, ph.stop(ctx, err)
			}
		}
		if ph.sampling(ph.clk.now()) {
			n++
		}
	}
	return n, nil
}

// sendLatFor is run_iter_lat_send in duration mode: the client's first
// SEND opens the ping-pong; each side's timer starts at its first
// receive; every receive is reposted, those in the window counted.
func sendLatFor(ctx context.Context, p *Params, d *data, client bool) (LatDuration, error) {
	var c counts
	scnt := 0
	if client {
		if err := d.sendOne(ctx, &c, &scnt); err != nil {
			return LatDuration{}, err
		}
	}
	for c.recvs == 0 {
		if _, err := d.poll(ctx, &c); err != nil {
			return LatDuration{}, fmt.Errorf("waiting for the first receive: %w", err)
		}
	}
	ph := startPhases(p)
	dctx, cancel := context.WithDeadline(ctx, ph.deadline())
	defer cancel()
	var n uint64
	for rcnt := 1; ; rcnt++ {
		if ph.sampling(ph.clk.now()) {
			n++
		}
		if err := d.postRecv(); err != nil {
			return LatDuration{}, fmt.Errorf("repost receive: %w", err)
		}
		if ph.over() {
			break
		}
		err := d.sendOne(dctx, &c, &scnt)
		for err == nil && c.recvs <= rcnt {
			_, err = d.poll(dctx, &c)
		}
		if err != nil {
			if err := ph.stop(ctx, err); err != nil {
				return LatDuration{}, err
			}
			break
		}
	}
	return durationLat(p, n, &ph), nil
}

// sendOne posts a signaled SEND of the test buffer and waits for its
// completion.
func (d *data) sendOne(ctx context.Context, c *counts, scnt *int) error {
	if err := d.w.ep.Send(idSend, d.local, true); err != nil {
		return fmt.Errorf("post send %d: %w", *scnt, err)
	}
	*scnt++
	for c.sends < *scnt {
		if _, err := d.poll(ctx, c); err != nil {
			return err
		}
	}
	return nil
}
