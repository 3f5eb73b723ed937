package perftest

import (
	"fmt"
	"io"
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
func PrintBW(w io.Writer, r Report, gbits bool) {
	if gbits && r.BWAvg < 0.1 {
		fmt.Fprintf(w, reportFmtExt, r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
		return
	}
	fmt.Fprintf(w, reportFmt, r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
}

// PrintLatHeader prints the latency table's rule and column titles.
func PrintLatHeader(w io.Writer) { fmt.Fprintf(w, resultLine+resultFmtLat) }

// PrintLat prints one latency row as print_report_lat does.
func PrintLat(w io.Writer, s LatStats) {
	fmt.Fprintf(w, reportFmtLat, s.Size, s.Iters, s.Min, s.Max, s.Typical, s.Avg, s.Stdev, s.Percentile99, s.Percentile999)
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
	fmt.Fprintf(w, reportFmtLatDur, r.Size, r.Iters, r.Avg, r.TPS)
}
