package daemon

import (
	"reflect"
	"testing"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// TestCounterNames: every engine counter gets a distinct snake-case name,
// the names JSON and the metrics use.
func TestCounterNames(t *testing.T) {
	for in, want := range map[string]string{
		"FramesIn": "frames_in", "NAKsSent": "naks_sent", "RNRReceived": "rnr_received", "RNRRetryExceeded": "rnr_retry_exceeded",
		"BadICRC": "bad_icrc", "NotRC": "not_rc", "BadPKey": "bad_pkey", "CNPs": "cnps", "UnknownQP": "unknown_qp",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%s) = %s, want %s", in, got, want)
		}
	}
	m := CounterMap(ndk.EngineStats{FramesIn: 7, RetryExceeded: 2})
	if m["frames_in"] != 7 || m["retry_exceeded"] != 2 {
		t.Errorf("CounterMap: %v", m)
	}
	if n, fields := len(m), reflect.TypeOf(ndk.EngineStats{}).NumField(); n != fields {
		t.Errorf("CounterMap names %d counters of %d fields: two share a name", n, fields)
	}
}

func TestMetricsAddress(t *testing.T) {
	for in, want := range map[string]string{
		":9464": "127.0.0.1:9464", "9464": "127.0.0.1:9464", "0.0.0.0:9464": "0.0.0.0:9464", "[::1]:1": "[::1]:1",
	} {
		if got := MetricsAddress(in); got != want {
			t.Errorf("MetricsAddress(%q) = %q, want %q", in, got, want)
		}
	}
}
