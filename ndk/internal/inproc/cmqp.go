package inproc

import (
	"context"
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// drainTimeout bounds the wait for a QP to drain before Drained's
// callback runs anyway: an engine that stopped responding must not hold a
// Disconnect forever.
const drainTimeout = 10 * time.Second

// cmQP drives an RC QP for one connection (cm.QP): the RTR parameters are
// kept until RTS connects the QP with all of them at once.
type cmQP struct {
	q            *rc.QP
	psn          uint32 // the first PSN the QP's responder expects
	pmtu         rocev2.MTU
	drainTimeout time.Duration
	traffic      rc.TrafficClass // the engines' (Config.Traffic)
	ri           cm.RemoteInfo
	rtr          bool
}

// ConnectionQP returns the CM's view of q (cm.QP), whose responder
// expects psn first.
func (p *Provider) ConnectionQP(q *rc.QP, psn uint32) cm.QP {
	return &cmQP{q: q, psn: psn, pmtu: p.link.PathMTU, drainTimeout: drainTimeout, traffic: p.traffic}
}

// cmParams is cfg.CM with the traffic class its REQs carry: the engines'
// DSCP and ECN.
func cmParams(cfg Config) cm.Params {
	params := cfg.CM
	params.TrafficClass = rocev2.TOS(cfg.Traffic.DSCP, cfg.Traffic.ECN)
	return params
}

// connectionTraffic is the traffic class of a connection whose REQ asked
// for tos: a Linux passive side builds its QP's address from the REQ's
// path (cm.c cm_format_paths_from_req, then ib_cm_init_qp_attr), so its
// frames carry the active side's DSCP and ECN, and so do ours. A REQ
// that asks for 0 (rdma_cm's default_roce_tos) leaves the adapter's own;
// one whose ECN says CE, which a switch sets and no sender, is taken as
// ECT(0). The VLAN priority stays the adapter's. nil means the engines'
// default.
func connectionTraffic(def rc.TrafficClass, tos uint8) *rc.TrafficClass {
	if tos == 0 || tos == rocev2.TOS(def.DSCP, def.ECN) {
		return nil
	}
	tc := def
	tc.DSCP, tc.ECN = rocev2.DSCPOf(tos), rocev2.ECNOf(tos)
	if tc.ECN == rocev2.CE {
		tc.ECN = rocev2.ECT0
	}
	return &tc
}

func (x *cmQP) QPN() uint32             { return x.q.QPN() }
func (x *cmQP) StartingPSN() rocev2.PSN { return rocev2.PSN(x.psn) & rocev2.PSNMask }

func (x *cmQP) ToRTR(ri cm.RemoteInfo) error {
	switch {
	case !ri.Path.LocalIP.IsValid() || !ri.Path.RemoteIP.IsValid():
		return fmt.Errorf("QP %#x: path without addresses", x.q.QPN())
	case ri.PathMTU > x.pmtu:
		return fmt.Errorf("QP %#x: path MTU %d exceeds the interface's %d", x.q.QPN(), ri.PathMTU.Bytes(), x.pmtu.Bytes())
	}
	x.ri, x.rtr = ri, true
	return nil
}

func (x *cmQP) ToRTS() error {
	if !x.rtr {
		return fmt.Errorf("QP %#x: RTS before RTR", x.q.QPN())
	}
	ri := &x.ri
	// Linux takes each side's StartingPSN as the PSN that side receives
	// first: the active side sends from the REP's PSN and the passive side
	// from the REQ's (cm.c cm_rep_handler sets sq_psn from the REP). The
	// rxe capture linlinw5__rdma_ib_tutorial/rping.pcap shows it: REQ PSN
	// 0x3da6, REP PSN 0xfebd3d, the client's first SEND 0xfebd3d and the
	// server's first READ 0x3da6. So our requester starts at the peer's
	// StartingPSN and our responder expects our own.
	p := rc.ConnParams{
		Local:             rc.Endpoint{IP: ri.Path.LocalIP.Unmap(), MAC: ri.Path.LocalMAC, QPN: x.q.QPN(), PSN: uint32(ri.PSN)},
		Remote:            rc.Endpoint{IP: ri.Path.RemoteIP.Unmap(), MAC: ri.Path.RemoteMAC, QPN: ri.QPN, PSN: x.psn},
		PathMTU:           ri.PathMTU,
		InboundReadLimit:  int(ri.InboundReadLimit),
		OutboundReadLimit: int(ri.OutboundReadLimit),
		AckTimeout:        ri.AckTimeoutDuration(),
		RetryCount:        int(ri.RetryCount),
		RNRRetry:          int(ri.RNRRetry),
		MinRNRTimer:       rocev2.RNRTimerFor(10 * time.Microsecond),
		Traffic:           connectionTraffic(x.traffic, ri.TrafficClass),
	}
	return x.q.Connect(p)
}

func (x *cmQP) ToError() { x.q.Flush() }

// Drained calls f on a goroutine of its own once the engine drained the
// QP (rc.QP.Drained: every request cancelled, no DMA on the QP can
// follow), or after drainTimeout.
func (x *cmQP) Drained(f func()) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), x.drainTimeout)
		defer cancel()
		_ = waitDrained(ctx, x.q.Drained())
		f()
	}()
}

// waitDrained returns nil when drained closes, or ctx's error if it ends
// first.
func waitDrained(ctx context.Context, drained <-chan struct{}) error {
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
