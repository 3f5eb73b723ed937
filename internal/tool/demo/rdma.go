package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// rdmaSlots is how many WRITEs or READs the demo keeps in flight, each
// with its own slot of memory on both sides.
const rdmaSlots = 16

// demoWrite writes n messages of size bytes into b's memory, op i into slot
// i mod rdmaSlots with pattern i, keeping rdmaSlots in flight. A slot's
// source is refilled only after its previous WRITE completed; at the end
// every slot of b's memory must hold the last pattern written to it.
func demoWrite(ctx context.Context, a, b *Host, qa *ndk.QP, n, size int) (phase, error) {
	src, dst, err := memoryPair(a, b, size*rdmaSlots)
	if err != nil {
		return phase{}, err
	}
	smr, dmr, release, err := registerPair(a.PD, src, ndk.MRFlagAllowLocalRead, b.PD, dst, ndk.MRFlagAllowRemoteWrite)
	if err != nil {
		return phase{}, err
	}
	defer release()
	p, err := writeSlots(ctx, a.ICQ, qa, smr, src, n, size, dmr.Addr(), dmr.RemoteToken())
	if err != nil {
		return phase{}, err
	}
	b.Adapter.Stats() // orders this goroutine after B's engine (in process or the daemon's) placed the bytes
	if !bytes.Equal(dst, src) {
		return phase{}, errors.New("B's memory does not hold the last WRITE of every slot")
	}
	return p, nil
}

// writeSlots WRITEs n messages of size bytes from src (registered as smr)
// to the memory at addr with token, op i from and into slot i mod
// rdmaSlots with pattern i, keeping rdmaSlots in flight, and returns once
// all completed.
func writeSlots(ctx context.Context, cq *CQWait, qa *ndk.QP, smr *ndk.MR, src []byte, n, size int, addr uint64, token uint32) (phase, error) {
	t0 := time.Now()
	err := pipeline(ctx, cq, n, func(i int) error {
		slot := i % rdmaSlots
		fillMessage(src[slot*size:(slot+1)*size], uint64(i))
		sge, err := smr.SGE(slot*size, size)
		if err != nil {
			return err
		}
		return qa.Write(nil, []ndk.SGE{sge}, addr+uint64(slot*size), token, 0)
	}, nil)
	if err != nil {
		return phase{}, err
	}
	return phase{ops: n, bytes: uint64(n) * uint64(size), elapsed: time.Since(t0)}, nil
}

// writtenSlots is what writeSlots leaves in the target memory of
// rdmaSlots slots: each slot's last message, zero where none went.
func writtenSlots(n, size int) []byte {
	want := make([]byte, size*rdmaSlots)
	for slot := range min(n, rdmaSlots) {
		last := slot + (n-1-slot)/rdmaSlots*rdmaSlots
		fillMessage(want[slot*size:(slot+1)*size], uint64(last))
	}
	return want
}

// memoryPair gives n bytes of x's memory and n of y's, from
// Adapter.Memory: memory a daemon maps when the adapter is its client.
func memoryPair(x, y *Host, n int) (xm, ym []byte, err error) {
	if xm, err = x.Adapter.Memory(n); err != nil {
		return nil, nil, fmt.Errorf("%s: memory: %w", x.Name, err)
	}
	if ym, err = y.Adapter.Memory(n); err != nil {
		return nil, nil, fmt.Errorf("%s: memory: %w", y.Name, err)
	}
	return xm, ym, nil
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
func demoRead(ctx context.Context, a, b *Host, qa *ndk.QP, n, size int) (phase, error) {
	src, dst, err := memoryPair(b, a, size*rdmaSlots)
	if err != nil {
		return phase{}, err
	}
	readFill(src, size)
	smr, dmr, release, err := registerPair(b.PD, src, ndk.MRFlagAllowRemoteRead, a.PD, dst, ndk.MRFlagAllowLocalWrite)
	if err != nil {
		return phase{}, err
	}
	defer release()
	return readSlots(ctx, a.ICQ, qa, dmr, dst, src, n, size, smr.Addr(), smr.RemoteToken())
}

// readFill fills the rdmaSlots slots of a READ phase's source.
func readFill(src []byte, size int) {
	for slot := range rdmaSlots {
		fillMessage(src[slot*size:(slot+1)*size], uint64(slot)+0xabc)
	}
}

// readSlots READs n messages of size bytes from the memory at addr with
// token into dst (registered as dmr), op i from slot i mod rdmaSlots into
// the same slot, and checks each one against that slot of want as it
// completes.
func readSlots(ctx context.Context, cq *CQWait, qa *ndk.QP, dmr *ndk.MR, dst, want []byte, n, size int, addr uint64, token uint32) (phase, error) {
	t0 := time.Now()
	err := pipeline(ctx, cq, n, func(i int) error {
		slot := i % rdmaSlots
		clear(dst[slot*size : (slot+1)*size])
		sge, err := dmr.SGE(slot*size, size)
		if err != nil {
			return err
		}
		return qa.Read(slot, []ndk.SGE{sge}, addr+uint64(slot*size), token, 0)
	}, func(r ndk.Result) error {
		slot := r.RequestContext.(int)
		if !bytes.Equal(dst[slot*size:(slot+1)*size], want[slot*size:(slot+1)*size]) {
			return fmt.Errorf("READ into slot %d returned other bytes than the peer's memory holds", slot)
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
func pipeline(ctx context.Context, w *CQWait, n int, post func(i int) error, done func(ndk.Result) error) error {
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
		k := w.cq.GetResults(rs[:])
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
			if err := w.idle(ctx, nil, deadline); errors.Is(err, errWaitDeadline) {
				return fmt.Errorf("%d of %d requests completed within 30s", completed, n)
			} else if err != nil {
				return err
			}
		} else {
			w.reset()
		}
	}
	return nil
}
