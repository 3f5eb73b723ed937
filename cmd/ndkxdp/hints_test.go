package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestQueuesBeyondTheDevice: -queues past the device's receive queues is
// a bad command line (exit 2) that names the count the device has and how
// to see and change it, for the tools and the daemon, before anything is
// attached.
func TestQueuesBeyondTheDevice(t *testing.T) {
	p := harness.New(t, harness.Config{Queues: 1})
	for _, args := range [][]string{
		{"rping", "-s", "-C", "1", "-queues", "4", "-dev", p.A.Link},
		{"perf", "send_bw", "-n", "5", "-queues", "4", "-dev", p.A.Link},
		{"daemon", "-queues", "4", "-dev", p.A.Link, "-socket", filepath.Join(t.TempDir(), "d.sock")},
	} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			var code int
			if err := p.A.Do(func() error {
				code = exitStatus(run(ctx, args, &stdout, &stderr), &stderr)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			want := "-queues 4: " + p.A.Link + " has 1 receive queue(s) in use (EINVAL); give at most 1, or all (`ethtool -l " + p.A.Link + "`"
			if code != 2 || !strings.Contains(stderr.String(), want) {
				t.Errorf("exit %d, stderr:\n%s\nwant 2 and %q", code, stderr.String(), want)
			}
		})
	}
}
