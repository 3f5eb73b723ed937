package main

import (
	"fmt"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// trafficClassConfig is the daemon config's "traffic_class" key: the
// adapter's default traffic class (ndk.Options.TrafficClass) and its
// congestion control (ndk.Options.Congestion), for example
//
//	"traffic_class": {"dscp": 26, "ecn": "ect0", "vlan": true, "vlan_id": 100, "pcp": 3,
//	                  "congestion": "on", "cnp_interval": "50us", "line_rate_mbps": 25000,
//	                  "ai_rate_mbps": 5, "hai_rate_mbps": 50, "increase_timer": "300us",
//	                  "byte_counter": 2097088, "alpha_timer": "55us",
//	                  "rate_reduce_monitor_period": "4us"}
type trafficClassConfig struct {
	DSCP         uint8   `json:"dscp"`
	ECN          string  `json:"ecn"` // "" or "none", "ect0", "ect1"
	VLAN         bool    `json:"vlan"`
	VLANID       uint16  `json:"vlan_id"`
	PCP          uint8   `json:"pcp"`
	Congestion   string  `json:"congestion"`   // "" or "off", "notify", "on"
	CNPInterval  string  `json:"cnp_interval"` // default 50us
	LineRateMbps float64 `json:"line_rate_mbps"`
	// AIRateMbps and HAIRateMbps are DCQCN's increase steps
	// (ndk.CongestionOptions), to scale with a bottleneck slower than
	// 10 Gb/s.
	AIRateMbps  float64 `json:"ai_rate_mbps"`
	HAIRateMbps float64 `json:"hai_rate_mbps"`
	// IncreaseTimer, ByteCounter (bytes) and AlphaTimer are DCQCN's
	// recovery timers (ndk.CongestionOptions), to scale with a round
	// trip longer than microseconds.
	IncreaseTimer string `json:"increase_timer"`
	ByteCounter   uint64 `json:"byte_counter"`
	AlphaTimer    string `json:"alpha_timer"`
	// RateReducePeriod is the least time between two rate cuts of a QP
	// (ndk.CongestionOptions.RateReduceMonitorPeriod).
	RateReducePeriod string `json:"rate_reduce_monitor_period"`
}

// apply puts the key's settings into opts.
func (c *trafficClassConfig) apply(opts *ndk.Options) error {
	if c == nil {
		return nil
	}
	ecn := map[string]ndk.ECN{"": ndk.ECNNotCapable, "none": ndk.ECNNotCapable, "ect0": ndk.ECT0, "ect1": ndk.ECT1}
	e, ok := ecn[c.ECN]
	if !ok {
		return fmt.Errorf("daemon: traffic_class ecn %q: want none, ect0 or ect1", c.ECN)
	}
	if c.DSCP > 63 || c.PCP > 7 || c.VLANID > 4094 || (!c.VLAN && (c.PCP != 0 || c.VLANID != 0)) {
		return fmt.Errorf("daemon: traffic_class: dscp %d (0-63), pcp %d (0-7) and vlan_id %d (0-4094), pcp and vlan_id only with vlan", c.DSCP, c.PCP, c.VLANID)
	}
	opts.TrafficClass = ndk.TrafficClass{DSCP: c.DSCP, ECN: e, VLAN: c.VLAN, VLANID: c.VLANID, PCP: c.PCP}
	modes := map[string]ndk.CongestionMode{"": ndk.CongestionOff, "off": ndk.CongestionOff, "notify": ndk.CongestionNotify, "on": ndk.CongestionOn}
	m, ok := modes[c.Congestion]
	if !ok {
		return fmt.Errorf("daemon: traffic_class congestion %q: want off, notify or on", c.Congestion)
	}
	opts.Congestion = ndk.CongestionOptions{Mode: m, LineRateMbps: c.LineRateMbps, AIRateMbps: c.AIRateMbps, HAIRateMbps: c.HAIRateMbps,
		ByteCounter: c.ByteCounter}
	for _, p := range []struct {
		key, v string
		d      *time.Duration
	}{
		{"cnp_interval", c.CNPInterval, &opts.Congestion.CNPInterval},
		{"increase_timer", c.IncreaseTimer, &opts.Congestion.IncreaseTimer},
		{"alpha_timer", c.AlphaTimer, &opts.Congestion.AlphaTimer},
		{"rate_reduce_monitor_period", c.RateReducePeriod, &opts.Congestion.RateReduceMonitorPeriod},
	} {
		if p.v == "" {
			continue
		}
		d, err := time.ParseDuration(p.v)
		if err != nil || d <= 0 {
			return fmt.Errorf("daemon: traffic_class %s %q: want a positive duration", p.key, p.v)
		}
		*p.d = d
	}
	if c.LineRateMbps < 0 || c.AIRateMbps < 0 || c.HAIRateMbps < 0 {
		return fmt.Errorf("daemon: traffic_class line_rate_mbps %v, ai_rate_mbps %v, hai_rate_mbps %v: a rate is negative", c.LineRateMbps, c.AIRateMbps, c.HAIRateMbps)
	}
	return nil
}
