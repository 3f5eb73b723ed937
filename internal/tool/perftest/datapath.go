package perftest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Atomic operands: perftest's ATOMIC_ADD_VALUE and ATOMIC_SWAP_VALUE.
const (
	atomicAdd  = 1
	atomicSwap = 7
)

// counts tallies completions by kind; the data-path loops poll into it.
type counts struct {
	sends, recvs, rdma int
	// posted and done are requests posted and completed (a signaled
	// completion stands for CQMod of them) on one QP of a -q test.
	posted, done int
}

// poll drains up to 16 completions into n without allocating. A failed
// completion or a disconnect is an error; an empty poll idles
// (verbs.Backoff: spin, then block until the endpoint has news).
func (d *data) poll(ctx context.Context, n *counts) (int, error) {
	k, err := d.w.ep.Poll(d.w.buf[:])
	if err != nil {
		return 0, err
	}
	for i := range d.w.buf[:k] {
		c := &d.w.buf[i]
		if c.Err != nil {
			return 0, fmt.Errorf("%v %d failed: %w", c.Op, c.ID, c.Err)
		}
		switch c.Op {
		case verbs.OpSend:
			n.sends++
		case verbs.OpReceive, verbs.OpRecvRDMAWithImm:
			n.recvs++
		default:
			n.rdma++
		}
	}
	if k == 0 {
		if err := d.w.idle.Idle(ctx, d.w.ep); err != nil {
			return 0, err
		}
	} else {
		d.w.idle.Reset()
	}
	return k, nil
}

// post issues request i of the test's verb against the peer's buffer.
func (d *data) post(p *Params, at verbs.Atomics, peer *Dest, signaled bool) error {
	ep := d.w.ep
	switch p.Verb {
	case Write:
		if d.imm != nil {
			return d.imm.WriteImm(idRDMA, d.local, peer.VAddr, peer.RKey, 0, signaled)
		}
		return ep.Write(idRDMA, d.local, peer.VAddr, peer.RKey, signaled)
	case Read:
		return ep.Read(idRDMA, d.local, peer.VAddr, peer.RKey, signaled)
	case Send:
		return ep.Send(idSend, d.local, signaled)
	}
	if p.AtomicType == CompareAndSwap {
		return at.CompareSwap(idRDMA, d.local, peer.VAddr, peer.RKey, 0, atomicSwap, signaled)
	}
	return at.FetchAdd(idRDMA, d.local, peer.VAddr, peer.RKey, atomicAdd, signaled)
}

func (d *data) atomics(p *Params) (verbs.Atomics, error) {
	if p.Verb != Atomic {
		return nil, nil
	}
	at, ok := d.w.ep.(verbs.Atomics)
	if !ok {
		return nil, fmt.Errorf("the endpoint has no atomics: %w", ErrUnsupported)
	}
	return at, nil
}

// window is how many requests may be outstanding: the TX depth, and for
// READ and atomics also the outstanding-read limit negotiated in the CM
// (initiator depth), which the requester must not exceed.
func window(p *Params) int {
	if p.Verb == Read || p.Verb == Atomic {
		return min(p.TxDepth, p.OutReads)
	}
	return p.TxDepth
}

// warmUp is perform_warm_up: one window of requests, the last signaled,
// before the measured run of a one-sided test.
func warmUp(ctx context.Context, p *Params, d *data, peer Dest) error {
	at, err := d.atomics(p)
	if err != nil {
		return err
	}
	n := window(p)
	if p.Duration == 0 {
		n = min(n, p.Iterations)
	}
	for i := range n {
		if err := d.post(p, at, &peer, i == n-1); err != nil {
			return err
		}
	}
	var c counts
	for c.rdma+c.sends < 1 {
		if _, err := d.poll(ctx, &c); err != nil {
			return err
		}
	}
	return nil
}

// postBW is run_iter_bw for one QP: keep the window full (in lists of
// PostList), signal every CQMod-th request and the last, stamp each post and each signaled
// completion. It allocates nothing.
func postBW(ctx context.Context, p *Params, d *data, peer Dest, posted, completed []uint64) error {
	at, err := d.atomics(p)
	if err != nil {
		return err
	}
	iters, win, list := p.Iterations, window(p), p.PostList
	clk := clock{time.Now()}
	scnt, ccnt := 0, 0
	var c counts
	for ccnt < iters {
		// A list (-l) starts only where all of it fits in the window.
		for scnt < iters && (scnt%list != 0 || scnt-ccnt+list <= win) {
			signaled := (scnt+1)%p.CQMod == 0 || scnt == iters-1
			if !p.NoPeak || scnt == 0 {
				posted[scnt] = clk.now()
			}
			err := d.post(p, at, &peer, signaled)
			if errors.Is(err, verbs.ErrQueueFull) {
				break // wait for completions
			}
			if err != nil {
				return fmt.Errorf("post %v %d: %w", p.Verb, scnt, err)
			}
			scnt++
		}
		before := c.rdma + c.sends
		if _, err := d.poll(ctx, &c); err != nil {
			return fmt.Errorf("after %d of %d completions: %w", ccnt, iters, err)
		}
		ccnt = stampDone(p, c.rdma+c.sends-before, ccnt, completed, clk)
	}
	if p.NoPeak {
		completed[0] = clk.now()
	}
	return nil
}

// stampDone counts n signaled completions of one QP's run, each standing
// for CQMod requests (the last for what is left of Iterations), from
// ccnt on, stamping each in completed unless -N; it returns the new
// count.
func stampDone(p *Params, n, ccnt int, completed []uint64, clk clock) int {
	for range n {
		ccnt = min(ccnt+p.CQMod, p.Iterations)
		if !p.NoPeak {
			completed[ccnt-1] = clk.now()
		}
	}
	return ccnt
}

// recvBW is run_iter_bw_server: count Iterations receives, reposting while
// fewer than Iterations are posted. Its report spans the first to the last
// receive and has no peak.
func recvBW(ctx context.Context, p *Params, d *data) (Report, error) {
	clk := clock{time.Now()}
	var c counts
	var first uint64
	posts := p.RxDepth
	pctx := ctx
	var lastRecv time.Time
	var bound stallBound
	defer bound.stop()
	for c.recvs < p.Iterations {
		before := c.recvs
		if want := lastRecv.Add(UCStall); p.UC && c.recvs > 0 && (bound.ctx == nil || want.Sub(bound.deadline) > UCStall/2) {
			// A new bound when the last one fell half a stall behind: the
			// poll loop allocates nothing in between, and silence ends the
			// run after UCStall/2 to UCStall.
			pctx = bound.renew(ctx, want)
		}
		if _, err := d.poll(pctx, &c); err != nil {
			if p.UC && ctx.Err() == nil && pctx.Err() != nil {
				return Report{}, fmt.Errorf("%d of %d SENDs arrived, then none for %v: the others were lost, and an unreliable connection (-c UC) resends nothing (perftest's server waits for them for good): %w",
					c.recvs, p.Iterations, UCStall, ErrUCLost)
			}
			return Report{}, fmt.Errorf("after %d of %d receives: %w", c.recvs, p.Iterations, err)
		}
		if p.UC && c.recvs > before {
			lastRecv = time.Now()
		}
		if before == 0 && c.recvs > 0 {
			first = clk.now()
		}
		for ; posts < p.Iterations && posts < c.recvs+p.RxDepth; posts++ {
			if err := d.postRecv(); err != nil {
				return Report{}, fmt.Errorf("repost receive: %w", err)
			}
		}
	}
	last := clk.now()
	q := *p
	q.NoPeak = true
	posted, completed := make([]uint64, p.Iterations), make([]uint64, p.Iterations)
	posted[0], completed[0] = first, last
	return bwReport(&q, posted, completed), nil
}

// readLat is run_iter_lat for READ and for the atomics (ib_read_lat,
// ib_atomic_lat): one request at a time, stamped at post.
func readLat(ctx context.Context, p *Params, d *data, peer Dest, posted []uint64) error {
	at, err := d.atomics(p)
	if err != nil {
		return err
	}
	clk := clock{time.Now()}
	var c counts
	for i := range posted {
		posted[i] = clk.now()
		if err := d.post(p, at, &peer, true); err != nil {
			return fmt.Errorf("post %v %d: %w", p.Verb, i, err)
		}
		for c.rdma <= i {
			if _, err := d.poll(ctx, &c); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeLat is run_iter_lat_write: each side WRITEs its buffer to the
// peer with the iteration number (mod 256) in the last byte, and learns of
// the peer's WRITE by polling the last byte of its own target half. The
// client writes first.
func writeLat(ctx context.Context, p *Params, d *data, peer Dest, posted []uint64, client bool) error {
	clk := clock{time.Now()}
	iters := len(posted)
	pollAt, postAt := d.half+p.Size-1, p.Size-1
	var c counts
	for scnt, rcnt := 0, 0; scnt < iters || rcnt < iters; {
		// The server writes first: run_iter_lat_write skips the first
		// wait on the SERVER (scnt < 1 && machine == SERVER). Live rxe
		// deadlocks otherwise: its client waits for our first write, and
		// as a server it finds our second write where it waits for the
		// first.
		if rcnt < iters && !(scnt < 1 && !client) {
			rcnt++
			if err := d.awaitByte(ctx, pollAt, byte(rcnt), &c); err != nil {
				return fmt.Errorf("waiting for the peer's write %d: %w", rcnt, err)
			}
		}
		if scnt < iters {
			posted[scnt] = clk.now()
			scnt++
			d.buf.Buf[postAt] = byte(scnt)
			if err := d.w.ep.Write(idRDMA, d.local, peer.VAddr, peer.RKey, true); err != nil {
				return fmt.Errorf("post write %d: %w", scnt, err)
			}
			for c.rdma < scnt {
				if _, err := d.poll(ctx, &c); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// writeImmLat is run_iter_lat_write_imm (perftest 24.01 and later): the
// ping-pong of writeLat with WRITEs with immediate, each side learning of
// the peer's by the receive it consumed, reposting while fewer than
// Iterations are posted (rcnt + rx_depth <= iters). The server writes
// first, as in writeLat.
func writeImmLat(ctx context.Context, p *Params, d *data, peer Dest, posted []uint64, client bool) error {
	clk := clock{time.Now()}
	iters := len(posted)
	postAt := p.Size - 1
	var c counts
	for scnt, rcnt := 0, 0; scnt < iters || rcnt < iters; {
		if rcnt < iters && !(scnt < 1 && !client) {
			rcnt++
			for c.recvs < rcnt {
				if _, err := d.poll(ctx, &c); err != nil {
					return fmt.Errorf("waiting for the peer's write %d: %w", rcnt, err)
				}
			}
			if rcnt+p.RxDepth <= iters {
				if err := d.postRecv(); err != nil {
					return fmt.Errorf("repost receive: %w", err)
				}
			}
		}
		if scnt < iters {
			posted[scnt] = clk.now()
			scnt++
			d.buf.Buf[postAt] = byte(scnt)
			if err := d.imm.WriteImm(idRDMA, d.local, peer.VAddr, peer.RKey, 0, true); err != nil {
				return fmt.Errorf("post write with immediate %d: %w", scnt, err)
			}
			for c.rdma < scnt {
				if _, err := d.poll(ctx, &c); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// awaitByte polls the byte at off of the test buffer until the peer's
// WRITE leaves want there. It polls the completions too, as the endpoint
// has news: a failed request or the peer's disconnect ends the wait
// rather than leaving it to the timeout (the peer's WRITE will not come).
func (d *data) awaitByte(ctx context.Context, off int, want byte, c *counts) error {
	for d.w.ep.Peek(d.buf, off) != want {
		if _, err := d.poll(ctx, c); err != nil {
			return err
		}
	}
	d.w.idle.Reset()
	return nil
}

// sendLat is run_iter_lat_send: ping-pong of SENDs, the client first, the
// receives reposted as they are consumed.
func sendLat(ctx context.Context, p *Params, d *data, posted []uint64, client bool) error {
	clk := clock{time.Now()}
	iters := len(posted)
	posts := p.RxDepth
	var c counts
	for scnt, rcnt := 0, 0; scnt < iters || rcnt < iters; {
		// The client sends first: run_iter_lat_send skips the first wait
		// on the CLIENT (scnt < 1 && machine == CLIENT), the server waits
		// for the client's first SEND. Live rxe as the server deadlocks
		// otherwise (both sides wait for receive 0).
		if rcnt < iters && !(scnt < 1 && client) {
			for c.recvs <= rcnt {
				if _, err := d.poll(ctx, &c); err != nil {
					return fmt.Errorf("waiting for receive %d: %w", rcnt, err)
				}
			}
			rcnt++
			if posts < iters {
				if err := d.postRecv(); err != nil {
					return fmt.Errorf("repost receive: %w", err)
				}
				posts++
			}
		}
		if scnt < iters {
			posted[scnt] = clk.now()
			if err := d.w.ep.Send(idSend, d.local, true); err != nil {
				return fmt.Errorf("post send %d: %w", scnt, err)
			}
			scnt++
			for c.sends < scnt {
				if _, err := d.poll(ctx, &c); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// stallBound is the deadline of a -c UC receiver's wait for its next SEND.
type stallBound struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
}

// renew replaces the bound by one at d under parent and returns it.
func (b *stallBound) renew(parent context.Context, d time.Time) context.Context {
	b.stop()
	b.deadline = d
	b.ctx, b.cancel = context.WithDeadline(parent, d)
	return b.ctx
}

func (b *stallBound) stop() {
	if b.cancel != nil {
		b.cancel()
	}
}
