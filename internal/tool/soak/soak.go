package soak

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/demo"
	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/ndk"
)

type soakFlags struct {
	duration, report, reconnect time.Duration
	loss                        float64
	mtu, maxSize                int
	polling                     string
	seed                        uint64
}

const soakSynopsis = `usage: ndkxdp soak [-duration D] [-report D] [-loss F] [flags]

Two ndkxdp hosts on an embedded veth pair, each dropping -loss of the
frames it receives, run SEND, WRITE and READ of random sizes for
-duration, every byte checked, over connections made anew through the IB
CM every -reconnect; every -report it prints the process's RSS, heap and
goroutines, so that a long run shows whether they stay flat.`

// Run is `ndkxdp soak`: args are its flags.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cmdline.NewFlagSet("soak", soakSynopsis, stderr)
	var f soakFlags
	fs.DurationVar(&f.duration, "duration", time.Minute, "how long to run")
	fs.DurationVar(&f.report, "report", 10*time.Second, "interval between RSS and goroutine reports")
	fs.DurationVar(&f.reconnect, "reconnect", 5*time.Second, "how long each connection lives before it is ended and made anew")
	fs.Float64Var(&f.loss, "loss", 0.01, "fraction of received frames each host drops (0 to 0.5)")
	fs.IntVar(&f.mtu, "mtu", 1500, "MTU of the embedded veth pair")
	fs.IntVar(&f.maxSize, "max-size", 64<<10, "largest message, WRITE and READ in bytes")
	fs.StringVar(&f.polling, "polling", "auto", "engine polling: auto (progress where GOMAXPROCS exceeds the engines plus one, else adaptive: ndk.PollAuto), adaptive, busy or progress (the consumer runs the engine's turns: ndk.PollProgress)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the message sizes and contents")
	if err := cmdline.ParseFlags(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case f.duration <= 0 || f.report <= 0 || f.reconnect <= 0:
		return cmdline.Usagef("-duration, -report and -reconnect must be positive")
	case !(f.loss >= 0 && f.loss <= 0.5):
		return cmdline.Usagef("-loss must be in [0, 0.5]")
	case f.maxSize < 1 || f.maxSize > 16<<20:
		return cmdline.Usagef("-max-size must be in [1, 16777216]")
	}
	opts, err := cmdline.AdapterOptions("auto", f.polling)
	if err != nil {
		return err
	}
	opts.InjectLoss = f.loss
	if err := cmdline.RequireCaps(cmdline.PairCaps); err != nil {
		return err
	}
	p, err := vethpair.NewPair(vethpair.Config{MTU: f.mtu})
	if err != nil {
		return err
	}
	defer p.Close()
	var hosts [2]*demo.Host
	for i, h := range []*vethpair.Host{p.A, p.B} {
		ad, err := demo.OpenAdapterOn(h, opts)
		if err != nil {
			return err
		}
		defer ad.Close()
		if hosts[i], err = demo.NewHost(h.Name, ad); err != nil {
			return err
		}
	}
	a, b := hosts[0], hosts[1]
	fmt.Fprintf(stdout, "soak: %v on %s <-> %s (veth, MTU %d), %.2f%% of received frames dropped on each side, messages up to %d bytes\n",
		f.duration, p.A.IPv4, p.B.IPv4, f.mtu, 100*f.loss, f.maxSize)
	s, err := newSoak(a, b, f)
	if err != nil {
		return err
	}
	defer s.release()
	srv, err := demo.ListenCM(ctx, b, netip.AddrPortFrom(p.B.IPv4, demo.Port))
	if err != nil {
		return err
	}
	defer srv.Close()

	start := time.Now()
	end := start.Add(f.duration)
	nextReport := start.Add(f.report)
	s.sample(stdout, start)
	var runErr error
	for time.Now().Before(end) && ctx.Err() == nil && runErr == nil {
		t0 := time.Now()
		cn, err := demo.ConnectCM(ctx, a, b, srv)
		slowCM(stdout, start, t0, s.conns+1, "connect")
		if err != nil {
			if ctx.Err() == nil {
				runErr = fmt.Errorf("connection %d: %w", s.conns+1, err)
			}
			break
		}
		s.conns++
		until := time.Now().Add(f.reconnect)
		qa, qb := cn.QPs()
		for time.Now().Before(until) && time.Now().Before(end) && ctx.Err() == nil {
			if err := s.round(ctx, qa, qb); err != nil {
				if ctx.Err() == nil { // an interrupt ends the run, not as a failure
					runErr = fmt.Errorf("connection %d, round %d: %w", s.conns, s.rounds, err)
				}
				break
			}
			if now := time.Now(); now.After(nextReport) {
				s.sample(stdout, start)
				nextReport = now.Add(f.report)
			}
		}
		t0 = time.Now()
		if err := cn.Disconnect(ctx); err != nil && runErr == nil && ctx.Err() == nil {
			runErr = fmt.Errorf("connection %d: %w", s.conns, err)
		}
		slowCM(stdout, start, t0, s.conns, "disconnect")
	}
	s.sample(stdout, start)
	s.summary(ctx, stdout, a, b, runErr)
	return runErr
}

// slowCMStep is how long a connect or disconnect takes before the soak
// says so: without loss one takes milliseconds, and under loss a CM
// message that is lost waits out the CM response timeout (IB timeout
// code 20, 4.3 s, as rdma_cm's) before it is resent, while no round runs
// and no report is due.
const slowCMStep = time.Second

// slowCM prints a line when the connect or disconnect of connection n,
// begun at t0, took slowCMStep or more.
func slowCM(w io.Writer, start, t0 time.Time, n int, what string) {
	if d := time.Since(t0); d >= slowCMStep {
		fmt.Fprintf(w, "  t=%-8v connection %d: %s took %.1fs (under loss a CM message waits out its 4.3s response timeout before it is resent)\n",
			t0.Sub(start).Round(time.Second), n, what, d.Seconds())
	}
}

// summary prints what the run moved and how memory and goroutines went.
func (s *soak) summary(ctx context.Context, stdout io.Writer, a, b *demo.Host, runErr error) {
	var st [2]ndk.EngineStats
	for i, x := range []*demo.Host{a, b} {
		for _, e := range x.Adapter.Stats() {
			st[i].Add(e)
		}
	}
	fmt.Fprintf(stdout, "soak: %d rounds (SEND, WRITE, READ) over %d connections, %d bytes moved, every byte verified: %v\n",
		s.rounds, s.conns, s.bytes, runErr == nil)
	fmt.Fprintf(stdout, "soak: RSS %.1f -> %.1f MiB (max %.1f), heap %.1f -> %.1f MiB, goroutines %d -> %d\n",
		mib(s.first.rss), mib(s.last.rss), mib(s.maxRSS), mib(s.first.heap), mib(s.last.heap), s.first.goroutines, s.last.goroutines)
	fmt.Fprintf(stdout, "soak: retransmission rounds %d/%d, ACK timeouts %d/%d (A/B)\n",
		st[0].Retransmits, st[1].Retransmits, st[0].Timeouts, st[1].Timeouts)
	if runErr == nil && ctx.Err() != nil {
		fmt.Fprintln(stdout, "soak: interrupted")
	}
}

// soak holds the registered memory both hosts reuse across connections
// and what the run measured.
type soak struct {
	a, b      *demo.Host
	max       int
	rng       *rand.Rand
	src, back []byte // A: what it sends and writes, what it reads back
	recv, mem []byte // B: where SENDs land, what A writes and reads
	srcMR     *ndk.MR
	backMR    *ndk.MR
	recvMR    *ndk.MR
	memMR     *ndk.MR

	rounds, conns int
	bytes         uint64
	first, last   soakSample
	maxRSS        uint64
}

type soakSample struct {
	rss, heap  uint64
	goroutines int
}

func newSoak(a, b *demo.Host, f soakFlags) (*soak, error) {
	n := f.maxSize
	s := &soak{a: a, b: b, max: n, rng: rand.New(rand.NewPCG(f.seed, f.seed+1)),
		src: make([]byte, n), back: make([]byte, n), recv: make([]byte, n), mem: make([]byte, n)}
	var err error
	for _, r := range []struct {
		mr    **ndk.MR
		pd    *ndk.PD
		buf   []byte
		flags ndk.MRFlag
	}{
		{&s.srcMR, a.PD, s.src, ndk.MRFlagAllowLocalRead},
		{&s.backMR, a.PD, s.back, ndk.MRFlagAllowLocalWrite},
		{&s.recvMR, b.PD, s.recv, ndk.MRFlagAllowLocalWrite},
		{&s.memMR, b.PD, s.mem, ndk.MRFlagAllowRemoteWrite | ndk.MRFlagAllowRemoteRead},
	} {
		if *r.mr, err = r.pd.RegisterMR(r.buf, r.flags); err != nil {
			s.release()
			return nil, fmt.Errorf("register %d bytes: %w", len(r.buf), err)
		}
	}
	return s, nil
}

func (s *soak) release() {
	for _, m := range []*ndk.MR{s.srcMR, s.backMR, s.recvMR, s.memMR} {
		if m != nil {
			_ = m.Deregister()
		}
	}
}

// round runs one SEND, one WRITE and one READ of the bytes written, each
// of a random size, and checks every byte.
func (s *soak) round(ctx context.Context, qa, qb *ndk.QP) error {
	s.rounds++
	size := func() int { return 1 + s.rng.IntN(s.max) }
	fill := func(b []byte) {
		for i := 0; i < len(b); i += 8 {
			v := s.rng.Uint64()
			for k := 0; k < 8 && i+k < len(b); k++ {
				b[i+k] = byte(v >> (8 * k))
			}
		}
	}
	// SEND: A -> B's posted receive.
	n := size()
	fill(s.src[:n])
	rs, _ := s.recvMR.SGE(0, s.max)
	ss, _ := s.srcMR.SGE(0, n)
	if err := qb.Receive(nil, []ndk.SGE{rs}); err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if err := qa.Send(nil, []ndk.SGE{ss}, 0); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if err := soakWait(ctx, s.a.ICQ, "SEND", 0); err != nil {
		return err
	}
	if err := soakWait(ctx, s.b.RCQ, "receive", n); err != nil {
		return err
	}
	if !bytes.Equal(s.recv[:n], s.src[:n]) {
		return fmt.Errorf("SEND of %d bytes arrived altered", n)
	}
	s.bytes += uint64(n)
	// WRITE into B's memory at a random offset, then READ it back.
	n = size()
	off := s.rng.IntN(s.max - n + 1)
	fill(s.src[:n])
	ss, _ = s.srcMR.SGE(0, n)
	if err := qa.Write(nil, []ndk.SGE{ss}, s.memMR.Addr()+uint64(off), s.memMR.RemoteToken(), 0); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err := soakWait(ctx, s.a.ICQ, "WRITE", 0); err != nil {
		return err
	}
	clear(s.back[:n])
	bs, _ := s.backMR.SGE(0, n)
	if err := qa.Read(nil, []ndk.SGE{bs}, s.memMR.Addr()+uint64(off), s.memMR.RemoteToken(), 0); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if err := soakWait(ctx, s.a.ICQ, "READ", 0); err != nil {
		return err
	}
	if !bytes.Equal(s.back[:n], s.src[:n]) {
		return fmt.Errorf("WRITE then READ of %d bytes at offset %d: the bytes read back differ", n, off)
	}
	s.bytes += uint64(2 * n)
	return nil
}

// soakWait waits for one successful completion on w (of want bytes, for
// a receive; want 0 checks nothing), as the demo's phases wait, for at
// most a minute: under loss a request may wait out several ACK timeouts.
func soakWait(ctx context.Context, w *demo.CQWait, what string, want int) error {
	var r ndk.Result
	if err := demo.WaitOne(ctx, w, &r, time.Now().Add(time.Minute)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if want > 0 && int(r.BytesTransferred) != want {
		return fmt.Errorf("%s of %d bytes reported %d", what, want, r.BytesTransferred)
	}
	return nil
}

// sample prints one report line: time, work, RSS, heap, goroutines.
func (s *soak) sample(w io.Writer, start time.Time) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	x := soakSample{rss: rss(), heap: ms.HeapInuse, goroutines: runtime.NumGoroutine()}
	if s.first == (soakSample{}) {
		s.first = x
	}
	s.last = x
	s.maxRSS = max(s.maxRSS, x.rss)
	fmt.Fprintf(w, "  t=%-8v rounds %-8d connections %-5d MiB moved %-9.1f RSS %.1f MiB  heap %.1f MiB  goroutines %d\n",
		time.Since(start).Round(time.Second), s.rounds, s.conns, mib(s.bytes), mib(x.rss), mib(x.heap), x.goroutines)
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// rss reads the process's resident set size from /proc/self/status.
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
