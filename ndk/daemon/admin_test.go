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

// TestCounterNames: every engine counter has a distinct snake-case name,
// the names JSON and the metrics use, and they stay as operators know
// them.
func TestCounterNames(t *testing.T) {
	m := CounterMap(ndk.EngineStats{FramesIn: 7, NAKsSent: 1, RNRReceived: 2, RNRRetryExceeded: 3, BadICRC: 4,
		NotRC: 5, BadPKey: 6, CNPs: 8, UnknownQP: 9, RetryExceeded: 10})
	for name, want := range map[string]uint64{
		"frames_in": 7, "naks_sent": 1, "rnr_received": 2, "rnr_retry_exceeded": 3, "bad_icrc": 4,
		"not_rc": 5, "bad_pkey": 6, "cnps": 8, "unknown_qp": 9, "retry_exceeded": 10,
	} {
		if m[name] != want {
			t.Errorf("CounterMap[%s] = %d, want %d: %v", name, m[name], want, m)
		}
	}
	if n, fields := len(m), reflect.TypeOf(ndk.EngineStats{}).NumField(); n != fields {
		t.Errorf("CounterMap names %d counters of %d fields: two share a name", n, fields)
	}
}

// TestQPJSON: a QP's row keeps its keys, in their order, with each
// counter under its name.
func TestQPJSON(t *testing.T) {
	q := QP{QPN: 5, Type: "UC", State: "RTS", Outstanding: 1, PID: 9}
	q.FramesIn, q.FramesOut, q.Retransmits, q.Timeouts, q.NAKsSent = 1, 2, 3, 4, 5
	q.NAKsReceived, q.RNRSent, q.RNRReceived, q.Duplicates, q.OutOfSeq = 6, 7, 8, 9, 10
	b, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"qpn":5,"queue":0,"type":"UC","state":"RTS","sq_psn":0,"unacked_psn":0,"rq_psn":0,"outstanding":1,"reads_out":0,` +
		`"frames_in":1,"frames_out":2,"retransmits":3,"ack_timeouts":4,"naks_sent":5,"naks_received":6,` +
		`"rnr_naks_sent":7,"rnr_naks_received":8,"duplicate_requests":9,"out_of_sequence":10,"pid":9}`
	if string(b) != want {
		t.Errorf("QP JSON\n got %s\nwant %s", b, want)
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
