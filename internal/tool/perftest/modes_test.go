package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// allSizes are -a's sizes, 2 to 2^23.
var allSizes = func() []uint64 {
	var s []uint64
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}()

// dests counts the 56-byte control messages (handshakes) the client sent.
func dests(sent []int) int { return countLen(sent, DestLen) }

// countLen counts the control messages of size bytes in sent.
func countLen(sent []int, size int) int {
	n := 0
	for _, s := range sent {
		if s == size {
			n++
		}
	}
	return n
}

// rowSizes are the #bytes of the report rows in out.
func rowSizes(out string) []uint64 {
	var s []uint64
	for _, m := range regexp.MustCompile(`(?m)^ (\d+) +\d+ `).FindAllStringSubmatch(out, -1) {
		var v uint64
		fmt.Sscan(m[1], &v)
		s = append(s, v)
	}
	return s
}

// TestAllSizes: with -a each test measures every size from 2 to 2^23 in
// order, one row each, with perftest's handshakes between sizes (send bw:
// one before each size after the first and one after each; send lat: one
// before each size after the first; the others none), and the server of a
// one-sided bw test prints the one row the client sends, the last size's.
func TestAllSizes(t *testing.T) {
	tests := []struct {
		name       string
		p          Params
		extraSyncs int // handshakes beyond the same test's without -a
		serverRows int
	}{
		{"send_bw", Params{Verb: Send, Kind: BW, Iterations: 5, TxDepth: 4, CQMod: 2}, 22 + 23, 23},
		{"write_bw", Params{Verb: Write, Kind: BW, Iterations: 5}, 0, 1},
		{"read_bw", Params{Verb: Read, Kind: BW, Iterations: 5}, 0, 1},
		{"send_lat", Params{Verb: Send, Kind: Lat, Iterations: 5}, 22, 23},
		{"write_lat", Params{Verb: Write, Kind: Lat, Iterations: 5}, 0, 23},
		{"read_lat", Params{Verb: Read, Kind: Lat, Iterations: 5}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			one := runPair(t, tt.p, tt.p, 0)
			if one.cerr != nil || one.serr != nil {
				t.Fatalf("without -a: client %v server %v", one.cerr, one.serr)
			}
			p := tt.p
			p.AllSizes = true
			pr := runPair(t, p, p, 0)
			if pr.cerr != nil || pr.serr != nil {
				t.Fatalf("client: %v\nserver: %v", pr.cerr, pr.serr)
			}
			if got, want := dests(pr.rec.sent)-dests(one.rec.sent), tt.extraSyncs; got != want {
				t.Errorf("-a added %d handshakes, want %d", got, want)
			}
			if got := rowSizes(pr.cout.String()); fmt.Sprint(got) != fmt.Sprint(allSizes) {
				t.Errorf("client's rows: sizes %v\n%s", got, pr.cout.String())
			}
			srows := rowSizes(pr.sout.String())
			switch {
			case len(srows) != tt.serverRows:
				t.Errorf("server printed %d rows, want %d:\n%s", len(srows), tt.serverRows, pr.sout.String())
			case tt.serverRows == 1 && srows[0] != MaxSize:
				t.Errorf("server's row is of %d bytes, want the last size's", srows[0])
			}
			cdata, sdata := pr.rec.eps[1], pr.srv.eps[1]
			if p.Kind == BW {
				if len(pr.client.AllBW) != 23 {
					t.Fatalf("client has %d rows", len(pr.client.AllBW))
				}
				for i, r := range pr.client.AllBW {
					if r.Size != allSizes[i] || r.Iters != 5 || !(r.BWAvg > 0) {
						t.Errorf("row %d: %+v", i, r)
					}
				}
				switch p.Verb {
				case Send:
					if cdata.Posted.Send != 23*5 || sdata.Posted.Receive != 23*5 {
						t.Errorf("client sent %d, server posted %d receives, want %d each", cdata.Posted.Send, sdata.Posted.Receive, 23*5)
					}
				case Write:
					if cdata.Posted.Write != 23*(5+5) {
						t.Errorf("client wrote %d times, want 23 x (5 + 5 warm-up)", cdata.Posted.Write)
					}
				}
				return
			}
			if len(pr.client.AllLat) != 23 || pr.client.Lat.Size != MaxSize {
				t.Fatalf("client has %d rows, the last %+v", len(pr.client.AllLat), pr.client.Lat)
			}
			for i, s := range pr.client.AllLat {
				if uint64(s.Size) != allSizes[i] || s.Iters != 5 {
					t.Errorf("row %d: %+v", i, s)
				}
			}
			if p.Verb == Read && cdata.Posted.Read != 23*5 {
				t.Errorf("client read %d times, want %d", cdata.Posted.Read, 23*5)
			}
		})
	}
}

// TestDuration: with -D each test runs for the duration on each side,
// counts only its sample window, and prints perftest's duration rows: a
// bandwidth row without peak (the server of a one-sided test prints the
// client's), a latency row of t_avg and tps.
func TestDuration(t *testing.T) {
	const d = 300 * time.Millisecond
	tests := []Params{
		{Verb: Send, Kind: BW, Size: 1024},
		{Verb: Write, Kind: BW, Size: 1024, Iterations: 50}, // -n is ignored, as perftest does
		{Verb: Read, Kind: BW, Size: 512},
		{Verb: Atomic, Kind: BW},
		{Verb: Send, Kind: Lat, Size: 64},
		{Verb: Write, Kind: Lat, Size: 64},
		{Verb: Read, Kind: Lat, Size: 64},
		{Verb: Atomic, Kind: Lat},
	}
	for _, p := range tests {
		t.Run(fmt.Sprintf("%v_%s", p.Verb, kindName(p.Kind)), func(t *testing.T) {
			p.Duration = d
			start := time.Now()
			pr := runPair(t, p, p, 0)
			if pr.cerr != nil || pr.serr != nil {
				t.Fatalf("client: %v\nserver: %v", pr.cerr, pr.serr)
			}
			if el := time.Since(start); el < d {
				t.Errorf("the run took %v, less than -D %v", el, d)
			}
			if p.Kind == BW {
				r := pr.client.BW
				if r == nil || r.Iters == 0 || r.BWPeak != 0 || !(r.BWAvg > 0) || math.IsInf(r.BWAvg, 0) {
					t.Fatalf("client's row %+v", r)
				}
				if p.Verb != Send && *pr.server.BW != *r {
					t.Errorf("server printed %+v, client measured %+v", pr.server.BW, r)
				}
				if p.Verb == Send && (pr.server.BW == nil || pr.server.BW.Iters == 0 || pr.server.BW.Iters > uint64(pr.rec.eps[1].Posted.Send)) {
					t.Errorf("server's row %+v after %d sends", pr.server.BW, pr.rec.eps[1].Posted.Send)
				}
				if !strings.Contains(pr.cout.String(), " 0.00 ") {
					t.Errorf("no zero peak in\n%s", pr.cout.String())
				}
				return
			}
			r := pr.client.LatDur
			if r == nil || r.Iters == 0 || !(r.Avg > 0) || !(r.TPS > 0) || pr.client.Lat != nil {
				t.Fatalf("client's row %+v (iterations row %+v)", r, pr.client.Lat)
			}
			// The window is the whole run (margin 0 below 4 s): the count
			// and the rate agree with it. write_lat's peer leaves without
			// a closing handshake when its own timer ends, which may cut
			// the window short by the timers' offset.
			got := float64(r.Iters) / r.TPS
			if math.Abs(got-d.Seconds()) > 1e-6 && (p.Verb != Write || got > d.Seconds() || got < d.Seconds()/2) {
				t.Errorf("%d iterations at %v tps make %v s, want the window %v", r.Iters, r.TPS, got, d)
			}
			for _, out := range []string{pr.cout.String(), pr.sout.String()} {
				if (p.Verb == Read || p.Verb == Atomic) && out == pr.sout.String() {
					if pr.server.LatDur != nil || strings.Contains(out, "t_avg") {
						t.Errorf("%v lat's server printed a row:\n%s", p.Verb, out)
					}
					continue
				}
				if !strings.Contains(out, resultFmtLatDur) || len(rowSizes(out)) != 1 {
					t.Errorf("duration table missing:\n%s", out)
				}
			}
		})
	}
}

func TestDurationReportArithmetic(t *testing.T) {
	ph := phases{from: uint64(time.Second), to: uint64(3 * time.Second)}
	p := &Params{Verb: Write, Size: 1024}
	r := durationBW(p, 2000, &ph)
	if r.Iters != 2000 || r.BWPeak != 0 || r.BWAvg != 1024*1000/float64(mbFactor) || r.MsgRate != 0.001 {
		t.Errorf("bw %+v", r)
	}
	p.ReportGbits = true
	if r := durationBW(p, 2000, &ph); r.BWAvg != 1024*8*1000/1e9 {
		t.Errorf("Gb/s %v", r.BWAvg)
	}
	// 2000 round trips in 2 s: 1 ms each, 500 us one way; READs are not
	// halved.
	if l := durationLat(&Params{Verb: Send, Size: 2}, 2000, &ph); l.Avg != 500 || l.TPS != 1000 {
		t.Errorf("send lat %+v", l)
	}
	if l := durationLat(&Params{Verb: Read, Size: 2}, 2000, &ph); l.Avg != 1000 {
		t.Errorf("read lat %+v", l)
	}
	if l := durationLat(&Params{Verb: Write, Size: 2}, 0, &ph); l.Avg != 0 || l.TPS != 0 {
		t.Errorf("no iterations: %+v", l)
	}
	var b strings.Builder
	PrintLatDuration(&b, LatDuration{Size: 2, Iters: 2000, Avg: 500, TPS: 1000})
	if want := " 2             2000            500.00         1000.00\n"; b.String() != want {
		t.Errorf("row %q\nwant %q", b.String(), want)
	}
}

// TestPhases: the margin is a quarter of -D in whole seconds; the window
// lies between the margins; the deadline and, once the window has opened,
// the peer's leaving end the run, which is cut where the peer left.
func TestPhases(t *testing.T) {
	for _, tt := range []struct{ d, margin time.Duration }{{300 * time.Millisecond, 0}, {3 * time.Second, 0}, {5 * time.Second, time.Second}, {10 * time.Second, 2 * time.Second}} {
		p := Params{Duration: tt.d}
		ph := startPhases(&p)
		if p.margin() != tt.margin || ph.window() != uint64(tt.d-2*tt.margin) {
			t.Errorf("-D %v: margin %v window %v", tt.d, p.margin(), time.Duration(ph.window()))
		}
	}
	ctx := context.Background()
	mk := func(from, end time.Duration) phases {
		return phases{clk: clock{time.Now()}, from: uint64(from), to: uint64(end - from), end: uint64(end)}
	}
	ph := mk(time.Hour, 3*time.Hour)
	if err := ph.stop(ctx, verbs.ErrDisconnected); err == nil || !errors.Is(err, verbs.ErrDisconnected) {
		t.Errorf("disconnect before the window: %v", err)
	}
	ph = mk(0, time.Hour)
	if err := ph.stop(ctx, fmt.Errorf("send failed: %w", verbs.ErrFlushed)); err != nil || ph.to >= uint64(time.Hour) {
		t.Errorf("disconnect in the window: %v, window cut at %v", err, time.Duration(ph.to))
	}
	ph = mk(0, time.Hour)
	if err := ph.stop(ctx, verbs.ErrAccess); !errors.Is(err, verbs.ErrAccess) {
		t.Errorf("a failure in the window: %v", err)
	}
	ph = mk(0, 0)
	if err := ph.stop(ctx, context.DeadlineExceeded); err != nil {
		t.Errorf("the deadline: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := ph.stop(cctx, context.Canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("the caller's context ended: %v", err)
	}
}

func TestDurationLoopAllocatesNothing(t *testing.T) {
	a, b := verbstest.Pair(verbstest.Options{})
	p := Params{Verb: Write, Kind: BW, Size: 512, TxDepth: 32, CQMod: 8, Duration: 5 * time.Millisecond}
	if err := p.normalize(); err != nil {
		t.Fatal(err)
	}
	var dc, ds data
	if err := prepareData(&dc, &p, DefaultCycleBuf)(a); err != nil {
		t.Fatal(err)
	}
	if err := prepareData(&ds, &p, DefaultCycleBuf)(b); err != nil {
		t.Fatal(err)
	}
	peer := ds.dest(&p)
	ctx := context.Background()
	var n uint64
	allocs := testing.AllocsPerRun(10, func() {
		ph := startPhases(&p)
		var err error
		if n, err = bwLoopFor(ctx, ctx, &p, &dc, nil, &peer, &ph); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || n == 0 {
		t.Fatalf("bwLoopFor allocates %v times per run (%d completions counted)", allocs, n)
	}
}

// TestDurationBoundsASilentPeer: a -D server whose client connected and
// then went silent (no DREQ: its host or daemon died) ends at -D plus the
// slack, saying so, rather than waiting for the report at the handshake.
func TestDurationBoundsASilentPeer(t *testing.T) {
	old := durationSlack
	durationSlack = 200 * time.Millisecond
	defer func() { durationSlack = old }()
	n := &verbstest.Network{}
	l, err := n.Listen(DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := Params{Verb: Write, Kind: BW, Size: 1024, Duration: 300 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := RunServer(context.Background(), p, l, io.Discard)
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ep, err := n.Connect(ctx, DefaultPort, verbs.ConnParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "did not end within its duration") {
			t.Fatalf("server: %v, want the -D bound named", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a -D 0.3s server still waits for its silent client after 5 s")
	}
}
