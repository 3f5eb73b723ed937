package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOps("status", "Says whether a daemon serves the interface, since when, with how many clients and connections.", args, stdout, stderr, true)
	if err != nil {
		return err
	}
	var s daemon.Status
	if err := o.query(ctx, daemon.OpAdminStatus, &s); err != nil {
		if o.dev != "" {
			// A daemon killed with SIGKILL leaves its attachment pinned,
			// still steering frames to sockets nobody reads.
			if dir := loader.PinDir(o.dev, loader.Options{}); exists(dir) {
				return fmt.Errorf("status: no daemon runs on %s (%w); the attachment of one that died is pinned at %s and steers RoCE frames nowhere: start the daemon (it takes the attachment over)", o.dev, err, dir)
			}
		}
		return fmt.Errorf("status: %w", err)
	}
	if o.json {
		return printJSON(stdout, s)
	}
	fmt.Fprintf(stdout, "daemon on %s: running, pid %d, version %s\n", s.Interface, s.PID, s.Version)
	fmt.Fprintf(stdout, "  since %s (up %s)\n", s.Started.Format(time.RFC3339), (time.Duration(s.Uptime * float64(time.Second))).Round(time.Second))
	fmt.Fprintf(stdout, "  clients %d (served %d), qps %d, connections %d\n", s.Clients, s.Served, s.QPs, s.Connections)
	if s.Metrics != "" {
		fmt.Fprintf(stdout, "  metrics http://%s/metrics\n", s.Metrics)
	}
	// What the daemon refused or ended, where anything was.
	if q, e := nonzero(s.QuotaExceeded), nonzero(s.Ended); q != "" || e != "" || s.Refused != 0 {
		fmt.Fprintf(stdout, "  refused by the allow list %d; over quota: %s; sessions ended: %s\n", s.Refused, or(q, "none"), or(e, "none"))
	}
	for _, c := range s.Sessions {
		fmt.Fprintf(stdout, "  client pid %d (%s) uid %d since %s: qps %d, connections %d\n",
			c.PID, c.Command, c.UID, c.Since.Format(time.RFC3339), c.QPs, c.Connections)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// nonzero lists a map's nonzero counts as "name n ..." in name order.
func nonzero(m map[string]uint64) string {
	nz := make(map[string]uint64, len(m))
	for k, v := range m {
		if v != 0 {
			nz[k] = v
		}
	}
	return pairs(nz)
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
