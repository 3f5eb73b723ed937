package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
)

// TestPerftestCommandLines: perftest's command lines as scripts write
// them run unchanged after `ndkxdp perf` (here: parse to the run they
// mean, -d naming the interface), and the flags ndkxdp cannot honour are
// refused naming what to do instead.
func TestPerftestCommandLines(t *testing.T) {
	for _, tc := range []struct {
		line  string
		check func(f perfTestFlags) bool
	}{
		{"ib_write_bw -R -F -x 0 -d lo -s 65536 -n 500 --report_gbits 198.18.0.1", func(f perfTestFlags) bool {
			return f.dev == "lo" && f.addr == "198.18.0.1" && f.params.Size == 65536 && f.params.Iterations == 500 && f.params.ReportGbits
		}},
		{"ib_send_lat -R -F -d lo --size 64 --iters 1000 -x 3 198.18.0.1", func(f perfTestFlags) bool {
			return f.params.Size == 64 && f.params.Iterations == 1000 && f.params.GIDIndex == 3
		}},
		{"ib_read_bw -R -d lo -q 1 -D 10 -F", func(f perfTestFlags) bool {
			return f.addr == "" && f.params.Duration == 10*time.Second
		}},
		{"ib_send_bw -R -d lo --size=4096 --duration 5 --port 18520 -e --tx-depth 64 198.18.0.1", func(f perfTestFlags) bool {
			return f.params.Size == 4096 && f.params.Duration == 5*time.Second && f.params.Port == 18520 && f.params.TxDepth == 64
		}},
		{"ib_atomic_bw -R -d lo -A CMP_AND_SWAP -i 1 -c RC 198.18.0.1", func(f perfTestFlags) bool {
			return f.params.AtomicType == perftest.CompareAndSwap
		}},
		{"ib_write_bw -R -d lo -a -F --ib-dev lo", func(f perfTestFlags) bool { return f.params.AllSizes }},
		{"ib_send_bw -R -d lo -c UD -n 20 198.18.0.1", func(f perfTestFlags) bool { return f.params.UD && f.params.Iterations == 20 }},
		{"ib_write_lat -d lo -c UC 198.18.0.1", func(f perfTestFlags) bool { return f.params.UC && !f.params.UD }},
		{"ib_send_bw -z -d lo -c UC 198.18.0.1", func(f perfTestFlags) bool { return f.params.UC && f.params.Comm == perftest.CommRDMACMControl }},
		{"ib_write_lat --rdma_cm --CPU-freq --gid-index 1 --ib-dev lo 198.18.0.1", func(f perfTestFlags) bool { return f.params.GIDIndex == 1 }},
		{"ib_send_bw -R -d lo -q 4 198.18.0.1", func(f perfTestFlags) bool { return f.params.QPs == 4 }},
		{"ib_read_bw -R -d lo --qp 2 198.18.0.1", func(f perfTestFlags) bool { return f.params.QPs == 2 }},
		{"ib_atomic_bw -R -d lo -q 3", func(f perfTestFlags) bool { return f.params.QPs == 3 && f.addr == "" }},
	} {
		t.Run(tc.line, func(t *testing.T) {
			args := strings.Fields(tc.line)
			name := strings.TrimPrefix(args[0], "ib_")
			f, err := parsePerfTest(name, args[1:], io.Discard, io.Discard)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.check(f) {
				t.Errorf("parsed to %+v (dev %q, addr %q)", f.params, f.dev, f.addr)
			}
		})
	}
	for _, tc := range []struct{ line, want string }{
		{"ib_send_bw -R -d lo --run_infinitely 198.18.0.1", "-D SECONDS runs for that long"},
		{"ib_send_bw -R -d lo -D 5 --cpu_util 198.18.0.1", "does not report the host's CPU share"},
		{"ib_write_bw -R -d lo --out_json --out_json_file=/tmp/x 198.18.0.1", "writes no JSON"},
		{"ib_write_bw -R -d lo -q 4 -D 5 198.18.0.1", "-q 4 with -D"},
		{"ib_send_bw -R -d lo -q 2 --use-srq 198.18.0.1", "-q 2 with --use-srq"},
		{"ib_send_lat -R -d lo -q 1 198.18.0.1", "Multiple QPs only available on bw tests"},
		{"ib_write_lat -R -d lo --qp 2 198.18.0.1", "Multiple QPs only available on bw tests"},
		{"ib_read_bw -R -d lo -q 0 198.18.0.1", "num of Qps should be between 1 and 16384"},
		{"ib_write_bw -R -d lo -q 16385 198.18.0.1", "num of Qps should be between 1 and 16384"},
		{"ib_send_bw -R -d mlx5_99 198.18.0.1", "give -dev IF, or -daemon SOCKET"},
		{"ib_send_bw -R -d lo -c XRC 198.18.0.1", "RC, UC and UD connections only"},
		{"ib_read_bw -R -d lo -c UC 198.18.0.1", "UC connection not possible in READ/ATOMIC verbs"},
		{"ib_send_bw -R -d lo -c UC 198.18.0.1", "UC is not supported in librdmacm"},
		{"ib_atomic_bw -d lo -c UC 198.18.0.1", "UC connection not possible in READ/ATOMIC verbs"},
		{"ib_write_bw -R -d lo -c UD 198.18.0.1", "-c UD runs ib_send_bw and ib_send_lat only"},
		{"ib_send_bw -R -d lo -m 4096 198.18.0.1", "follows the interface's MTU"},
		{"ib_send_bw -R -d lo -i 2 198.18.0.1", "one port"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			args := strings.Fields(tc.line)
			_, err := parsePerfTest(strings.TrimPrefix(args[0], "ib_"), args[1:], io.Discard, io.Discard)
			var ue *cmdline.UsageError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
				t.Errorf("%v, want a usage error naming %q", err, tc.want)
			}
		})
	}
}
