package daemon

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
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

// TestDumpEventsFitOneMessage: a batch of frames of any snap length, as
// sendFrames cuts it, encodes below proto.MaxMessage.
func TestDumpEventsFitOneMessage(t *testing.T) {
	for _, snap := range []int{64, DefaultSnap, 1500, MaxSnap} {
		var out []DumpFrame
		size := 0
		f := port.TapFrame{Time: time.Now(), Queue: 63, Out: true, Length: 9000, Data: make([]byte, snap)}
		for len(out) == 0 || size+encodedSize(f) <= dumpBatch {
			out = append(out, DumpFrame{Time: f.Time.UnixNano(), Queue: f.Queue, Out: f.Out, Length: f.Length, Data: f.Data})
			size += encodedSize(f)
		}
		raw, _ := json.Marshal(out)
		m, _ := json.Marshal(&proto.Message{Ev: EvFrames, Raw: raw, Raw2: json.RawMessage(`{"seen":18446744073709551615,"dropped":18446744073709551615}`)})
		if len(m) > proto.MaxMessage {
			t.Errorf("snap %d: %d frames make a %d-byte event, over %d", snap, len(out), len(m), proto.MaxMessage)
		}
	}
}
