package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestDaemonConfigTrafficClass: the config's traffic_class key sets the
// adapter's default traffic class and congestion control; values out of
// range are refused, named, before anything touches the system.
func TestDaemonConfigTrafficClass(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "ndkxdp.json")
	body := `{"interface": "lo", "traffic_class": {"dscp": 26, "ecn": "ect0", "vlan": true, "vlan_id": 100, "pcp": 3,
		"congestion": "on", "cnp_interval": "20us", "line_rate_mbps": 25000, "ai_rate_mbps": 0.5, "hai_rate_mbps": 5,
		"increase_timer": "3ms", "byte_counter": 1048576, "alpha_timer": "550us",
		"rate_reduce_monitor_period": "500us"}}`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c := defaultDaemonConfig()
	if err := loadDaemonConfig(cfg, &c); err != nil {
		t.Fatal(err)
	}
	opts, _, _, err := c.resolve(io.Discard)
	want := ndk.TrafficClass{DSCP: 26, ECN: ndk.ECT0, VLAN: true, VLANID: 100, PCP: 3}
	wantCC := ndk.CongestionOptions{Mode: ndk.CongestionOn, CNPInterval: 20 * time.Microsecond, LineRateMbps: 25000, AIRateMbps: 0.5, HAIRateMbps: 5,
		IncreaseTimer: 3 * time.Millisecond, ByteCounter: 1 << 20, AlphaTimer: 550 * time.Microsecond,
		RateReduceMonitorPeriod: 500 * time.Microsecond}
	if err != nil || opts.TrafficClass != want || opts.Congestion != wantCC {
		t.Fatalf("traffic class %+v, congestion %+v, %v; want %+v, %+v", opts.TrafficClass, opts.Congestion, err, want, wantCC)
	}
	for _, tc := range []struct {
		key  trafficClassConfig
		want string
	}{
		{trafficClassConfig{DSCP: 64}, "dscp 64"},
		{trafficClassConfig{ECN: "ce"}, `ecn "ce"`},
		{trafficClassConfig{PCP: 3}, "only with vlan"},
		{trafficClassConfig{Congestion: "dcqcn"}, `congestion "dcqcn"`},
		{trafficClassConfig{CNPInterval: "-1us"}, `cnp_interval "-1us"`},
		{trafficClassConfig{AIRateMbps: -1}, "ai_rate_mbps -1"},
		{trafficClassConfig{IncreaseTimer: "0s"}, `increase_timer "0s"`},
		{trafficClassConfig{AlphaTimer: "soon"}, `alpha_timer "soon"`},
		{trafficClassConfig{RateReducePeriod: "-4us"}, `rate_reduce_monitor_period "-4us"`},
	} {
		c := defaultDaemonConfig()
		c.Interface, c.TrafficClass = "lo", &tc.key
		if _, _, _, err := c.resolve(io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.key, err, tc.want)
		}
	}
}
