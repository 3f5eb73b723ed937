package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOps("stats", "Prints a daemon's counters, as rdma statistic: the adapter's, each engine's with its AF_XDP socket's, the XDP program's verdicts and reasons, the CM's and each QP's.", args, stdout, stderr, true)
	if err != nil {
		return err
	}
	var s daemon.Stats
	if err := o.query(ctx, daemon.OpAdminStats, &s); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if o.json {
		return printJSON(stdout, s)
	}
	w := stdout
	fmt.Fprintf(w, "link %s %s\n", s.Interface, pairs(s.Adapter))
	for _, e := range s.Engines {
		k := e.Socket
		fmt.Fprintf(w, "link %s queue %d %s\n", s.Interface, e.Queue, pairs(e.Engine))
		fmt.Fprintf(w, "link %s queue %d xsk rx_dropped %d rx_ring_full %d fill_ring_empty %d tx_invalid_descs %d rx_invalid_descs %d tx_ring_empty %d tx_frames %d tx_in_place_frames %d tx_in_place_bytes %d\n",
			s.Interface, e.Queue, k.RxDropped, k.RxRingFull, k.FillRingEmpty, k.TxInvalid, k.RxInvalid, k.TxRingEmpty, k.TxFrames, k.TxInPlaceFrames, k.TxInPlaceBytes)
	}
	fmt.Fprintf(w, "link %s xdp %s\n", s.Interface, pairs(s.Verdicts))
	fmt.Fprintf(w, "link %s xdp-reasons %s\n", s.Interface, pairs(s.XDP))
	fmt.Fprintf(w, "link %s cm %s\n", s.Interface, pairs(s.CM))
	fmt.Fprintf(w, "link %s daemon %s\n", s.Interface, pairs(s.Daemon))
	for _, q := range s.QPs {
		fmt.Fprintf(w, "link %s lqpn %d", s.Interface, q.QPN)
		for c, v := range q.QP.All() {
			fmt.Fprintf(w, " %s %d", c.Name, v)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// pairs writes m as "name value" pairs in name order, as rdma statistic.
func pairs(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
