package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/ndk"
)

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

// demoPingPong bounces a 64-byte SEND between a and b.
func demoPingPong(ctx context.Context, a, b *demoHost, qa, qb *ndk.QP, n int) (baseline.Latency, error) {
	const size = 64
	buf := func(x *demoHost, flags ndk.MRFlag) (ndk.SGE, func(), error) {
		mem, err := x.Adapter.Memory(size)
		if err != nil {
			return ndk.SGE{}, nil, err
		}
		mr, err := x.PD.RegisterMR(mem, flags)
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
