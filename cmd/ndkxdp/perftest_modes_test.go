package main

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// perfRows are the report rows of a perf run's output: #bytes, #iterations
// and the figures after them.
func perfRows(out string) [][]string {
	var rows [][]string
	for _, l := range regexp.MustCompile(`(?m)^ \d+ +\d+ .*$`).FindAllString(out, -1) {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// TestPerfModeFlags: -a and -D (and perftest's long names) reach the
// test's parameters; -D lengthens the default -timeout by the run, not a
// -timeout given; the progress line of a -D run says how long it lasts.
func TestPerfModeFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		all     bool
		dur     time.Duration
		timeout time.Duration
	}{
		{[]string{"-a"}, true, 0, 10 * time.Minute},
		{[]string{"--all"}, true, 0, 10 * time.Minute},
		{[]string{"-D", "3"}, false, 3 * time.Second, 10*time.Minute + 3*time.Second},
		{[]string{"--duration", "600", "-n", "50"}, false, 10 * time.Minute, 20 * time.Minute},
		{[]string{"-D", "30", "-timeout", "1m"}, false, 30 * time.Second, time.Minute},
	} {
		f, err := parsePerfTest("write_bw", append(tc.args, "-dev", "lo"), io.Discard, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if f.params.AllSizes != tc.all || f.params.Duration != tc.dur || f.timeout != tc.timeout {
			t.Errorf("%q: -a %v, -D %v, timeout %v; want %v, %v, %v", tc.args, f.params.AllSizes, f.params.Duration, f.timeout, tc.all, tc.dur, tc.timeout)
		}
	}
	p := perftest.Params{Verb: perftest.Write, Kind: perftest.BW}
	if got := progressLabel("write_bw", p); got != "perf write_bw" {
		t.Errorf("label %q", got)
	}
	p.Duration = 5 * time.Second
	if got := progressLabel("write_bw", p); got != "perf write_bw -D 5s" {
		t.Errorf("label of a -D run %q", got)
	}
}

// TestPerfAllSizesAndDuration runs `ndkxdp perf` on both ends of a veth
// pair with -a (send_bw, write_lat: a row for each size from 2 to 2^23 on
// both sides) and -D 2 (write_bw: the client's row without peak, which
// the server prints too; send_lat: the duration table on both sides).
func TestPerfAllSizesAndDuration(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	var sizes []string
	for size := 2; size <= 1<<23; size *= 2 {
		sizes = append(sizes, strconv.Itoa(size))
	}
	for _, test := range []string{"send_bw", "write_lat"} {
		t.Run(test+"_a", func(t *testing.T) {
			cout, sout := runBoth(t, p,
				[]string{"perf", test, "-a", "-n", "5", "-dev", p.B.Link},
				[]string{"perf", test, "-a", "-n", "5", srv, "-dev", p.A.Link})
			t.Logf("client:\n%s", cout)
			for _, out := range []string{cout, sout} {
				var got []string
				for _, r := range perfRows(out) {
					if r[1] != "5" {
						t.Errorf("row %q, want 5 iterations", r)
					}
					got = append(got, r[0])
				}
				if strings.Join(got, " ") != strings.Join(sizes, " ") {
					t.Fatalf("rows of sizes %v, want 2 to 2^23:\n%s", got, out)
				}
			}
		})
	}
	t.Run("write_bw_D", func(t *testing.T) {
		start := time.Now()
		cout, sout := runBoth(t, p,
			[]string{"perf", "write_bw", "-D", "2", "-s", "4096", "-dev", p.B.Link},
			[]string{"perf", "write_bw", "-D", "2", "-s", "4096", srv, "-dev", p.A.Link})
		t.Logf("client:\n%s", cout)
		if el := time.Since(start); el < 2*time.Second {
			t.Errorf("-D 2 took %v", el)
		}
		c, s := perfRows(cout), perfRows(sout)
		if len(c) != 1 || len(s) != 1 || strings.Join(c[0], " ") != strings.Join(s[0], " ") {
			t.Fatalf("the server should print the client's one row:\n%s\nserver:\n%s", cout, sout)
		}
		if n, err := strconv.Atoi(c[0][1]); err != nil || n <= 0 || c[0][0] != "4096" || c[0][2] != "0.00" {
			t.Errorf("row %q, want 4096 bytes, some iterations, no peak", c[0])
		}
	})
	t.Run("send_lat_D", func(t *testing.T) {
		cout, sout := runBoth(t, p,
			[]string{"perf", "send_lat", "-D", "2", "-dev", p.B.Link},
			[]string{"perf", "send_lat", "-D", "2", srv, "-dev", p.A.Link})
		t.Logf("client:\n%s\nserver:\n%s", cout, sout)
		for _, out := range []string{cout, sout} {
			rows := perfRows(out)
			if !strings.Contains(out, "t_avg[usec]    tps average") || len(rows) != 1 || len(rows[0]) != 4 {
				t.Fatalf("no duration table of one row:\n%s", out)
			}
			if avg, err := strconv.ParseFloat(rows[0][2], 64); err != nil || avg <= 0 {
				t.Errorf("t_avg %q, want a positive time", rows[0][2])
			}
		}
	})
}

// TestPerfSpinFlag: -spin sets how long both the engines and the test's
// own polling spin before they sleep, and the header says so; without it
// both spin for the default.
func TestPerfSpinFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, verbs.DefaultSpin},
		{[]string{"-spin", "75us"}, 75 * time.Microsecond},
		{[]string{"-spin", "1ms", "-polling", "adaptive"}, time.Millisecond},
	} {
		f, err := parsePerfTest("send_lat", append(tc.args, "-dev", "lo"), io.Discard, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if f.opts.SpinTime != tc.want || f.params.Spin != tc.want {
			t.Errorf("%q: engines spin %v, the test %v; want %v", tc.args, f.opts.SpinTime, f.params.Spin, tc.want)
		}
		want := fmt.Sprintf("adaptive polling (spin %v, then sleep)", tc.want)
		if got := pollingText(f.polling, f.spin, 1); got != want {
			t.Errorf("%q: header says %q, want %q", tc.args, got, want)
		}
	}
	f, err := parsePerfTest("send_lat", []string{"-polling", "busy", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || !f.params.BusyPoll || pollingText(f.polling, f.spin, 1) != "busy polling" {
		t.Errorf("-polling busy: %v, busy %v, header %q", err, f.params.BusyPoll, pollingText(f.polling, f.spin, 1))
	}
	// auto, which the help offers, is ndk.PollAuto, and the header says
	// what it chose.
	f, err = parsePerfTest("send_bw", []string{"-polling", "auto", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.opts.Polling != ndk.PollAuto || f.params.BusyPoll {
		t.Fatalf("-polling auto: %v, options %v, busy %v", err, f.opts.Polling, f.params.BusyPoll)
	}
	want := fmt.Sprintf("auto (GOMAXPROCS %d): ", runtime.GOMAXPROCS(0))
	if ndk.PollAuto.Resolve(1) == ndk.PollProgress {
		want += "consumer-driven progress"
	} else {
		want += "adaptive polling"
	}
	if got := pollingText(f.polling, f.spin, 1); !strings.HasPrefix(got, want) {
		t.Errorf("-polling auto: header says %q, want it to begin %q", got, want)
	}
}

// TestPerfBidirectional runs `ndkxdp perf -b` on both ends of a veth
// pair: send, write and read bw (send bw also over -q 2, and receiving
// through an SRQ on both sides) in both directions at once, each side
// printing one row, both sides' sum, so the two rows are the same (send
// bw needs receive completions while SENDs are outstanding:
// verbs.ConnParams.Unordered). -b is refused for latency tests, as
// perftest's parser refuses it.
func TestPerfBidirectional(t *testing.T) {
	if _, err := parsePerfTest("send_lat", []string{"-b", "-dev", "lo"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "only available in BW test") {
		t.Errorf("send_lat -b: %v", err)
	}
	f, err := parsePerfTest("write_bw", []string{"--bidirectional", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || !f.params.Bidir {
		t.Fatalf("write_bw --bidirectional: %v, bidir %v", err, f.params.Bidir)
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	srv := p.B.IPv4.String()
	for _, tc := range []struct {
		test, qps, iters string
		extra            []string
	}{
		{"send_bw", "1", "2000", nil}, {"write_bw", "1", "2000", nil}, {"read_bw", "1", "2000", nil},
		{"send_bw", "2", "4000", nil}, {"send_bw", "1", "2000", []string{"--use-srq", "-r", "64"}},
	} {
		test := tc.test
		t.Run(test+"_q"+tc.qps+strings.Join(tc.extra, ""), func(t *testing.T) {
			args := append([]string{"perf", test, "-b", "-q", tc.qps, "-n", "2000", "-s", "4096"}, tc.extra...)
			cout, sout := runBoth(t, p,
				append(slices.Clone(args), "-dev", p.B.Link),
				append(slices.Clone(args), srv, "-dev", p.A.Link))
			t.Logf("client:\n%s\nserver:\n%s", cout, sout)
			c, s := perfRows(cout), perfRows(sout)
			if len(c) != 1 || len(s) != 1 {
				t.Fatalf("want one row on each side")
			}
			if c[0][0] != "4096" || c[0][1] != tc.iters || strings.Join(c[0], " ") != strings.Join(s[0], " ") {
				t.Errorf("rows %q and %q: want 4096 x %s and the same sum on both sides", c[0], s[0], tc.iters)
			}
			for _, out := range []string{cout, sout} {
				if !strings.Contains(out, "bidirectional (-b)") {
					t.Errorf("header does not say -b:\n%s", out)
				}
			}
		})
	}
}

// TestPerfReportOptions: perftest's --output, -w/--limit_bw,
// -y/--limit_msgrate and --report-both reach the test's parameters (and
// -I, --use_old_post_send and --perform_warm_up are taken), and
// an --output run prints its figure alone on stdout (ndkxdp's own header
// goes to stderr), as perftest does, over a veth pair.
func TestPerfReportOptions(t *testing.T) {
	f, err := parsePerfTest("write_bw", []string{"--output=message_rate", "-w", "5.5", "--limit_msgrate", "0.25", "-b", "--report-both", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if p := f.params; p.Output != perftest.OutputMessageRate || p.LimitBW != 5.5 || p.LimitMsgRate != 0.25 || !p.ReportBoth {
		t.Errorf("params %+v", p)
	}
	// perftest's flags that change nothing on the wire are taken.
	if _, err := parsePerfTest("send_lat", []string{"-I", "64", "--use_old_post_send", "--perform_warm_up", "-dev", "lo"}, io.Discard, io.Discard); err != nil {
		t.Errorf("send_lat -I 64 --use_old_post_send --perform_warm_up: %v", err)
	}
	for _, args := range [][]string{{"--output=gbits"}, {"--output", "latency"}, {"-I", "-1"}} {
		if _, err := parsePerfTest("write_bw", append(args, "-dev", "lo"), io.Discard, io.Discard); err == nil {
			t.Errorf("write_bw %q accepted", args)
		}
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	cout, sout := runBoth(t, p,
		[]string{"perf", "write_bw", "--output=bandwidth", "--report_gbits", "-n", "500", "-dev", p.B.Link},
		[]string{"perf", "write_bw", "--output=bandwidth", "--report_gbits", "-n", "500", p.B.IPv4.String(), "-dev", p.A.Link})
	for who, out := range map[string]string{"client": cout, "server": sout} {
		v, err := strconv.ParseFloat(strings.TrimSuffix(out, "\n"), 64)
		if err != nil || !(v > 0) || strings.Count(out, "\n") != 1 {
			t.Errorf("%s's stdout %q: want one positive figure on a line", who, out)
		}
	}
	if cout != sout {
		t.Errorf("the server prints the client's figure: %q and %q", sout, cout)
	}
}

// TestPerfTOS: -T gives the client's adapter the TOS byte (DSCP and ECN),
// which its REQs carry and the server, whose adapter sends 0 by default,
// takes for its frames on those connections (the IB CM's passive side, as
// Linux's): every RC frame the server's capture holds carries it. Bad
// values, and -T through a daemon, are refused.
func TestPerfTOS(t *testing.T) {
	for _, args := range [][]string{{"-T", "256"}, {"-T", "3"}, {"-T", "-2"}, {"-T", "2", "-daemon", "/nonexistent"}} {
		if _, err := parsePerfTest("write_bw", append(args, "-dev", "lo"), io.Discard, io.Discard); err == nil {
			t.Errorf("write_bw %q accepted", args)
		}
	}
	f, err := parsePerfTest("write_bw", []string{"--tos", "106", "-dev", "lo"}, io.Discard, io.Discard)
	if err != nil || f.opts.TrafficClass != (ndk.TrafficClass{DSCP: 26, ECN: ndk.ECT0}) {
		t.Fatalf("--tos 106: %v, class %+v", err, f.opts.TrafficClass)
	}
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	capture := filepath.Join(t.TempDir(), "server.pcap")
	runBoth(t, p,
		[]string{"perf", "write_bw", "-n", "200", "-capture", capture, "-dev", p.B.Link},
		[]string{"perf", "write_bw", "-n", "200", "-T", "106", p.B.IPv4.String(), "-dev", p.A.Link})
	c, err := pcapfile.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	tos := map[uint8]int{}
	for _, pk := range c.Packets {
		var pkt rocev2.Packet
		if rocev2.Parse(pk.Data, &pkt) == nil && pkt.BTH.DestQP != rocev2.GSIQP {
			tos[pkt.IP.TOS]++
		}
	}
	if len(tos) != 1 || tos[106] == 0 {
		t.Errorf("RC frames in the server's capture carried TOS %v, want only 106", tos)
	}
}
