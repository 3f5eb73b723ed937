package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs/verbstest"
)

// reportMsgs counts the 8-byte control messages (xchg_bw_reports fields)
// the client sent.
func reportMsgs(sent []int) int { return countLen(sent, ReportLen) }

// TestBidir: with -b both sides run the test against each other at once:
// each posts the whole run (and the warm-up of a one-sided verb), each
// side's target is hit by the other's requests, both exchange their rows
// and each prints the sum, with perftest's handshakes (bidir.go): for
// write, read and atomic bw one before each size's run and, under -a, one
// after it; for send bw those of one-way send bw.
func TestBidir(t *testing.T) {
	tests := []struct {
		name string
		p    Params
	}{
		{"send_bw", Params{Verb: Send, Kind: BW, Size: 1024, Iterations: 300, TxDepth: 16, CQMod: 4, RxDepth: 32}},
		{"write_bw", Params{Verb: Write, Kind: BW, Size: 3000, Iterations: 500}},
		{"read_bw", Params{Verb: Read, Kind: BW, Size: 1024, Iterations: 200, OutReads: 4}},
		{"atomic_bw", Params{Verb: Atomic, Kind: BW, Iterations: 200, ReportGbits: true}},
		{"send_bw -a", Params{Verb: Send, Kind: BW, Iterations: 5, TxDepth: 4, CQMod: 2, AllSizes: true}},
		{"write_bw -a", Params{Verb: Write, Kind: BW, Iterations: 5, AllSizes: true}},
		{"send_bw -q 3", Params{Verb: Send, Kind: BW, Size: 256, Iterations: 100, TxDepth: 8, CQMod: 3, RxDepth: 16, QPs: 3}},
		{"write_bw -q 2", Params{Verb: Write, Kind: BW, Size: 1000, Iterations: 60, QPs: 2}},
		{"read_bw -q 2", Params{Verb: Read, Kind: BW, Size: 100, Iterations: 60, OutReads: 2, QPs: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			p.Bidir = true
			pr := runPair(t, p, p, 0)
			if pr.cerr != nil || pr.serr != nil {
				t.Fatalf("client: %v\nserver: %v", pr.cerr, pr.serr)
			}
			p = pr.client.Params
			sizes := len(p.sizes())
			c, s := pr.client, pr.server
			if c.Own == nil || s.Own == nil || c.BW == nil || s.BW == nil {
				t.Fatalf("rows: client own %v sum %v, server own %v sum %v", c.Own, c.BW, s.Own, s.BW)
			}
			// A row counts -n messages on each QP.
			row := *p.at(int(c.Own.Size))
			row.Iterations *= p.QPs
			checkBW(t, row, c.Own)
			checkBW(t, row, s.Own)
			// Each side printed its own row plus the peer's.
			for _, side := range []struct {
				name      string
				sum, a, b *Report
			}{{"client", c.BW, c.Own, s.Own}, {"server", s.BW, s.Own, c.Own}} {
				if side.sum.Size != side.a.Size || side.sum.Iters != side.a.Iters ||
					side.sum.BWAvg != side.a.BWAvg+side.b.BWAvg || side.sum.MsgRate != side.a.MsgRate+side.b.MsgRate ||
					side.sum.BWPeak != side.a.BWPeak+side.b.BWPeak {
					t.Errorf("%s printed %+v, the sum of %+v and %+v", side.name, *side.sum, *side.a, *side.b)
				}
			}
			if math.Abs(c.BW.BWAvg-s.BW.BWAvg) > 1e-9*c.BW.BWAvg {
				t.Errorf("the sides' sums differ: %v and %v", c.BW.BWAvg, s.BW.BWAvg)
			}
			for _, out := range []string{pr.cout.String(), pr.sout.String()} {
				if got := rowSizes(out); len(got) != sizes {
					t.Errorf("%d rows, want %d:\n%s", len(got), sizes, out)
				}
			}
			if p.AllSizes && (len(c.AllBW) != sizes || len(s.AllBW) != sizes) {
				t.Errorf("rows kept: client %d server %d, want %d", len(c.AllBW), len(s.AllBW), sizes)
			}
			// Both sides did the whole run.
			warm := 0
			if p.Verb != Send {
				warm = min(window(&p), p.Iterations)
			}
			for side, eps := range map[string][]*verbstest.Endpoint{"client": pr.rec.eps[1:], "server": pr.srv.eps[1:]} {
				if len(eps) != p.QPs {
					t.Fatalf("%s has %d data QPs, want %d", side, len(eps), p.QPs)
				}
				for i, ep := range eps {
					n := map[Verb]int{Send: ep.Posted.Send, Write: ep.Posted.Write, Read: ep.Posted.Read, Atomic: ep.Posted.Atomic}[p.Verb]
					if want := sizes * (p.Iterations + warm); n != want {
						t.Errorf("%s's qp %d posted %d %v requests, want %d", side, i, n, p.Verb, want)
					}
					// send bw: every SEND of the peer consumed one receive.
					if p.Verb == Send && ep.Posted.Receive != sizes*p.Iterations {
						t.Errorf("%s's qp %d posted %d receives, want %d", side, i, ep.Posted.Receive, sizes*p.Iterations)
					}
				}
			}
			if p.Verb == Atomic {
				want := uint64(p.Iterations + warm)
				if v := binary.LittleEndian.Uint64(targetWord(pr)); v != want {
					t.Errorf("server's target word %d, want %d fetch-adds", v, want)
				}
				cbuf := pr.rec.eps[1].Regions()[0]
				if v := binary.LittleEndian.Uint64(cbuf.Buf[pr.client.Local.VAddr-cbuf.Addr:]); v != want {
					t.Errorf("client's target word %d, want %d fetch-adds", v, want)
				}
			}
			// Handshakes: create_rdma_cm_connection's two, the pre-run
			// ones (a gather and a print per QP, one after RTR, for send
			// bw one more), those of the run, the closing one.
			want := 2 + 2*p.QPs + 1 + 1
			if p.Verb == Send {
				want++
			}
			switch {
			case p.Verb == Send && p.AllSizes:
				want += (sizes - 1) + sizes
			case p.Verb != Send && p.AllSizes:
				want += 2 * sizes
			case p.Verb != Send:
				want++
			}
			if got := dests(pr.rec.sent); got != want {
				t.Errorf("client sent %d handshakes, want %d", got, want)
			}
			if got := reportMsgs(pr.rec.sent); got != 5*sizes {
				t.Errorf("client sent %d report fields, want 5 a size (%d)", got, 5*sizes)
			}
			if !strings.Contains(pr.cout.String(), "BW average[") || !strings.Contains(pr.sout.String(), "BW average[") {
				t.Errorf("tables missing:\n%s\n%s", pr.cout.String(), pr.sout.String())
			}
		})
	}
}

// TestBidirRefused: -b is for bandwidth tests (perftest's parser refuses
// it for latency tests), and what bidir.go does not run is said.
func TestBidirRefused(t *testing.T) {
	for _, tt := range []struct {
		p    Params
		want error
	}{
		{Params{Verb: Send, Kind: Lat, Bidir: true}, verbs.ErrInvalid},
		{Params{Verb: Write, Kind: BW, Bidir: true, QPs: 2, Duration: 5e9}, ErrUnsupported},
		{Params{Verb: Send, Kind: BW, Bidir: true, UD: true}, ErrUnsupported},
		{Params{Verb: Write, Kind: BW, Bidir: true, WriteImm: true}, ErrUnsupported},
	} {
		if err := tt.p.Check(); !errors.Is(err, tt.want) {
			t.Errorf("%+v: %v, want %v", tt.p, err, tt.want)
		}
	}
	for _, p := range []Params{{Verb: Read, Kind: BW, Bidir: true}, {Verb: Send, Kind: BW, Bidir: true, Duration: 5e9}} {
		if err := p.Check(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	// With --use-srq both sides receive, so both have an SRQ (perftest's
	// srq_exists: duplex).
	if !wantsSRQ(&Params{Verb: Send, Kind: BW, UseSRQ: true, Bidir: true}, true) {
		t.Error("send_bw -b --use-srq: the client has no SRQ")
	}
}

// TestBidirDuration: -b with -D. Each side times its own run and counts
// its own completions in its window: write, read and atomic bw exchange
// their rows and print the sum with their own count; send bw, as
// send_bw.c, exchanges nothing and each side prints its own row, which
// counts the SENDs it completed.
func TestBidirDuration(t *testing.T) {
	const d = 300 * time.Millisecond
	for _, p := range []Params{
		{Verb: Send, Kind: BW, Size: 1024, TxDepth: 16, CQMod: 4, RxDepth: 32},
		{Verb: Write, Kind: BW, Size: 1024},
		{Verb: Read, Kind: BW, Size: 512},
		{Verb: Atomic, Kind: BW},
	} {
		t.Run(fmt.Sprint(p.Verb), func(t *testing.T) {
			p.Duration, p.Bidir = d, true
			start := time.Now()
			pr := runPair(t, p, p, 0)
			if pr.cerr != nil || pr.serr != nil {
				t.Fatalf("client: %v\nserver: %v", pr.cerr, pr.serr)
			}
			if el := time.Since(start); el < d {
				t.Errorf("the run took %v, less than -D %v", el, d)
			}
			c, s := pr.client, pr.server
			for _, side := range []struct {
				name     string
				own, sum *Report
				posted   int
			}{
				{"client", c.Own, c.BW, pr.rec.eps[1].Posted.Send + pr.rec.eps[1].Posted.Write + pr.rec.eps[1].Posted.Read + pr.rec.eps[1].Posted.Atomic},
				{"server", s.Own, s.BW, pr.srv.eps[1].Posted.Send + pr.srv.eps[1].Posted.Write + pr.srv.eps[1].Posted.Read + pr.srv.eps[1].Posted.Atomic},
			} {
				if side.own == nil || side.own.Iters == 0 || side.own.BWPeak != 0 || !(side.own.BWAvg > 0) || side.own.Iters > uint64(side.posted) {
					t.Fatalf("%s's own row %+v after %d requests", side.name, side.own, side.posted)
				}
				if side.sum == nil || side.sum.Iters != side.own.Iters {
					t.Fatalf("%s printed %+v, its own count is %d", side.name, side.sum, side.own.Iters)
				}
			}
			if p.Verb == Send {
				if *c.BW != *c.Own || *s.BW != *s.Own || reportMsgs(pr.rec.sent) != 0 {
					t.Errorf("send bw -D -b: rows %+v and %+v, own %+v and %+v, %d report fields sent; want each its own, none exchanged", *c.BW, *s.BW, *c.Own, *s.Own, reportMsgs(pr.rec.sent))
				}
				return
			}
			if c.BW.BWAvg != c.Own.BWAvg+s.Own.BWAvg || s.BW.BWAvg != s.Own.BWAvg+c.Own.BWAvg || reportMsgs(pr.rec.sent) != 5 {
				t.Errorf("sums %v and %v of %v and %v, %d report fields sent", c.BW.BWAvg, s.BW.BWAvg, c.Own.BWAvg, s.Own.BWAvg, reportMsgs(pr.rec.sent))
			}
		})
	}
}
