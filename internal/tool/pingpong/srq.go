package pingpong

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// ibv_srq_pingpong (libibverbs/examples/srq_pingpong.c): NumQP RC QPs
// (-q, default 16, fewer than 256) on one CQ and one SRQ of RxDepth
// receives. Each side sends 256 addresses (MAX_QP; a MsgLen message
// each, zeroed past its NumQP) over the TCP connection, the server
// reading all of the client's and connecting its QPs before it answers;
// the client then says "done" and connects. The
// client sends on every QP at once; on each QP a side sends again once
// that QP's last send completed and a message arrived on it, while fewer
// than Iters sends have completed in all. Iters counts over all QPs,
// sends and receives each; receives are reposted to the SRQ when no
// more than NumQP are left. Each QP's completions are told apart by the
// QP they name (ibv_wc.qp_num; ndk's QPContext).

// DefaultSRQQPs is srq_pingpong's -q default.
const DefaultSRQQPs = 16

// srqWireQPs is srq_pingpong's MAX_QP: each side always sends this many
// addresses, zeroed past its -q, and reads as many.
const srqWireQPs = 256

// MaxSRQQPs bounds -q as srq_pingpong does ("num_qp %d must be less
// than 256").
const MaxSRQQPs = srqWireQPs - 1

// srqRun is one side of srq_pingpong.
type srqRun struct {
	base
	cfg Config
	srq *ndk.SRQ
	qps []*ndk.QP
	sgl []ndk.SGE
	res [16]ndk.ResultEx
}

// runSRQ is Run for Mode SRQ.
func runSRQ(ctx context.Context, a *ndk.Adapter, cfg Config, out io.Writer) (Stats, error) {
	var st Stats
	if cfg.NumQP == 0 {
		cfg.NumQP = DefaultSRQQPs
	}
	switch {
	case cfg.NumQP < 1 || cfg.NumQP > MaxSRQQPs:
		return st, fmt.Errorf("num_qp %d must be less than %d (and positive)", cfg.NumQP, srqWireQPs)
	case cfg.NumQP > cfg.RxDepth:
		// srq_pingpong.c's words.
		return st, fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", cfg.RxDepth, cfg.NumQP)
	}
	r := &srqRun{base: newBase(a), cfg: cfg}
	defer r.close()
	if err := r.init(); err != nil {
		return st, err
	}
	routs, err := r.postRecv(cfg.RxDepth)
	if err != nil {
		return st, fmt.Errorf("couldn't post receive (%d): %w", routs, err)
	}
	if cfg.Events {
		if err := r.cq.Arm(ndk.CQNotifyAny); err != nil {
			return st, fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	wire := make([]Dest, srqWireQPs)
	my := wire[:cfg.NumQP]
	for i, qp := range r.qps {
		my[i] = Dest{QPN: qp.QPN(), PSN: qp.LocalEndpoint().PSN, GID: cfg.GID}
		fmt.Fprint(out, AddressLine("local", my[i], false))
	}
	connect := func(rem []Dest) error {
		for i, qp := range r.qps {
			if err := connectRC(a, qp, cfg.MTU, rem[i], my[i]); err != nil {
				return fmt.Errorf("QP %d: %w", i, err)
			}
		}
		return nil
	}
	var rem []Dest
	if cfg.Server != "" {
		rem, err = clientExch(ctx, cfg, wire)
	} else {
		rem, err = serverExch(ctx, cfg, wire, func(rem []Dest) error { return connect(rem[:cfg.NumQP]) })
	}
	if err != nil {
		return st, err
	}
	rem = rem[:cfg.NumQP]
	for _, d := range rem {
		fmt.Fprint(out, AddressLine("remote", d, false))
	}
	st.Local, st.Remote = my[0], rem[0]
	if cfg.Server != "" {
		if err := connect(rem); err != nil {
			return st, err
		}
	}
	pending := make([]int, cfg.NumQP)
	for i := range pending {
		pending[i] = recvWRID
	}
	if cfg.Server != "" {
		if cfg.Validate {
			markPages(r.buf)
		}
		for i := range r.qps {
			if err := r.qps[i].Send(sendWRID, r.sgl, 0); err != nil {
				return st, fmt.Errorf("couldn't post send: %w", err)
			}
			pending[i] |= sendWRID
		}
	}
	start := time.Now()
	if err := r.loop(ctx, &st, pending, routs); err != nil {
		return st, err
	}
	st.Usec = float32(time.Since(start).Microseconds())
	if st.Usec == 0 {
		st.Usec = 1
	}
	fmt.Fprint(out, ResultLines(cfg.Size, cfg.Iters, st.Usec))
	if cfg.Server == "" && cfg.Validate {
		return st, checkPages(r.buf, out)
	}
	return st, nil
}

// loop is srq_pingpong's main loop: until Iters sends and receives have
// completed in all.
func (r *srqRun) loop(ctx context.Context, st *Stats, pending []int, routs int) error {
	cfg := r.cfg
	idle := 0
	for st.Recvd < cfg.Iters || st.Sent < cfg.Iters {
		if cfg.Events {
			select {
			case <-r.notify:
			case <-ctx.Done():
				return fmt.Errorf("waiting for a CQ event after %d sends and %d receives: %w", st.Sent, st.Recvd, ctx.Err())
			case <-r.a.Gone():
				return r.a.Err()
			}
			if err := r.cq.Arm(ndk.CQNotifyAny); err != nil {
				return fmt.Errorf("couldn't request CQ notification: %w", err)
			}
			// An event stands for every completion since the last arm.
			for {
				n, err := r.handle(st, pending, &routs)
				if err != nil {
					return err
				}
				if n == 0 {
					break
				}
			}
			continue
		}
		n, err := r.handle(st, pending, &routs)
		switch {
		case err != nil:
			return err
		case n > 0:
			idle = 0
		case idle%256 == 255:
			idle++
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("after %d sends and %d receives: %w", st.Sent, st.Recvd, err)
			}
			if err := r.a.Err(); err != nil {
				return err
			}
			time.Sleep(20 * time.Microsecond)
		default:
			idle++
			runtime.Gosched()
		}
	}
	return nil
}

// handle takes what the CQ holds (up to len(r.res)) and answers it: a
// completed receive is reposted when few are left, and a QP whose send
// and receive both completed sends again while fewer than Iters sends
// have completed.
func (r *srqRun) handle(st *Stats, pending []int, routs *int) (int, error) {
	cfg := r.cfg
	n := r.cq.GetResultsEx(r.res[:])
	for i := 0; i < n; i++ {
		wc := &r.res[i]
		id, _ := wc.RequestContext.(int)
		if wc.Status != ndk.StatusSuccess {
			return n, fmt.Errorf("failed status %v (%#x) for wr_id %d", wc.Status, uint32(wc.Status), id)
		}
		q, ok := wc.QPContext.(int)
		if !ok || q < 0 || q >= len(r.qps) {
			return n, fmt.Errorf("completion for a QP not ours (%v)", wc.QPContext)
		}
		switch id {
		case sendWRID:
			st.Sent++
		case recvWRID:
			if *routs--; *routs <= cfg.NumQP {
				k, err := r.postRecv(cfg.RxDepth - *routs)
				*routs += k
				if err != nil {
					return n, fmt.Errorf("couldn't post receive (%d): %w", *routs, err)
				}
			}
			st.Recvd++
		default:
			return n, fmt.Errorf("completion for unknown wr_id %d", id)
		}
		pending[q] &^= id
		if st.Sent < cfg.Iters && pending[q] == 0 {
			if err := r.qps[q].Send(sendWRID, r.sgl, 0); err != nil {
				return n, fmt.Errorf("couldn't post send: %w", err)
			}
			pending[q] = recvWRID | sendWRID
		}
	}
	return n, nil
}

// init is srq_pingpong's pp_init_ctx: the buffer (0x7b), its MR, one CQ
// of RxDepth+NumQP, the SRQ of RxDepth, NumQP QPs on both with one send
// each. A QP's context is its index.
func (r *srqRun) init() error {
	cfg := r.cfg
	if err := r.initBase(cfg.Size, cfg.RxDepth+cfg.NumQP, cfg.Events); err != nil {
		return err
	}
	var err error
	if r.srq, err = r.pd.CreateSRQ(cfg.RxDepth, 1, 0, nil); err != nil {
		return fmt.Errorf("couldn't create SRQ: %w", err)
	}
	for i := 0; i < cfg.NumQP; i++ {
		qp, err := r.pd.CreateQP(ndk.QPConfig{Context: i, ReceiveCQ: r.cq, InitiatorCQ: r.cq, SRQ: r.srq,
			InitiatorQueueDepth: 1, MaxInitiatorRequestSGE: 1})
		if err != nil {
			return fmt.Errorf("couldn't create QP[%d]: %w", i, err)
		}
		r.qps = append(r.qps, qp)
	}
	sge, err := r.mr.SGE(0, cfg.Size)
	if err != nil {
		return err
	}
	r.sgl = []ndk.SGE{sge}
	return nil
}

// postRecv posts up to n receives of the whole buffer to the SRQ.
func (r *srqRun) postRecv(n int) (int, error) {
	for i := 0; i < n; i++ {
		if err := r.srq.Receive(recvWRID, r.sgl); err != nil {
			return i, err
		}
	}
	return n, nil
}

func (r *srqRun) close() {
	for _, qp := range r.qps {
		_ = qp.Close()
	}
	if r.srq != nil {
		r.srq.Close()
	}
	r.closeBase()
}
