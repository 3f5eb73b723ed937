package perftest

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// Report text of perftest 4.5+0.17 (the format strings in its binaries;
// src/perftest_parameters.h RESULT_LINE, RESULT_FMT*, REPORT_FMT*).
const (
	resultLine   = "---------------------------------------------------------------------------------------\n"
	resultFmtMB  = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	resultFmtGB  = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	reportFmt    = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n"
	reportFmtExt = " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n"
	resultFmtLat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n"
	reportFmtLat = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n"
)

// PrintBWHeader prints the bandwidth table's rule and column titles.
func PrintBWHeader(w io.Writer, gbits bool) {
	h := resultFmtMB
	if gbits {
		h = resultFmtGB
	}
	fmt.Fprint(w, resultLine+h)
}

// PrintBW prints one bandwidth row as print_full_bw_report does; in Gb/s
// below 0.1 it switches to six decimals (inc_accuracy).
func PrintBW(w io.Writer, r Report, gbits bool) { printBWRow(w, r, gbits && r.BWAvg < 0.1) }

// printBWRow prints r, in six decimals where inc (or, under --output,
// its figure).
func printBWRow(w io.Writer, r Report, inc bool) {
	if f, ok := w.(*figures); ok {
		f.bw(r)
		return
	}
	if inc {
		fmt.Fprintf(w, reportFmtExt, r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
		return
	}
	fmt.Fprintf(w, reportFmt, r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
}

// PrintLatHeader prints the latency table's rule and column titles.
func PrintLatHeader(w io.Writer) { fmt.Fprintf(w, resultLine+resultFmtLat) }

// PrintLat prints one latency row as print_report_lat does.
func PrintLat(w io.Writer, s LatStats) {
	if f, ok := w.(*figures); ok {
		fmt.Fprintf(f.w, "%f\n", s.Avg)
		return
	}
	fmt.Fprintf(w, reportFmtLat, s.Size, s.Iters, s.Min, s.Max, s.Typical, s.Avg, s.Stdev, s.Percentile99, s.Percentile999)
}

// PrintSamples is print_report_lat's -U and -H before the row: the
// samples (half round trips where halve is set, in usec, as %g) as they
// were taken, then sorted without the tail, each list under "#, usec",
// and the table's header again.
func PrintSamples(w io.Writer, posted []uint64, halve, unsorted, histogram bool) {
	if !unsorted && !histogram {
		return
	}
	q := float64(nsPerUsec)
	if halve {
		q *= 2
	}
	delta := make([]uint64, len(posted)-1)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
	}
	list := func(d []uint64) {
		fmt.Fprintf(w, "#, usec\n")
		for i, v := range d {
			fmt.Fprintf(w, "%d, %.6g\n", i+1, float64(v)/q)
		}
	}
	if unsorted {
		list(delta)
	}
	if histogram {
		slices.Sort(delta)
		list(delta[:len(delta)-latTail])
	}
	PrintLatHeader(w)
}

// PrintFooter closes a table.
func PrintFooter(w io.Writer) { fmt.Fprint(w, resultLine) }

// The latency table of duration mode (RESULT_FMT_LAT_DUR,
// REPORT_FMT_LAT_DUR).
const (
	resultFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average\n"
	reportFmtLatDur = " %-7d       %d            %-7.2f        %-7.2f\n"
)

// PrintLatDurationHeader prints the rule and column titles of a latency
// test's table in duration mode.
func PrintLatDurationHeader(w io.Writer) { fmt.Fprint(w, resultLine+resultFmtLatDur) }

// PrintLatDuration prints one row as print_report_lat_duration does.
func PrintLatDuration(w io.Writer, r LatDuration) {
	if f, ok := w.(*figures); ok {
		fmt.Fprintf(f.w, "%f\n", r.Avg)
		return
	}
	fmt.Fprintf(w, reportFmtLatDur, r.Size, r.Iters, r.Avg, r.TPS)
}

// Output is perftest's --output: the full report, or only one figure a
// row.
type Output int

const (
	OutputFull        Output = iota
	OutputBandwidth          // --output=bandwidth: BW average
	OutputMessageRate        // --output=message_rate: MsgRate
	OutputLatency            // --output=latency: t_avg
)

// ParseOutput reads --output's value as perftest does.
func ParseOutput(s string) (Output, error) {
	switch s {
	case "bandwidth":
		return OutputBandwidth, nil
	case "message_rate":
		return OutputMessageRate, nil
	case "latency":
		return OutputLatency, nil
	}
	return OutputFull, fmt.Errorf("--output %q: Invalid verbosity level output flag. Please use bandwidth, latency, message_rate (perftest's words): %w", s, verbs.ErrInvalid)
}

// figures is a side's report writer under --output: perftest then prints
// no banner, addresses or table (output != FULL_VERBOSITY), and each row
// as its one figure on a line of its own (print_full_bw_report,
// print_report_lat, print_report_lat_duration: printf("%lf\n")). Text
// written to it, the table's, goes nowhere; the row printers find it and
// write the figure to w.
type figures struct {
	w io.Writer
	o Output
}

func (f *figures) Write(b []byte) (int, error) { return len(b), nil }

func (f *figures) bw(r Report) {
	v := r.BWAvg
	if f.o == OutputMessageRate {
		v = r.MsgRate
	}
	fmt.Fprintf(f.w, "%f\n", v)
}

// reportTo is where a side of a test with p prints its report.
func reportTo(out io.Writer, p *Params) io.Writer {
	if p.Output == OutputFull {
		return out
	}
	return &figures{w: out, o: p.Output}
}

// ErrBelowLimit is a bandwidth or message rate below -w or -y.
var ErrBelowLimit = errors.New("perftest: below the limit")

// checkLimits is perftest's verifier (-w, --limit_bw; -y,
// --limit_msgrate) over the rows a side printed: each row that is at or
// above the limit passes it, and perftest fails the run only where none
// did (is_bw_limit_passed |= each row's verdict), after the closing
// handshake, in its words.
func checkLimits(p *Params, res *Result) error {
	if p.LimitBW <= 0 && p.LimitMsgRate <= 0 {
		return nil
	}
	rows := res.AllBW
	if len(rows) == 0 && res.BW != nil {
		rows = []Report{*res.BW}
	}
	bwOK, rateOK := p.LimitBW <= 0, p.LimitMsgRate <= 0
	for _, r := range rows {
		bwOK = bwOK || r.BWAvg >= p.LimitBW
		rateOK = rateOK || r.MsgRate >= p.LimitMsgRate
	}
	switch {
	case !bwOK:
		return fmt.Errorf("Error: BW result is below bw limit (%v): %w", p.LimitBW, ErrBelowLimit)
	case !rateOK:
		return fmt.Errorf("Error: Msg rate  is below msg_rate limit (%v): %w", p.LimitMsgRate, ErrBelowLimit)
	}
	return nil
}
