package demo

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// sendStream is the SEND phase: A streams messages to B, whose receiver
// verifies each one and posts its receive again.
type sendStream struct {
	a, b   *Host
	qa, qb *ndk.QP
	n      int // messages
	size   int // bytes each
	src    []byte
	dst    []byte
	smr    *ndk.MR
	dmr    *ndk.MR
	// posted counts the receives B has posted. The sender sends message i
	// only once i < posted: every SEND finds its receive waiting, so the
	// responder never answers RNR and the RNR timer never shows up as
	// latency. perftest's send_bw keeps its receive queue ahead the same
	// way, with a deeper receive queue than its send queue.
	posted atomic.Int64
	// recvDone is closed when the receiver returns, with recvErr set.
	recvDone chan struct{}
	recvErr  error
	// pause, if set, stops the receiver this long after every 64
	// messages: a test's stand-in for a receiver that falls behind.
	pause time.Duration
}

// sendWindow is how many SENDs A keeps unacknowledged; the receive queue
// (demoQueueDepth) is twice as deep.
const sendWindow = demoQueueDepth / 2

// demoSend streams n SENDs of size bytes from a to b; every message carries
// its sequence number and a pattern that b checks.
func demoSend(ctx context.Context, a, b *Host, qa, qb *ndk.QP, n, size int) (phase, error) {
	return newSendStream(a, b, qa, qb, n, size).run(ctx)
}

func newSendStream(a, b *Host, qa, qb *ndk.QP, n, size int) *sendStream {
	return &sendStream{a: a, b: b, qa: qa, qb: qb, n: n, size: size}
}

func (s *sendStream) run(ctx context.Context) (phase, error) {
	var release func()
	var err error
	if s.src, s.dst, err = memoryPair(s.a, s.b, s.size*demoQueueDepth); err != nil {
		return phase{}, err
	}
	if s.smr, s.dmr, release, err = registerPair(s.a.PD, s.src, ndk.MRFlagAllowLocalRead, s.b.PD, s.dst, ndk.MRFlagAllowLocalWrite); err != nil {
		return phase{}, err
	}
	defer release()
	for slot := range demoQueueDepth {
		if err := s.post(slot); err != nil {
			return phase{}, err
		}
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	s.recvDone = make(chan struct{})
	go func() {
		defer close(s.recvDone)
		s.recvErr = s.receive(rctx)
	}()
	t0 := time.Now()
	if err := s.send(ctx); err != nil {
		stop()
		<-s.recvDone
		return phase{}, err
	}
	<-s.recvDone
	if s.recvErr != nil {
		return phase{}, s.recvErr
	}
	return phase{ops: s.n, bytes: uint64(s.n) * uint64(s.size), elapsed: time.Since(t0)}, nil
}

// post posts B's receive into slot.
func (s *sendStream) post(slot int) error {
	sge, err := s.dmr.SGE(slot*s.size, s.size)
	if err != nil {
		return err
	}
	if err := s.qb.Receive(slot, []ndk.SGE{sge}); err != nil {
		return err
	}
	s.posted.Add(1)
	return nil
}

// receive is B: it verifies each message in order and posts its receive
// again, until all n arrived, ctx ends, or nothing arrives for 10 s.
func (s *sendStream) receive(ctx context.Context) error {
	var rs [64]ndk.Result
	deadline := time.Now().Add(10 * time.Second)
	for got := 0; got < s.n; {
		k := s.b.RCQ.cq.GetResults(rs[:])
		if k == 0 {
			if err := s.b.RCQ.idle(ctx, nil, deadline); errors.Is(err, errWaitDeadline) {
				return fmt.Errorf("receiver: %d of %d messages, then none for 10s", got, s.n)
			} else if err != nil {
				return err
			}
			continue
		}
		s.b.RCQ.reset()
		deadline = time.Now().Add(10 * time.Second)
		if s.pause > 0 && got%64 == 0 {
			time.Sleep(s.pause)
		}
		for _, r := range rs[:k] {
			slot := r.RequestContext.(int)
			msg := s.dst[slot*s.size : (slot+1)*s.size]
			if r.Status != ndk.StatusSuccess || int(r.BytesTransferred) != s.size || !checkMessage(msg, uint64(got)) {
				return fmt.Errorf("message %d arrived wrong (status %v, %d bytes)", got, r.Status, r.BytesTransferred)
			}
			got++
			if err := s.post(slot); err != nil {
				return err
			}
		}
	}
	return nil
}

// send is A: it keeps up to sendWindow SENDs unacknowledged, each into a
// receive B has posted, and returns once all are acknowledged, or on the
// first failure, ctx's end, or the receiver's. Without B in this process
// (qb nil: a remote peer) it relies on the peer's receive queue, twice
// the window deep, and on RNR retries if the peer falls behind.
func (s *sendStream) send(ctx context.Context) error {
	var rs [64]ndk.Result
	inflight := 0
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < s.n || inflight > 0; {
		if i < s.n && inflight < sendWindow && (s.qb == nil || int64(i) < s.posted.Load()) {
			slot := i % demoQueueDepth
			fillMessage(s.src[slot*s.size:(slot+1)*s.size], uint64(i))
			sge, err := s.smr.SGE(slot*s.size, s.size)
			if err != nil {
				return err
			}
			err = s.qa.Send(nil, []ndk.SGE{sge}, 0)
			if err == nil {
				i++
				inflight++
				continue
			}
			if !errors.Is(err, ndk.ErrInsufficientResources) {
				return err
			}
		}
		k := s.a.ICQ.cq.GetResults(rs[:])
		for _, r := range rs[:k] {
			if r.Status != ndk.StatusSuccess {
				return fmt.Errorf("send completion %v", r.Status)
			}
		}
		inflight -= k
		if k > 0 {
			s.a.ICQ.reset()
			deadline = time.Now().Add(10 * time.Second)
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sender: %d of %d messages sent, %d unacknowledged for 10s", i, s.n, inflight)
		}
		select {
		case <-s.recvDone:
			if s.recvErr != nil {
				return s.recvErr
			}
			if i < s.n {
				return errors.New("receiver stopped early")
			}
		default:
		}
		if inflight == 0 {
			// Waiting for B to post receives, which no CQ announces.
			runtime.Gosched()
			continue
		}
		if err := s.a.ICQ.idle(ctx, s.recvDone, deadline); err != nil && !errors.Is(err, errWaitDeadline) {
			return err
		}
	}
	return nil
}

func fillMessage(b []byte, seq uint64) {
	binary.LittleEndian.PutUint64(b, seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(seq) + byte(i)
	}
}

func checkMessage(b []byte, seq uint64) bool {
	if binary.LittleEndian.Uint64(b) != seq {
		return false
	}
	for i := 8; i < len(b); i++ {
		if b[i] != byte(seq)+byte(i) {
			return false
		}
	}
	return true
}
