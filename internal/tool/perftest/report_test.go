package perftest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// TestOutputFigures: with --output a side prints no banner, addresses or
// table, only each row's figure on a line of its own, as perftest's
// "%lf\n": the BW average or the message rate of a bandwidth row (the
// server of a one-sided test prints the client's), t_avg of a latency row.
func TestOutputFigures(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Params
		want func(pr *pair) (client, server string)
	}{
		{"write_bw bandwidth", Params{Verb: Write, Kind: BW, Size: 4096, Iterations: 100, Output: OutputBandwidth},
			func(pr *pair) (string, string) {
				return fmt.Sprintf("%f\n", pr.client.BW.BWAvg), fmt.Sprintf("%f\n", pr.client.BW.BWAvg)
			}},
		{"send_bw message_rate", Params{Verb: Send, Kind: BW, Size: 64, Iterations: 100, Output: OutputMessageRate, ReportGbits: true},
			func(pr *pair) (string, string) {
				return fmt.Sprintf("%f\n", pr.client.BW.MsgRate), fmt.Sprintf("%f\n", pr.server.BW.MsgRate)
			}},
		{"write_bw -b bandwidth", Params{Verb: Write, Kind: BW, Size: 512, Iterations: 100, Bidir: true, Output: OutputBandwidth},
			func(pr *pair) (string, string) {
				return fmt.Sprintf("%f\n", pr.client.BW.BWAvg), fmt.Sprintf("%f\n", pr.server.BW.BWAvg)
			}},
		{"send_lat latency", Params{Verb: Send, Kind: Lat, Size: 8, Iterations: 50, Output: OutputLatency},
			func(pr *pair) (string, string) {
				return fmt.Sprintf("%f\n", pr.client.Lat.Avg), fmt.Sprintf("%f\n", pr.server.Lat.Avg)
			}},
		{"read_lat latency", Params{Verb: Read, Kind: Lat, Size: 8, Iterations: 50, Output: OutputLatency},
			func(pr *pair) (string, string) { return fmt.Sprintf("%f\n", pr.client.Lat.Avg), "" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pr := runPair(t, tt.p, tt.p, 0)
			if pr.cerr != nil || pr.serr != nil {
				t.Fatalf("client: %v\nserver: %v", pr.cerr, pr.serr)
			}
			c, s := tt.want(pr)
			if pr.cout.String() != c || pr.sout.String() != s {
				t.Errorf("printed %q and %q, want %q and %q", pr.cout.String(), pr.sout.String(), c, s)
			}
		})
	}
	p := Params{Verb: Write, Kind: BW, Iterations: 5, AllSizes: true, Output: OutputBandwidth}
	pr := runPair(t, p, p, 0)
	if pr.cerr != nil || pr.serr != nil {
		t.Fatalf("-a: client: %v\nserver: %v", pr.cerr, pr.serr)
	}
	if lines := strings.Split(strings.TrimSuffix(pr.cout.String(), "\n"), "\n"); len(lines) != 23 {
		t.Errorf("-a --output: %d lines, want a figure for each of 23 sizes:\n%s", len(lines), pr.cout.String())
	}
}

// TestOutputRefused: perftest's parser takes bandwidth and message_rate
// for bandwidth tests and latency for latency tests, nothing else.
func TestOutputRefused(t *testing.T) {
	for _, s := range []string{"", "Bandwidth", "gbits"} {
		if _, err := ParseOutput(s); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("--output %q: %v", s, err)
		}
	}
	for _, p := range []Params{
		{Verb: Write, Kind: BW, Output: OutputLatency},
		{Verb: Send, Kind: Lat, Output: OutputBandwidth},
		{Verb: Read, Kind: Lat, Output: OutputMessageRate},
		{Verb: Write, Kind: BW, LimitBW: -1},
		{Verb: Write, Kind: Lat, LimitMsgRate: 1},
	} {
		if err := p.Check(); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// TestLimits: -w and -y fail a run none of whose rows reaches them, on
// each side that printed such a row, in perftest's words, after the run
// has ended cleanly; a row at the limit passes.
func TestLimits(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Params
		fail string
	}{
		{"bw above", Params{Verb: Write, Kind: BW, Size: 1024, Iterations: 50, LimitBW: 1e-9}, ""},
		{"bw below", Params{Verb: Write, Kind: BW, Size: 1024, Iterations: 50, LimitBW: 1e15}, "BW result is below bw limit"},
		{"msg rate below", Params{Verb: Send, Kind: BW, Size: 64, Iterations: 50, LimitMsgRate: 1e15}, "Msg rate  is below msg_rate limit"},
		{"-b sum below", Params{Verb: Read, Kind: BW, Size: 64, Iterations: 50, Bidir: true, LimitBW: 1e15}, "BW result is below bw limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pr := runPair(t, tt.p, tt.p, 0)
			for side, err := range map[string]error{"client": pr.cerr, "server": pr.serr} {
				switch {
				case tt.fail == "" && err != nil:
					t.Errorf("%s: %v", side, err)
				case tt.fail != "" && (!errors.Is(err, ErrBelowLimit) || !strings.Contains(err.Error(), tt.fail)):
					t.Errorf("%s: %v, want %q", side, err, tt.fail)
				}
			}
			// The run itself completed: each side printed its table.
			if !strings.Contains(pr.cout.String(), "BW average[") || !strings.Contains(pr.sout.String(), "BW average[") {
				t.Errorf("tables missing:\n%s\n%s", pr.cout.String(), pr.sout.String())
			}
		})
	}
}

// TestReportBoth: --report-both under -b prints, after the sum, each
// side's own row in a table of its own, local first, with perftest's
// rules and titles (write_bw.c: RESULT_LINE, " Local results: ",
// RESULT_LINE, RESULT_FMT, the row, and the same for the remote one).
func TestReportBoth(t *testing.T) {
	p := Params{Verb: Write, Kind: BW, Size: 2048, Iterations: 100, Bidir: true, ReportBoth: true}
	pr := runPair(t, p, p, 0)
	if pr.cerr != nil || pr.serr != nil {
		t.Fatalf("client: %v\nserver: %v", pr.cerr, pr.serr)
	}
	for _, side := range []struct {
		out          string
		sum, own, rm Report
	}{
		{pr.cout.String(), *pr.client.BW, *pr.client.Own, *pr.server.Own},
		{pr.sout.String(), *pr.server.BW, *pr.server.Own, *pr.client.Own},
	} {
		var want strings.Builder
		PrintBW(&want, side.sum, false)
		want.WriteString(resultLine + "\n Local results: \n")
		PrintBWHeader(&want, false)
		PrintBW(&want, side.own, false)
		want.WriteString(resultLine + "\n Remote results: \n")
		PrintBWHeader(&want, false)
		PrintBW(&want, side.rm, false)
		want.WriteString(resultLine)
		if !strings.HasSuffix(side.out, want.String()) {
			t.Errorf("report ends\n%s\nwant it to end\n%s", side.out, want.String())
		}
	}
}
