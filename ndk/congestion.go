package ndk

import (
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// ECN is the ECN codepoint a connection's frames carry (RFC 3168): a
// switch that would drop an ECN-capable frame marks it Congestion
// Experienced instead, and the receiver answers with a CNP (DCQCN).
type ECN uint8

// ECN codepoints a sender may use.
const (
	ECNNotCapable ECN = ECN(rocev2.NotECT)
	ECT1          ECN = ECN(rocev2.ECT1)
	ECT0          ECN = ECN(rocev2.ECT0) // what RoCE NICs send
)

// TrafficClass is what a connection's frames carry for the network's
// queues: DSCP and ECN in the IP header and, with VLAN, an 802.1Q tag
// whose PCP picks the priority (PFC) class. The zero value is DSCP 0,
// not ECN-capable, untagged. CNPs always leave with DSCP 48, ECT(0) and,
// when tagged, PCP 6 (DCQCN's CNP class).
type TrafficClass struct {
	DSCP uint8 // 0-63
	ECN  ECN
	// VLAN tags every frame with VLANID (0-4094; 0 carries the priority
	// only) and PCP (0-7). The receive side accepts tagged frames whether
	// or not this is set.
	VLAN   bool
	VLANID uint16
	PCP    uint8
}

func (c TrafficClass) rc() rc.TrafficClass {
	return rc.TrafficClass{DSCP: c.DSCP, ECN: rocev2.ECN(c.ECN), VLAN: c.VLAN, VLANID: c.VLANID, PCP: c.PCP}
}

// CongestionMode says which halves of DCQCN an adapter's engines run.
type CongestionMode uint8

const (
	// CongestionOff (the default) sends no CNP and ignores those that
	// arrive (EngineStats.CNPs counts them).
	CongestionOff CongestionMode = iota
	// CongestionNotify answers CE-marked frames with CNPs (the
	// notification point) and ignores CNPs that arrive.
	CongestionNotify
	// CongestionOn adds the reaction point: a CNP cuts the QP's sending
	// rate, which timers and a byte counter raise back (DCQCN).
	CongestionOn
)

// CongestionOptions tune DCQCN; zero fields take the defaults of ndk/internal/rc's
// doc ("Congestion control"), those of ConnectX NICs where they fit.
type CongestionOptions struct {
	Mode CongestionMode
	// CNPInterval is the least time between two CNPs to one QP (default
	// 50µs).
	CNPInterval time.Duration
	// LineRateMbps is the rate a QP starts at and recovers to after
	// congestion, in Mb/s (default 10,000).
	LineRateMbps float64
	// MinRateMbps is the lowest rate a cut goes to (default 1).
	MinRateMbps float64
	// AIRateMbps and HAIRateMbps are the additive and hyper increase
	// steps (RPG_AI_RATE, RPG_HAI_RATE; defaults 5 and 50). The defaults
	// suit links of 10-100 Gb/s; on a slower bottleneck they add, per
	// flow, a few percent of it each RPG_TIME_RESET (300µs), and many
	// flows overshoot it before the marks of a queue milliseconds long
	// come back: scale them with the bottleneck (test/congestion's doc).
	AIRateMbps, HAIRateMbps float64
	// IncreaseTimer (RPG_TIME_RESET, default 300µs), ByteCounter
	// (RPG_BYTE_RESET, in bytes, default 32767 units of 64 B) and
	// AlphaTimer (DCE_TCP_RTT, default 55µs) pace the rate's recovery
	// and alpha's decay. The defaults suit round trips of microseconds;
	// where a marked frame reaches the receiver only after milliseconds
	// of queue, a rate recovers long before the next signal and the
	// queue refills: scale them with the round trip (test/congestion's
	// doc).
	IncreaseTimer time.Duration
	ByteCounter   uint64
	AlphaTimer    time.Duration
	// RateReduceMonitorPeriod is the least time between two of a QP's
	// rate cuts (rate_reduce_monitor_period, default 4µs). The default
	// suits a network whose marks reach the sender microseconds after
	// its rate changed; where that takes milliseconds, every CNP of the
	// marks still in flight cuts again, and a rate halved once is cut
	// to the floor: set it near the round trip (test/congestion's doc).
	RateReduceMonitorPeriod time.Duration
}

func (c CongestionOptions) rc() rc.CCConfig {
	return rc.CCConfig{Mode: rc.CCMode(c.Mode), CNPInterval: c.CNPInterval, LineRate: c.LineRateMbps, RPGMinRate: c.MinRateMbps,
		RPGAIRate: c.AIRateMbps, RPGHAIRate: c.HAIRateMbps, RPGTimeReset: c.IncreaseTimer, RPGByteReset: c.ByteCounter, DCETCPRTT: c.AlphaTimer,
		RateReduceMonitorPeriod: c.RateReduceMonitorPeriod}
}
