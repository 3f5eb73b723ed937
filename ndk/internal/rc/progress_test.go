package rc

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// progressPop pops one completion of c, running both engines' turns on
// this goroutine while it finds none, as a PollProgress consumer does.
func progressPop(t testing.TB, c *cq.CQ, e *cq.Entry, engines ...*Engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !c.Pop(e) {
		for _, g := range engines {
			g.Progress()
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion within 10s")
		}
	}
	if e.Status != ndkpi.StatusSuccess {
		t.Fatalf("completion %+v", *e)
	}
}

// TestProgressAllocatesNothing runs round trips whose every frame is
// moved by the consumer's turns (Progress on empty polls, and the posts'
// own turns) and counts every allocation in the process.
func TestProgressAllocatesNothing(t *testing.T) {
	a, b := newPair(t, pairOptions{poll: PollProgress})
	src := a.buffer(3000, 0, false)
	dst := b.buffer(3000, memreg.AccessLocalWrite|memreg.AccessRemoteWrite, false)
	ctx := new(int)
	recvSGL := []SGE{dst.sge(0, 3000)}
	send := SendWR{Op: OpSend, Context: ctx, SGL: []SGE{src.sge(0, 3000)}}
	write := SendWR{Op: OpWrite, Context: ctx, SGL: []SGE{src.sge(0, 3000)}, RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}
	var e cq.Entry
	round := func() {
		b.qps[0].PostReceive(ctx, recvSGL)
		a.qps[0].PostSend(&send)
		a.qps[0].PostSend(&write)
		progressPop(t, b.rcq, &e, b.eng, a.eng)
		progressPop(t, a.scq, &e, a.eng, b.eng)
		progressPop(t, a.scq, &e, a.eng, b.eng)
	}
	for i := 0; i < 50; i++ { // warm up: maps, pipe buffers, lazily grown slices
		round()
	}
	before := a.eng.Stats().ConsumerTurns
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per round trip, want 0", n)
	}
	if a.eng.Stats().ConsumerTurns == before {
		t.Fatal("no consumer turn ran: the test measured the engine goroutine's path")
	}
}

// TestProgressOffInOtherModes: Progress runs nothing on an adaptive engine,
// whose goroutine owns every turn.
func TestProgressOffInOtherModes(t *testing.T) {
	a, _ := newPair(t, pairOptions{})
	if ran, _ := a.eng.consumerTurn(true); ran {
		t.Fatal("a consumer ran a turn of a PollAdaptive engine")
	}
	if n := a.eng.Stats().ConsumerTurns; n != 0 {
		t.Fatalf("%d consumer turns", n)
	}
}

// waitAsleep waits until e's goroutine sleeps until noDeadline (no timer,
// not napping for consumers) or, with any, in any sleep.
func waitAsleep(t *testing.T, e *Engine, unbounded bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := e.sleepUntil.Load()
		if s != 0 && (!unbounded || s == noDeadline) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not asleep (sleepUntil %d)", s)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestProgressWakesTheSleepingEngineForItsTimers: a post runs the turn of
// an engine asleep without a deadline; the request it sends is lost, and
// nobody calls Progress again. The ACK timer the consumer's turn armed is
// due long before the engine would look, so the turn must wake it (the
// doorbell), and the engine's retransmission must complete the request.
func TestProgressWakesTheSleepingEngineForItsTimers(t *testing.T) {
	var dropped atomic.Int32
	a, b := newPair(t, pairOptions{
		poll: PollProgress,
		pipe: porttest.PipeConfig{Filter: func(dir porttest.Direction, f []byte) porttest.Verdict {
			// The first SEND only: a frame carrying the payload byte 0x5A.
			if dir == porttest.AtoB && len(f) > 100 && f[len(f)-5] == 0x5A && dropped.CompareAndSwap(0, 1) {
				return porttest.Drop
			}
			return porttest.Pass
		}},
		params: func(p *ConnParams) { p.AckTimeout = timeScale * 5 * time.Millisecond },
	})
	src := a.buffer(64, 0, false)
	for i := range src.b {
		src.b[i] = 0x5A
	}
	dst := b.buffer(64, memreg.AccessLocalWrite, false)
	mustPost(t, b.qps[0].PostReceive(nil, []SGE{dst.sge(0, 64)}))
	turns := a.eng.Stats().ConsumerTurns // before the sleep: Stats wakes the engine
	waitAsleep(t, a.eng, true)
	waitAsleep(t, b.eng, true)
	mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 64)}}))
	if dropped.Load() != 1 {
		t.Fatal("the SEND did not leave in the post's turn")
	}
	// Plain polls from here: only the engines' goroutines move frames.
	waitCQ(t, a.scq, 1, 5*time.Second)
	waitCQ(t, b.rcq, 1, 5*time.Second)
	sameBytes(t, "payload", dst.b, src.b)
	s := a.eng.Stats()
	if s.ConsumerTurns != turns+1 {
		t.Fatalf("%d consumer turns, want 1 (the post's)", s.ConsumerTurns-turns)
	}
	if s.Timeouts == 0 {
		t.Fatal("no ACK timeout: the lost SEND was not what completed")
	}
}

// TestProgressPostToASleepingEngine: with the engines asleep, a post and
// the peer's poll move a SEND and its ACK on the consumers' threads, and
// the completions come, round after round.
func TestProgressPostToASleepingEngine(t *testing.T) {
	a, b := newPair(t, pairOptions{poll: PollProgress})
	src := a.buffer(64, 0, false)
	dst := b.buffer(64, memreg.AccessLocalWrite, false)
	var e cq.Entry
	for i := 0; i < 20; i++ {
		binary.LittleEndian.PutUint64(src.b, uint64(i))
		mustPost(t, b.qps[0].PostReceive(nil, []SGE{dst.sge(0, 64)}))
		waitAsleep(t, a.eng, false)
		waitAsleep(t, b.eng, false)
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 64)}}))
		progressPop(t, b.rcq, &e, b.eng)
		progressPop(t, a.scq, &e, a.eng)
		if got := binary.LittleEndian.Uint64(dst.b); got != uint64(i) {
			t.Fatalf("round %d received %d", i, got)
		}
	}
}

// TestProgressContended: consumers on many goroutines post and poll on
// four QPs per engine, and more goroutines call Progress in a loop,
// while the engine goroutines run their own turns: every message arrives
// once, in order, with its payload (run under -race: the turn token is
// all that keeps the engine's state single-threaded).
func TestProgressContended(t *testing.T) {
	const (
		qps    = 4
		msgs   = 400
		window = 8
		size   = 256
	)
	a, b := newPair(t, pairOptions{poll: PollProgress, noConnect: true, pipe: porttest.PipeConfig{Seed: 3, Loss: 0.01, Reorder: 0.01}})
	type side struct {
		q        *QP
		scq, rcq *cq.CQ
	}
	mk := func(h *host, qpn uint32) side {
		scq, _ := cq.New(1024, nil)
		rcq, _ := cq.New(1024, nil)
		q, err := h.eng.CreateQP(QPConfig{QPN: qpn, PD: testPD, RecvCQ: rcq, SendCQ: scq,
			RecvDepth: 64, SendDepth: 64, MaxRecvSGE: 1, MaxSendSGE: 1, MaxReadSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		return side{q, scq, rcq}
	}
	var wg sync.WaitGroup
	var stop atomic.Bool
	errs := make(chan string, 2*qps)
	for i := 0; i < qps; i++ {
		x, y := mk(a, 0x200+uint32(i)), mk(b, 0x200+uint32(i))
		p := defaultParams(rocev2.MTU1024)
		epA := Endpoint{IP: a.ip, MAC: a.mac, QPN: x.q.QPN(), PSN: 100}
		epB := Endpoint{IP: b.ip, MAC: b.mac, QPN: y.q.QPN(), PSN: 200}
		pA, pB := p, p
		pA.Local, pA.Remote = epA, epB
		pB.Local, pB.Remote = epB, epA
		if err := x.q.Connect(pA); err != nil {
			t.Fatal(err)
		}
		if err := y.q.Connect(pB); err != nil {
			t.Fatal(err)
		}
		src := a.buffer(size*window, 0, false)
		dst := b.buffer(size*window, memreg.AccessLocalWrite, false)
		for j := 0; j < window; j++ {
			mustPost(t, y.q.PostReceive(j, []SGE{dst.sge(j*size, size)}))
		}
		wg.Add(2)
		go func() { // sender: keeps window SENDs in flight, numbered
			defer wg.Done()
			var e cq.Entry
			sent, done := 0, 0
			for done < msgs && !stop.Load() {
				if sent < msgs && sent-done < window {
					slot := sent % window
					binary.LittleEndian.PutUint64(src.b[slot*size:], uint64(sent))
					if st := x.q.PostSend(&SendWR{Op: OpSend, Context: slot, SGL: []SGE{src.sge(slot*size, size)}}); st != ndkpi.StatusSuccess {
						errs <- "post failed"
						return
					}
					sent++
					continue
				}
				if !x.scq.Pop(&e) {
					a.eng.Progress()
					runtime.Gosched()
					continue
				}
				if e.Status != ndkpi.StatusSuccess {
					errs <- "send completed in error"
					return
				}
				done++
			}
		}()
		go func() { // receiver: checks the numbers, reposts
			defer wg.Done()
			var e cq.Entry
			for n := 0; n < msgs && !stop.Load(); {
				if !y.rcq.Pop(&e) {
					b.eng.Progress()
					runtime.Gosched()
					continue
				}
				slot := e.RequestContext.(int)
				if e.Status != ndkpi.StatusSuccess || binary.LittleEndian.Uint64(dst.b[slot*size:]) != uint64(n) {
					errs <- "receive out of order or in error"
					return
				}
				n++
				if st := y.q.PostReceive(slot, []SGE{dst.sge(slot*size, size)}); st != ndkpi.StatusSuccess {
					errs <- "repost failed"
					return
				}
			}
		}()
	}
	var spinners sync.WaitGroup
	for i := 0; i < 4; i++ {
		spinners.Add(1)
		go func() {
			defer spinners.Done()
			for !stop.Load() {
				a.eng.Progress()
				b.eng.Progress()
				runtime.Gosched()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		stop.Store(true)
		<-finished
		t.Error("traffic did not finish within 60s")
	}
	stop.Store(true)
	spinners.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if a.eng.Stats().ConsumerTurns == 0 || b.eng.Stats().ConsumerTurns == 0 {
		t.Fatal("no consumer turns")
	}
}

// waitRecorder is a port that records how the engine sleeps: on its
// socket and doorbell (Wait) or, napping for consumers, on its doorbell
// alone (WaitDoorbell).
type waitRecorder struct {
	port.Port
	mu    sync.Mutex
	kinds []string
}

func (w *waitRecorder) record(k string) {
	w.mu.Lock()
	w.kinds = append(w.kinds, k)
	w.mu.Unlock()
}

func (w *waitRecorder) Wait(d time.Duration) error {
	w.record("wait")
	return w.Port.Wait(d)
}

func (w *waitRecorder) WaitDoorbell(d time.Duration) error {
	w.record("nap")
	return w.Port.(port.DoorbellWaiter).WaitDoorbell(d)
}

// since returns the kinds recorded from index i on.
func (w *waitRecorder) since(i int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.kinds[min(i, len(w.kinds)):]...)
}

func (w *waitRecorder) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.kinds)
}

// TestProgressNapsWhileDrivenAndWatchesAfter: while a consumer polls,
// the engine naps on its doorbell alone; once polls stop, it sleeps on
// its socket again (the backstop for a consumer that stopped polling),
// and the next polls make it nap again.
func TestProgressNapsWhileDrivenAndWatchesAfter(t *testing.T) {
	pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 64})
	if err != nil {
		t.Fatal(err)
	}
	w := &waitRecorder{Port: pipe.A()}
	e := newHost(t, w, "198.18.0.1", 1, &pairOptions{poll: PollProgress}).eng
	await := func(what string, from int, ok func(last string) bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Microsecond) {
			last := ""
			if k := w.since(from); len(k) > 0 {
				last = k[len(k)-1]
			}
			if ok(last) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: sleeps %v", what, w.since(from))
			}
		}
	}
	// Each poll is followed by a ring so that the engine looks again (a
	// poll's turn alone does not wake it).
	poll := func(last string) bool {
		e.Progress()
		e.port.Doorbell()
		return last == "nap"
	}
	await("nap while polled", 0, poll)
	i := w.count()
	await("wait on the socket once polls stopped", i, func(last string) bool { return last == "wait" })
	await("nap when polled again", w.count(), poll)
}
