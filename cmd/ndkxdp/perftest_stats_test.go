package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/cmdline"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestRunStatsAreThisRunsOwn: perf reports what each engine counter
// gained during the run (a daemon's engines count from its start), every
// counter of EngineStats included, and says when the engines are a
// daemon's, shared with its other clients.
func TestRunStatsAreThisRunsOwn(t *testing.T) {
	var before, after ndk.EngineStats
	bv, av := reflect.ValueOf(&before).Elem(), reflect.ValueOf(&after).Elem()
	for i := range bv.NumField() {
		bv.Field(i).SetUint(uint64(100 * (i + 1)))
		av.Field(i).SetUint(uint64(100*(i+1) + i + 1))
	}
	d := cmdline.StatsSince(cmdline.SumStats([]ndk.EngineStats{after}), cmdline.SumStats([]ndk.EngineStats{before}))
	dv := reflect.ValueOf(d)
	for i := range dv.NumField() {
		if got := dv.Field(i).Uint(); got != uint64(i+1) {
			t.Errorf("%s: %d since the run began, want %d", dv.Type().Field(i).Name, got, i+1)
		}
	}
	var w bytes.Buffer
	printRunStats(&w, ndk.EngineStats{RNRReceived: 3, Retransmits: 2}, 0, true)
	if !strings.Contains(w.String(), "during this run, the daemon's engines") || !strings.Contains(w.String(), "retransmission rounds 2") || !strings.Contains(w.String(), "received 3") {
		t.Errorf("through a daemon: %s", w.String())
	}
}
