package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// WaitOne waits for w's CQ until it yields one result or the deadline
// passes.
func WaitOne(ctx context.Context, w *CQWait, r *ndk.Result, deadline time.Time) error {
	var rs [1]ndk.Result
	start := time.Now()
	for w.cq.GetResults(rs[:]) == 0 {
		if err := w.idle(ctx, nil, deadline); errors.Is(err, errWaitDeadline) {
			return fmt.Errorf("no completion within %v", deadline.Sub(start).Round(time.Second))
		} else if err != nil {
			return err
		}
	}
	w.reset()
	*r = rs[0]
	if r.Status != ndk.StatusSuccess {
		return fmt.Errorf("completion status %v", r.Status)
	}
	return nil
}

// pingSize is the size of the ping-pong's SENDs.
const pingSize = 64

// pingWarmup is how many round trips the ping-pong runs before it times
// any: the first ones pay for cold caches and the engines waking.
const pingWarmup = 100

// pingBuffer registers pingSize bytes of x's memory with flags.
func pingBuffer(x *Host, flags ndk.MRFlag) (ndk.SGE, func(), error) {
	mem, err := x.Adapter.Memory(pingSize)
	if err != nil {
		return ndk.SGE{}, nil, err
	}
	mr, err := x.PD.RegisterMR(mem, flags)
	if err != nil {
		return ndk.SGE{}, nil, err
	}
	sge, err := mr.SGE(0, pingSize)
	return sge, func() { mr.Deregister() }, err
}

// demoPingPong bounces a 64-byte SEND between a and b.
func demoPingPong(ctx context.Context, a, b *Host, qa, qb *ndk.QP, n int) (baseline.Latency, error) {
	e, err := newEchoer(b, qb)
	if err != nil {
		return baseline.Latency{}, err
	}
	defer e.release()
	stop := make(chan struct{})
	echo := make(chan error, 1)
	go func() { echo <- e.run(stop, time.Time{}) }()
	rtt, err := pingPeer(ctx, a, qa, n)
	close(stop)
	if e := <-echo; err == nil {
		err = e
	}
	return rtt, err
}

// echoer is the ping-pong's far side: it answers every SEND with one.
type echoer struct {
	b       *Host
	qb      *ndk.QP
	sb, rb  ndk.SGE
	release func()
}

// newEchoer registers b's buffers and posts its first receive.
func newEchoer(b *Host, qb *ndk.QP) (*echoer, error) {
	e := &echoer{b: b, qb: qb}
	sb, db, err := pingBuffer(b, ndk.MRFlagAllowLocalRead)
	if err != nil {
		return nil, err
	}
	rb, drb, err := pingBuffer(b, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		db()
		return nil, err
	}
	e.sb, e.rb, e.release = sb, rb, func() { drb(); db() }
	if err := qb.Receive(nil, []ndk.SGE{rb}); err != nil {
		e.release()
		return nil, err
	}
	return e, nil
}

// run echoes until stop closes, a receive completes in error (its QP
// flushed: the peer disconnected) or, if set, the deadline passes.
func (e *echoer) run(stop <-chan struct{}, deadline time.Time) error {
	var r [1]ndk.Result
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if e.b.RCQ.cq.GetResults(r[:]) == 0 {
			if err := e.b.RCQ.idle(context.Background(), stop, deadline); errors.Is(err, errWaitDeadline) {
				return errors.New("echo: the ping-pong outlasted its bound")
			} else if err != nil {
				return fmt.Errorf("echo: %w", err)
			}
			continue
		}
		e.b.RCQ.reset()
		if r[0].Status != ndk.StatusSuccess {
			return fmt.Errorf("echo: receive completion %v", r[0].Status)
		}
		if err := e.qb.Receive(nil, []ndk.SGE{e.rb}); err != nil {
			return err
		}
		if err := e.qb.Send(nil, []ndk.SGE{e.sb}, ndk.OpFlagSilentSuccess); err != nil {
			return err
		}
	}
}

// pingPeer times n SEND round trips from a on qa, after pingWarmup
// untimed ones, against a peer that answers every SEND with one.
func pingPeer(ctx context.Context, a *Host, qa *ndk.QP, n int) (baseline.Latency, error) {
	sa, da, err := pingBuffer(a, ndk.MRFlagAllowLocalRead)
	if err != nil {
		return baseline.Latency{}, err
	}
	defer da()
	ra, dra, err := pingBuffer(a, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		return baseline.Latency{}, err
	}
	defer dra()
	if err := qa.Receive(nil, []ndk.SGE{ra}); err != nil {
		return baseline.Latency{}, err
	}
	samples := make([]time.Duration, 0, n)
	deadline := time.Now().Add(30 * time.Second)
	var r ndk.Result
	for i := 0; i < n+pingWarmup; i++ {
		t0 := time.Now()
		if err = qa.Send(nil, []ndk.SGE{sa}, ndk.OpFlagSilentSuccess); err != nil {
			break
		}
		if err = WaitOne(ctx, a.RCQ, &r, deadline); err != nil {
			break
		}
		rtt := time.Since(t0)
		if err = qa.Receive(nil, []ndk.SGE{ra}); err != nil {
			break
		}
		if i >= pingWarmup {
			samples = append(samples, rtt)
		}
	}
	return baseline.Summarize(samples), err
}
