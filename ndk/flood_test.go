package ndk

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The flood tests: a victim adapter V, a well-behaved peer P streaming
// 64-byte SENDs to it over the in-memory link, and a flooder F at a third
// address whose frames arrive in V's receive queue (floodPort) and whose
// answers the link drops. Each reports the stream's message rate under
// the flood over its rate without, measured in alternating rounds of one
// run (the goal is >= 0.5), and asserts what V holds stays within its
// stated bound.

var (
	floodIP  = netip.MustParseAddr("198.18.0.3")
	floodMAC = rocev2.MAC{2, 0, 0, 0, 0, 3}
)

// floodPort is V's port. While on, each Receive returns at most half a
// batch of the link's frames and fills the rest with the flood's, cycled:
// the receive queue of a host that a peer floods as fast as the link
// carries. The frames are never written to.
type floodPort struct {
	port.Port
	on       atomic.Bool
	frames   [][]byte // set before on
	next     int      // engine goroutine only
	injected atomic.Uint64
}

func (p *floodPort) Receive(out [][]byte) int {
	if !p.on.Load() || len(p.frames) == 0 {
		return p.Port.Receive(out)
	}
	n := p.Port.Receive(out[:len(out)/2])
	for ; n < len(out); n++ {
		out[n] = p.frames[p.next]
		p.next = (p.next + 1) % len(p.frames)
		p.injected.Add(1)
	}
	return n
}

func (p *floodPort) Wait(d time.Duration) error {
	if p.on.Load() {
		return nil
	}
	return p.Port.Wait(d)
}

type floodBed struct {
	fp     *floodPort
	v, p   *scaleSide
	stream *sendStream
}

// newFloodBed builds V (over a floodPort, with opts and CM params) and P,
// and the stream from P to V.
func newFloodBed(t testing.TB, params cm.Params, opts Options) *floodBed {
	t.Helper()
	pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 4096, Filter: func(dir porttest.Direction, f []byte) porttest.Verdict {
		if dir == porttest.AtoB && rocev2.MAC(f[0:6]) == floodMAC {
			return porttest.Drop // F takes its answers off the wire
		}
		return porttest.Pass
	}})
	if err != nil {
		t.Fatal(err)
	}
	peers := map[netip.Addr]rocev2.MAC{pipeIPA: {2, 0, 0, 0, 0, 1}, pipeIPB: {2, 0, 0, 0, 0, 2}, floodIP: floodMAC}
	fp := &floodPort{Port: pipe.A()}
	b := &floodBed{fp: fp}
	b.v = newScaleSide(t, cmPipeAdapterWith(t, fp, pipeIPA.String(), 1, peers, params, opts), 64)
	b.p = newScaleSide(t, cmPipeAdapter(t, pipe.B(), pipeIPB.String(), 2, peers, cm.Params{}), 64)
	b.stream = streamBetween(t, b.p, b.v)
	b.stream.run(t, 500) // warm up
	return b
}

// ratio runs the stream for rounds of n messages, alternately without and
// with load (start and stop bracket each loaded round), and returns the
// loaded message rate over the unloaded one.
func (b *floodBed) ratio(t testing.TB, rounds, n int, start, stop func()) (float64, time.Duration, time.Duration) {
	t.Helper()
	var base, loaded time.Duration
	for range rounds {
		base += b.stream.run(t, n)
		start()
		loaded += b.stream.run(t, n)
		stop()
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(rounds*n) }
	return float64(base) / float64(loaded), per(base), per(loaded)
}

func (b *floodBed) floodFrame(t testing.TB, h rocev2.Headers, payload []byte) []byte {
	t.Helper()
	h.Eth = rocev2.EthernetFields{Dst: rocev2.MAC{2, 0, 0, 0, 0, 1}, Src: floodMAC}
	h.IP = rocev2.NewIPFields(floodIP, pipeIPA)
	h.UDP = rocev2.UDPFields{SrcPort: 0xC123}
	f := make([]byte, h.FrameLen(len(payload)))
	if _, err := h.Encode(f, payload); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFloodOfReads: F, connected to a QP of V's, sends READ requests as
// fast as the link takes them: 16 READs of 64 KiB (all of V's responder
// resources), then the same 16 again and again, which V treats as
// duplicates and answers anew. V's memory for it is the QP's 16 responder
// resources, which point into the registered region (no copy, no buffer
// per request): the heap must not grow by more than 256 KiB however long
// the flood runs, and the flood QP stays connected. The per-QP send
// budget (64 frames a loop) keeps V's engine serving the stream.
func TestFloodOfReads(t *testing.T) {
	b := newFloodBed(t, cm.Params{}, Options{})
	fq := b.readFlood(t)
	h0 := heapInUse()
	before := b.v.a.Stats()[0]
	r, base, loaded := b.ratio(t, 3, 2000, func() { b.fp.on.Store(true) }, func() { b.fp.on.Store(false) })
	h1 := heapInUse()
	after := b.v.a.Stats()[0]
	t.Logf("READ flood: %d requests injected, V sent %d frames, %d duplicate READs answered; stream %v/msg unloaded, %v/msg flooded: ratio %.2f (goal >= 0.5); heap %d -> %d KiB",
		b.fp.injected.Load(), after.FramesOut-before.FramesOut, after.Duplicates-before.Duplicates, base, loaded, r, h0>>10, h1>>10)
	// The goal is 0.5 (reported above, noisy on a shared machine); this
	// floor, far below it, catches the starvation that a busy engine
	// without its yields caused: 0.0016. Beside a busy loop and another
	// package's tests on 2 CPUs a sound engine measured 0.048.
	if r < 0.02 && !raceDetector {
		t.Errorf("stream ratio %.3f under the READ flood", r)
	}
	if h1 > h0+256<<10 {
		t.Errorf("heap grew from %d to %d bytes during the READ flood", h0, h1)
	}
	if !fq.Connected() || after.Duplicates == before.Duplicates {
		t.Errorf("flood QP connected %v, %d duplicates answered: the flood did not run as meant", fq.Connected(), after.Duplicates-before.Duplicates)
	}
}

// readFlood connects a QP of V's to F and sets the flood's frames: 16
// READs of 64 KiB, all of the QP's responder resources, cycled.
func (b *floodBed) readFlood(t testing.TB) *QP {
	t.Helper()
	region := make([]byte, 64<<10)
	mr, err := b.v.pd.RegisterMR(region, MRFlagAllowRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	fq := b.v.createQP(t)
	const fPSN = 0x100
	if err := fq.ConnectOOB(Endpoint{IP: floodIP, MAC: floodMAC[:], QPN: 0x7777, PSN: fPSN}, ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	for k := range 16 {
		b.fp.frames = append(b.fp.frames, b.floodFrame(t, rocev2.Headers{
			BTH:  rocev2.BTHFields{Opcode: rocev2.RCReadRequest, PSN: rocev2.PSN(fPSN + 64*k), PKey: rocev2.DefaultPKey, DestQP: fq.QPN(), AckReq: true},
			RETH: rocev2.RETHFields{VA: mr.Addr(), RKey: mr.RemoteToken(), DMALen: 64 << 10},
		}, nil))
	}
	return fq
}

// reqFlood serves an accept-all listener on V at addr and sets the
// flood's frames: 4,096 distinct REQs for it, cycled. stop closes what
// the listener made.
func (b *floodBed) reqFlood(t testing.TB, addr netip.AddrPort) (stop func()) {
	t.Helper()
	_, _, stop = acceptAll(t, b.v, addr)
	for i := range 4096 {
		b.fp.frames = append(b.fp.frames, b.floodREQ(t, uint32(0x1000_0000+i), addr))
	}
	return stop
}

// floodREQ is a GSI frame from F carrying a REQ for dst with
// communication ID id (rdma_cm's header, Linux's layout).
func (b *floodBed) floodREQ(t testing.TB, id uint32, dst netip.AddrPort) []byte {
	t.Helper()
	src := netip.AddrPortFrom(floodIP, 40000)
	req := &rocev2.CMReq{
		LocalCommID: id, ServiceID: rocev2.ServiceID(rocev2.PortSpaceTCP, dst.Port()), LocalCAGUID: rocev2.EUI64(floodMAC),
		LocalQPN: 0x100000 + id&0xFFFFF, ResponderResources: 4, InitiatorDepth: 4, RemoteCMResponseTimeout: 31,
		TransportType: rocev2.CMTransportRC, LocalCMResponseTimeout: 31, RetryCount: 7, PKey: rocev2.DefaultPKey,
		PathMTU: rocev2.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: rocev2.CMPath{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: rocev2.GIDFromAddr(src.Addr()),
			RemoteGID: rocev2.GIDFromAddr(dst.Addr()), HopLimit: rocev2.DefaultTTL, LocalAckTimeout: 31},
	}
	hdr := rocev2.CMAHeader{SrcPort: src.Port(), Src: src.Addr(), Dst: dst.Addr()}
	if err := hdr.Encode(req.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	mad := rocev2.NewCMMAD(uint64(id), req)
	var raw [rocev2.MADLen]byte
	if err := mad.Encode(raw[:]); err != nil {
		t.Fatal(err)
	}
	var fr cm.GSIFramer
	f := make([]byte, cm.GSIFrameLen6)
	n, err := fr.Build(f, &cm.PathInfo{LocalIP: floodIP, RemoteIP: pipeIPA, LocalMAC: floodMAC, RemoteMAC: rocev2.MAC{2, 0, 0, 0, 0, 1}}, &raw)
	if err != nil {
		t.Fatal(err)
	}
	return f[:n]
}

// acceptAll serves a listener on V the way a server does: a QP for every
// request, accepted; a request that gets no QP (V full) is rejected. It
// returns how many connections are up and a stop function that closes
// everything it made.
func acceptAll(t testing.TB, v *scaleSide, addr netip.AddrPort) (up *atomic.Int64, refused *atomic.Int64, stop func()) {
	t.Helper()
	up, refused = new(atomic.Int64), new(atomic.Int64)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var wg sync.WaitGroup
	var made []func()
	l, err := v.a.CreateListener(func(c *Connector) {
		q, err := v.pd.CreateQP(QPConfig{ReceiveCQ: v.rcq, InitiatorCQ: v.icq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4,
			MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1})
		if err != nil {
			refused.Add(1)
			_ = c.Reject(nil)
			c.Close()
			return
		}
		mu.Lock()
		made = append(made, func() { c.Close(); _ = q.Close() })
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Accept(ctx, q, 4, 4, nil, nil) == nil {
				up.Add(1)
			} else {
				c.Close()
				_ = q.Close()
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(addr); err != nil {
		t.Fatal(err)
	}
	return up, refused, func() {
		cancel()
		l.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, f := range made {
			f()
		}
	}
}

// TestFloodOfConnectRequests: F sends CM REQs as fast as the link takes
// them, 4,096 distinct ones cycled, and never completes one (its REPs are
// dropped, it sends no RTU); V's listener accepts every request it is
// handed. V holds at most the listen backlog (128) half-open connections,
// each a Connector and a QP, every other REQ gets a stateless REJ, and
// F's REQs beyond its share (a burst of 409, then 10,000 a second:
// package inproc's reqRate) are dropped before they reach the CM. The
// bound is the backlog's connections, each with its QP (about 4.7 KiB)
// and its CM state: the heap stays within 3 MiB of where it started. (A
// REP gives up after 16 tries of 4.3 s, the REQ's longer timeouts
// capped; the time-wait that follows is at most 16 s, so no more than
// about 30 connections of a listener are in time-wait beside its 128
// half-open ones: TestSYNFloodHoldsAtMostTheBacklog in package cm.)
func TestFloodOfConnectRequests(t *testing.T) {
	b := newFloodBed(t, cm.Params{}, Options{})
	stop := b.reqFlood(t, netip.AddrPortFrom(pipeIPA, 7800))
	h0 := heapInUse()
	maxHalfOpen, maxConns := 0, 0
	watch := make(chan struct{})
	var watched sync.WaitGroup
	watched.Add(1)
	go func() {
		defer watched.Done()
		for {
			s := b.v.a.CMStats()
			maxHalfOpen, maxConns = max(maxHalfOpen, s.HalfOpen), max(maxConns, s.Connections)
			select {
			case <-watch:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	r, base, loaded := b.ratio(t, 3, 2000, func() { b.fp.on.Store(true) }, func() { b.fp.on.Store(false) })
	h1 := heapInUse()
	close(watch)
	watched.Wait()
	s := b.v.a.CMStats()
	t.Logf("REQ flood: %d REQs injected, %d reached the CM (%d dropped at its queue), %d REJs; at most %d half-open, %d connections; stream %v/msg unloaded, %v/msg flooded: ratio %.2f (goal >= 0.5); heap %d -> %d KiB",
		b.fp.injected.Load(), s.Received[rocev2.AttrREQ], s.QueueDrops, s.Sent[rocev2.AttrREJ], maxHalfOpen, maxConns, base, loaded, r, h0>>10, h1>>10)
	if r < 0.05 && !raceDetector { // the floor of TestFloodOfReads; before the fixes, 0.00
		t.Errorf("stream ratio %.3f under the REQ flood", r)
	}
	// The share refills while the flood is off: a burst each round.
	floodTime := loaded * time.Duration(3*2000)
	if most := uint64(3*409 + floodTime.Seconds()*10_000 + 64); s.Received[rocev2.AttrREQ] > most {
		t.Errorf("%d REQs reached the CM in %v of flood, want at most %d (F's share)", s.Received[rocev2.AttrREQ], floodTime, most)
	}
	if maxHalfOpen > 128 {
		t.Errorf("%d half-open connections, backlog 128", maxHalfOpen)
	}
	if h1 > h0+3<<20 {
		t.Errorf("heap grew from %d to %d bytes during the REQ flood", h0, h1)
	}
	if s.Received[rocev2.AttrREQ] == 0 || s.Sent[rocev2.AttrREJ] == 0 {
		t.Errorf("the flood did not run as meant: %d REQs received, %d REJs", s.Received[rocev2.AttrREQ], s.Sent[rocev2.AttrREJ])
	}
	stop()
}

// TestFloodOfConnections: P opens connections to V's accept-all listener
// as fast as it can, completing each, until V refuses: V was opened with
// MaxQPs 1,000, so it holds at most 1,000 QPs (the stream's among them),
// about 4.7 KiB each, and the CM state of as many connections; further
// requests are rejected. The stream keeps its rate meanwhile.
func TestFloodOfConnections(t *testing.T) {
	const maxQPs = 1000
	b := newFloodBed(t, cm.Params{}, Options{MaxQPs: maxQPs})
	addr := netip.AddrPortFrom(pipeIPA, 7801)
	up, refused, stop := acceptAll(t, b.v, addr)
	defer stop()
	h0 := heapInUse()
	var done atomic.Bool
	var opened int
	var stormErr error
	storm := func() {
		defer done.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			q := b.p.createQP(t)
			c, err := b.p.a.CreateConnector()
			if err != nil {
				stormErr = err
				return
			}
			if err := c.Connect(ctx, q, netip.AddrPort{}, addr, 4, 4, nil); err != nil {
				var rej *RejectError
				if !errors.As(err, &rej) {
					stormErr = err
				}
				c.Close()
				return
			}
			if err := c.CompleteConnect(nil); err != nil {
				stormErr = err
				return
			}
			opened++
		}
	}
	// Unloaded rounds, then the stream measured while the storm runs.
	var base, loaded time.Duration
	var baseN, loadedN int
	base += b.stream.run(t, 1000)
	baseN += 1000
	go storm()
	for !done.Load() {
		loaded += b.stream.run(t, 100)
		loadedN += 100
	}
	base += b.stream.run(t, 1000)
	baseN += 1000
	if stormErr != nil {
		t.Fatal(stormErr)
	}
	h1 := heapInUse()
	s := b.v.a.CMStats()
	r := (float64(base) / float64(baseN)) / (float64(loaded) / float64(max(loadedN, 1)))
	t.Logf("connection storm: %d opened (%d up on V, %d refused) in %d stream messages; V holds %d CM connections; stream %v/msg unloaded, %v/msg during the storm: ratio %.2f (goal >= 0.5); heap %d -> %d KiB (%d B per connection)",
		opened, up.Load(), refused.Load(), loadedN, s.Connections, base/time.Duration(baseN), loaded/time.Duration(max(loadedN, 1)), r,
		h0>>10, h1>>10, (int64(h1)-int64(h0))/max(up.Load(), 1))
	// The stream and the floodBed's own QP pair hold 2 of V's QPs.
	if opened > maxQPs-1 || up.Load() > maxQPs-1 || refused.Load() == 0 {
		t.Errorf("%d connections opened, %d up, %d refused; V allows %d QPs", opened, up.Load(), refused.Load(), maxQPs)
	}
	if s.Connections > maxQPs {
		t.Errorf("V's CM holds %d connections", s.Connections)
	}
}
