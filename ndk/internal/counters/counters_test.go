package counters

import (
	"reflect"
	"slices"
	"testing"
)

// TestNames: the counters keep the names operators' dashboards and
// scripts know (ndkxdp stats -j keys, ndkxdp_engine_<name>_total and
// ndkxdp_qp_<name>_total), in declaration order.
func TestNames(t *testing.T) {
	engine := []string{"frames_in", "frames_out", "malformed", "bad_icrc", "not_rc", "unknown_qp", "not_connected",
		"wrong_source", "bad_pkey", "stale", "duplicates", "out_of_seq", "naks_sent", "rnr_sent", "access_violations",
		"access_limited", "atomics", "atomic_replays", "retransmits", "timeouts", "naks_received", "rnr_received",
		"completions", "tx_full", "tx_errors", "rx_errors", "encode_errors", "sleeps", "slow_yields", "consumer_turns", "forwarded_out",
		"forwarded_in", "forward_drops", "cnps", "retry_exceeded", "rnr_retry_exceeded", "local_access_errors",
		"remote_access_errors", "sequence_errors", "bad_syndromes", "wrong_destination", "replays_deferred"}
	qp := []string{"frames_in", "frames_out", "retransmits", "ack_timeouts", "naks_sent", "naks_received",
		"rnr_naks_sent", "rnr_naks_received", "duplicate_requests", "out_of_sequence"}
	for _, tc := range []struct {
		name  string
		table []Counter
		want  []string
	}{{"engine", EngineCounters, engine}, {"qp", QPCounters, qp}} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range tc.table {
				got = append(got, c.Name)
			}
			// A counter added at the end keeps every name before it.
			if len(got) < len(tc.want) || !slices.Equal(got[:len(tc.want)], tc.want) {
				t.Errorf("names\n got %q\nwant %q first", got, tc.want)
			}
		})
	}
}

// TestAllAddSnapshot: All yields each field under its own counter, and
// Add and Snapshot cover every field.
func TestAllAddSnapshot(t *testing.T) {
	var a, b Engine
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		va.Field(i).SetUint(uint64(i + 1))
		vb.Field(i).SetUint(uint64(100 * (i + 1)))
	}
	i := 0
	for c, v := range a.All() {
		if c != EngineCounters[i] || v != uint64(i+1) {
			t.Fatalf("All's %dth: %v = %d, want %v = %d", i, c, v, EngineCounters[i], i+1)
		}
		i++
	}
	if i != len(EngineCounters) {
		t.Fatalf("All yielded %d counters of %d", i, len(EngineCounters))
	}
	a.Add(b)
	s := a.Snapshot()
	for i := range va.NumField() {
		if got := reflect.ValueOf(s).Field(i).Uint(); got != uint64(101*(i+1)) {
			t.Fatalf("Engine.%s after Add and Snapshot = %d, want %d", va.Type().Field(i).Name, got, 101*(i+1))
		}
	}

	var q, r QP
	r.FramesIn, r.OutOfSeq = 2, 3
	q.Add(r)
	q.Add(r)
	got := map[string]uint64{}
	for c, v := range q.All() {
		got[c.Name] = v
	}
	if got["frames_in"] != 4 || got["out_of_sequence"] != 6 || len(got) != len(QPCounters) {
		t.Errorf("QP after two Adds: %v", got)
	}
}

// TestTags: every counter has a unit and a help sentence (table panics
// otherwise, when the package starts).
func TestTags(t *testing.T) {
	for _, c := range append(slices.Clone(EngineCounters), QPCounters...) {
		if c.Unit == "" || len(c.Help) < 10 {
			t.Errorf("%s: unit %q, help %q", c.Name, c.Unit, c.Help)
		}
	}
}
