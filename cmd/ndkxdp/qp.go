package main

import (
	"context"
	"fmt"
	"io"

	"github.com/ndkxdp/ndkxdp/ndk/daemon"
)

func runQP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOps("qp", "Lists a daemon's QPs, as rdma resource show qp: number, state, peer, PSNs, outstanding requests and reads, retransmissions, owning process.", args, stdout, stderr, true)
	if err != nil {
		return err
	}
	var qps []daemon.QP
	if err := o.query(ctx, daemon.OpAdminQPs, &qps); err != nil {
		return fmt.Errorf("qp: %w", err)
	}
	if o.json {
		return printJSON(stdout, qps)
	}
	for _, q := range qps {
		peer := "-"
		if q.PeerAddr != "" {
			peer = fmt.Sprintf("%s rqpn %d", q.PeerAddr, q.PeerQPN)
		}
		owner := "daemon"
		if q.PID != 0 {
			owner = fmt.Sprintf("pid %d comm %s", q.PID, q.Command)
		}
		fmt.Fprintf(stdout, "lqpn %d queue %d type %s state %s peer %s path_mtu %d sq-psn %d unacked-psn %d rq-psn %d outstanding %d reads %d retransmits %d %s\n",
			q.QPN, q.Queue, q.Type, q.State, peer, q.PathMTU, q.SendPSN, q.UnackedPSN, q.ExpectedPSN, q.Outstanding, q.ReadsOut, q.Retransmits, owner)
	}
	return nil
}
