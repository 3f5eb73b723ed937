package proto

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

type request interface{ Op() string }

var retry, rnr = 7, 3

// requests pins each operation's request on the wire: the typed request,
// the same request as a hand-built Request (what clients before the
// typed requests sent, and what the daemon's hostile tests send), and
// the bytes the typed one encodes to.
var requests = []struct {
	req    request
	legacy Request
	golden string
}{
	{&Hello{Version: Version}, Request{Version: Version}, `{"id":7,"op":"hello","version":` + strconv.Itoa(Version) + `}`},
	{&Arena{Arena: 3, Size: 8192}, Request{Arena: 3, Size: 8192}, `{"id":7,"op":"arena","Arena":3,"Size":8192}`},
	{&Cancel{Target: 5}, Request{Target: 5}, `{"id":7,"op":"cancel","Target":5}`},
	{&Stats{}, Request{}, `{"id":7,"op":"stats"}`},
	{&CreateCQ{Depth: 64}, Request{Depth: 64}, `{"id":7,"op":"create_cq","Depth":64}`},
	{&CloseCQ{H: 2}, Request{H: 2}, `{"id":7,"op":"close_cq","h":2}`},
	{&ResizeCQ{H: 2, Depth: 128}, Request{H: 2, Depth: 128}, `{"id":7,"op":"resize_cq","h":2,"Depth":128}`},
	{&ModerateCQ{H: 2, Depth: 4, Timeout: 1000}, Request{H: 2, Depth: 4, Timeout: 1000}, `{"id":7,"op":"moderate_cq","h":2,"Depth":4,"Timeout":1000}`},
	{&CreatePD{}, Request{}, `{"id":7,"op":"create_pd"}`},
	{&ClosePD{H: 1}, Request{H: 1}, `{"id":7,"op":"close_pd","h":1}`},
	{&Register{PD: 1, Flags: 5, Invalidatable: true, Arena: 3, Off: 64, Len: 4096, VA: 1 << 40},
		Request{PD: 1, Flags: 5, Invalidatable: true, Arena: 3, Off: 64, Len: 4096, VA: 1 << 40},
		`{"id":7,"op":"register","pd":1,"Flags":5,"Invalidatable":true,"Arena":3,"Off":64,"Len":4096,"VA":1099511627776}`},
	{&Deregister{H: 4}, Request{H: 4}, `{"id":7,"op":"deregister","h":4}`},
	{&CreateMW{PD: 1}, Request{PD: 1}, `{"id":7,"op":"create_mw","pd":1}`},
	{&CloseMW{H: 4}, Request{H: 4}, `{"id":7,"op":"close_mw","h":4}`},
	{&InitFastMR{H: 4, PD: 1, Depth: 2, Flags: 1}, Request{H: 4, PD: 1, Depth: 2, Flags: 1}, `{"id":7,"op":"init_fast_mr","h":4,"pd":1,"Depth":2,"Flags":1}`},
	{&InitFastMR{PD: 1, Depth: 2}, Request{PD: 1, Depth: 2}, `{"id":7,"op":"init_fast_mr","pd":1,"Depth":2,"Flags":0}`},
	{&CreateSRQ{PD: 1, Depth: 4, RecvSGE: 1, Threshold: 2}, Request{PD: 1, Depth: 4, RecvSGE: 1, Threshold: 2},
		`{"id":7,"op":"create_srq","pd":1,"Depth":4,"RecvSGE":1,"Threshold":2}`},
	{&ModifySRQ{H: 2, Depth: 8, Threshold: 1}, Request{H: 2, Depth: 8, Threshold: 1}, `{"id":7,"op":"modify_srq","h":2,"Depth":8,"Threshold":1}`},
	{&SRQLen{H: 2}, Request{H: 2}, `{"id":7,"op":"srq_len","h":2}`},
	{&CloseSRQ{H: 2}, Request{H: 2}, `{"id":7,"op":"close_srq","h":2}`},
	{&CreateQP{PD: 1, RecvCQ: 2, SendCQ: 3, SRQ: 4, Depth: 16, SendDepth: 32, RecvSGE: 2, SendSGE: 3, Inline: 64},
		Request{PD: 1, RecvCQ: 2, SendCQ: 3, SRQ: 4, Depth: 16, SendDepth: 32, RecvSGE: 2, SendSGE: 3, Inline: 64},
		`{"id":7,"op":"create_qp","pd":1,"rcq":2,"scq":3,"srq":4,"Depth":16,"SendDepth":32,"RecvSGE":2,"SendSGE":3,"Inline":64}`},
	{&CreateQP{PD: 1, RecvCQ: 2, SendCQ: 3, Depth: 16, SendDepth: 32, RecvSGE: 1, SendSGE: 1, UD: true, QKey: 0x11111111},
		Request{PD: 1, RecvCQ: 2, SendCQ: 3, Depth: 16, SendDepth: 32, RecvSGE: 1, SendSGE: 1, UD: true, QKey: 0x11111111},
		`{"id":7,"op":"create_qp","pd":1,"rcq":2,"scq":3,"Depth":16,"SendDepth":32,"RecvSGE":1,"SendSGE":1,"ud":true,"qkey":286331153}`},
	{&CreateQP{PD: 1, RecvCQ: 2, SendCQ: 3, Depth: 1, SendDepth: 1, UD: true}, Request{PD: 1, RecvCQ: 2, SendCQ: 3, Depth: 1, SendDepth: 1, UD: true},
		`{"id":7,"op":"create_qp","pd":1,"rcq":2,"scq":3,"Depth":1,"SendDepth":1,"ud":true}`},
	{&CloseQP{H: 5}, Request{H: 5}, `{"id":7,"op":"close_qp","h":5}`},
	{&FlushQP{H: 5}, Request{H: 5}, `{"id":7,"op":"flush_qp","h":5}`},
	{&ConnectOOB{H: 5, Deadline: Deadline{Timeout: 9}, Remote: &Endpoint{IP: "198.18.0.2", MAC: "02:00:00:00:00:02", QPN: 17, PSN: 99},
		Opts: &ConnOpts{PathMTU: 1024, InboundReadLimit: 4, OutboundReadLimit: 8, AckTimeoutNs: 5, RetryCount: &retry, RNRRetry: &rnr, MinRNRTimerNs: 6,
			Traffic: &TrafficClass{DSCP: 26, ECN: 1, VLAN: true, VLANID: 12, PCP: 3}}},
		Request{H: 5, Timeout: 9, Remote: &Endpoint{IP: "198.18.0.2", MAC: "02:00:00:00:00:02", QPN: 17, PSN: 99},
			Opts: &ConnOpts{PathMTU: 1024, InboundReadLimit: 4, OutboundReadLimit: 8, AckTimeoutNs: 5, RetryCount: &retry, RNRRetry: &rnr, MinRNRTimerNs: 6,
				Traffic: &TrafficClass{DSCP: 26, ECN: 1, VLAN: true, VLANID: 12, PCP: 3}}},
		`{"id":7,"op":"connect_oob","h":5,"Timeout":9,"Remote":{"ip":"198.18.0.2","mac":"02:00:00:00:00:02","qpn":17,"psn":99},` +
			`"Opts":{"pmtu":1024,"ird":4,"ord":8,"ack_timeout":5,"retry":7,"rnr_retry":3,"min_rnr":6,"traffic":{"dscp":26,"ecn":1,"vlan":true,"vlan_id":12,"pcp":3}}}`},
	{&CreateConnector{}, Request{}, `{"id":7,"op":"create_connector"}`},
	{&Connect{H: 1, QP: 5, SE: 6, Addr: "198.18.0.1:0", Addr2: "198.18.0.2:4000", IRD: 4, ORD: 8, Data: []byte("hi"), Deadline: Deadline{Timeout: 9},
		Opts: &ConnOpts{RetryCount: &retry, RNRRetry: &rnr}},
		Request{H: 1, QP: 5, SE: 6, Addr: "198.18.0.1:0", Addr2: "198.18.0.2:4000", IRD: 4, ORD: 8, Data: []byte("hi"), Timeout: 9,
			Opts: &ConnOpts{RetryCount: &retry, RNRRetry: &rnr}},
		`{"id":7,"op":"connect","h":1,"qp":5,"se":6,"Addr":"198.18.0.1:0","Addr2":"198.18.0.2:4000","IRD":4,"ORD":8,"Data":"aGk=","Timeout":9,"Opts":{"retry":7,"rnr_retry":3}}`},
	{&Connect{H: 1, QP: 5, Addr2: "198.18.0.2:4000"}, Request{H: 1, QP: 5, Addr2: "198.18.0.2:4000"},
		`{"id":7,"op":"connect","h":1,"qp":5,"Addr2":"198.18.0.2:4000","Opts":null}`},
	{&CompleteConnect{H: 1}, Request{H: 1}, `{"id":7,"op":"complete_connect","h":1}`},
	{&Accept{H: 1, QP: 5, IRD: 4, ORD: 8, Data: []byte("hi"), Deadline: Deadline{Timeout: 9}},
		Request{H: 1, QP: 5, IRD: 4, ORD: 8, Data: []byte("hi"), Timeout: 9},
		`{"id":7,"op":"accept","h":1,"qp":5,"IRD":4,"ORD":8,"Data":"aGk=","Timeout":9,"Opts":null}`},
	{&Reject{H: 1, Data: []byte("no")}, Request{H: 1, Data: []byte("no")}, `{"id":7,"op":"reject","h":1,"Data":"bm8="}`},
	{&Disconnect{H: 1, Abortive: true, Deadline: Deadline{Timeout: 9}}, Request{H: 1, Abortive: true, Timeout: 9},
		`{"id":7,"op":"disconnect","h":1,"Timeout":9,"Abortive":true}`},
	{&ConnData{H: 1}, Request{H: 1}, `{"id":7,"op":"conn_data","h":1}`},
	{&CloseConnector{H: 1}, Request{H: 1}, `{"id":7,"op":"close_connector","h":1}`},
	{&CreateListener{}, Request{}, `{"id":7,"op":"create_listener"}`},
	{&Listen{H: 1, Addr: "198.18.0.1:4000"}, Request{H: 1, Addr: "198.18.0.1:4000"}, `{"id":7,"op":"listen","h":1,"Addr":"198.18.0.1:4000"}`},
	{&PauseListener{H: 1, Pause: true}, Request{H: 1, Pause: true}, `{"id":7,"op":"pause_listener","h":1,"Pause":true}`},
	{&CloseListener{H: 1}, Request{H: 1}, `{"id":7,"op":"close_listener","h":1}`},
	{&CreateEndpoint{Addr: "198.18.0.1:0"}, Request{Addr: "198.18.0.1:0"}, `{"id":7,"op":"create_endpoint","Addr":"198.18.0.1:0"}`},
	{&CloseEndpoint{H: 1}, Request{H: 1}, `{"id":7,"op":"close_endpoint","h":1}`},
	{&ServeUD{QP: 5, Addr: "198.18.0.1:7174"}, Request{QP: 5, Addr: "198.18.0.1:7174"}, `{"id":7,"op":"serve_ud","qp":5,"Addr":"198.18.0.1:7174"}`},
	{&UDAnswered{H: 3}, Request{H: 3}, `{"id":7,"op":"ud_answered","h":3}`},
	{&CloseUDService{H: 3}, Request{H: 3}, `{"id":7,"op":"close_ud_service","h":3}`},
	{&ResolveUD{Addr: "198.18.0.2:7174", Deadline: Deadline{Timeout: 9}}, Request{Addr: "198.18.0.2:7174", Timeout: 9},
		`{"id":7,"op":"resolve_ud","Addr":"198.18.0.2:7174","Timeout":9}`},
	{&NextHop{Addr: "2001:2::2"}, Request{Addr: "2001:2::2"}, `{"id":7,"op":"next_hop","Addr":"2001:2::2"}`},
	{&JoinMulticast{QP: 3, Addr: "239.1.2.3"}, Request{QP: 3, Addr: "239.1.2.3"}, `{"id":7,"op":"join_multicast","qp":3,"Addr":"239.1.2.3"}`},
	{&LeaveMulticast{QP: 3, Addr: "ff0e::1"}, Request{QP: 3, Addr: "ff0e::1"}, `{"id":7,"op":"leave_multicast","qp":3,"Addr":"ff0e::1"}`},
	{&AdminStatus{}, Request{}, `{"id":7,"op":"admin_status"}`},
	{&AdminInfo{}, Request{}, `{"id":7,"op":"admin_info"}`},
	{&AdminStats{}, Request{}, `{"id":7,"op":"admin_stats"}`},
	{&AdminQPs{}, Request{}, `{"id":7,"op":"admin_qps"}`},
	{&AdminDump{Len: 128}, Request{Len: 128}, `{"id":7,"op":"admin_dump","Len":128}`},
}

// TestRequestWire: each typed request encodes to its golden bytes; those
// decode to the hand-built Request, and the hand-built Request decodes to
// the typed one: a typed client and a hand-built one say the same.
func TestRequestWire(t *testing.T) {
	for _, c := range requests {
		t.Run(c.req.Op(), func(t *testing.T) {
			b, err := Encode(7, c.req.Op(), c.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.golden {
				t.Fatalf("encoded\n %s\nwant\n %s", b, c.golden)
			}
			want := c.legacy
			want.ID, want.Op = 7, c.req.Op()
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("as a Request: %+v, want %+v", *got, want)
			}
			h, err := DecodeHeader(b)
			if err != nil || h.ID != 7 || h.Op != c.req.Op() || h.Timeout != want.Timeout {
				t.Fatalf("header %+v, %v", h, err)
			}
			old, _ := json.Marshal(&want)
			typed := reflect.New(reflect.TypeOf(c.req).Elem()).Interface()
			if err := json.Unmarshal(old, typed); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(typed, c.req) {
				t.Fatalf("%s decodes to %+v, want %+v", old, typed, c.req)
			}
		})
	}
}

// TestEveryOpTyped: each operation has a typed request in the table
// above, named by its own op.
func TestEveryOpTyped(t *testing.T) {
	ops := []string{OpHello, OpArena, OpCreateCQ, OpCloseCQ, OpResizeCQ, OpModerateCQ, OpCreatePD, OpClosePD, OpRegister,
		OpDeregister, OpCreateQP, OpCloseQP, OpFlushQP, OpConnectOOB, OpCreateConnector, OpConnect, OpCompleteConnect,
		OpAccept, OpReject, OpDisconnect, OpConnData, OpCloseConnector, OpCreateListener, OpListen, OpPauseListener,
		OpCloseListener, OpCreateEndpoint, OpCloseEndpoint, OpStats, OpCancel, OpCreateSRQ, OpModifySRQ, OpSRQLen,
		OpCloseSRQ, OpCreateMW, OpCloseMW, OpInitFastMR, OpAdminStatus, OpAdminInfo, OpAdminStats, OpAdminQPs, OpAdminDump,
		OpServeUD, OpUDAnswered, OpCloseUDService, OpResolveUD, OpNextHop,
		OpJoinMulticast, OpLeaveMulticast}
	have := map[string]bool{}
	for _, c := range requests {
		if !strings.Contains(c.golden, `"op":"`+c.req.Op()+`"`) {
			t.Errorf("%T: golden %s names another op", c.req, c.golden)
		}
		have[c.req.Op()] = true
	}
	for _, op := range ops {
		if !have[op] {
			t.Errorf("no typed request for %q", op)
		}
	}
	if len(have) != len(ops) {
		t.Errorf("%d typed ops, %d op names", len(have), len(ops))
	}
}

// replies pins each reply type on the wire: byte for byte what the daemon
// sent as a Message before the typed replies.
var replies = []struct {
	rep    any
	legacy Message
	golden string
}{
	{nil, Message{}, `{"id":7}`},
	{&None{}, Message{}, `{"id":7}`},
	{&HelloReply{Version: Version, Addr: "198.18.0.1", MAC: "02:00:00:00:00:01", PathMTU: 1024, Raw: json.RawMessage(`{"x":1}`), Seg: &Segment{Size: 4096}},
		Message{Version: Version, Addr: "198.18.0.1", MAC: "02:00:00:00:00:01", PathMTU: 1024, Raw: json.RawMessage(`{"x":1}`), Seg: &Segment{Size: 4096}},
		`{"id":7,"Seg":{"size":4096},"Addr":"198.18.0.1","MAC":"02:00:00:00:00:01","PathMTU":1024,"Version":` + strconv.Itoa(Version) + `,"Raw":{"x":1}}`},
	{&StatsReply{Raw: json.RawMessage(`{"a":1}`), Raw2: json.RawMessage(`{"b":2}`)}, Message{Raw: json.RawMessage(`{"a":1}`), Raw2: json.RawMessage(`{"b":2}`)},
		`{"id":7,"Raw":{"a":1},"Raw2":{"b":2}}`},
	{&CQReply{H: 2, Seg: &Segment{Size: 8192, Slots: 64}}, Message{H: 2, Seg: &Segment{Size: 8192, Slots: 64}}, `{"id":7,"H":2,"Seg":{"size":8192,"slots":64}}`},
	{&ResizeCQReply{Seg: &Segment{Size: 8192, Slots: 128}}, Message{Seg: &Segment{Size: 8192, Slots: 128}}, `{"id":7,"Seg":{"size":8192,"slots":128}}`},
	{&Handle{H: 3}, Message{H: 3}, `{"id":7,"H":3}`},
	{&TokensReply{H: 3, Local: 0x100, Remote: 0x200, KeyBits: 8}, Message{H: 3, Local: 0x100, Remote: 0x200, KeyBits: 8},
		`{"id":7,"H":3,"Local":256,"Remote":512,"KeyBits":8}`},
	{&SRQLenReply{Depth: 3}, Message{Depth: 3}, `{"id":7,"Depth":3}`},
	{&QPReply{H: 5, QPN: 17, PSN: 99, Queue: 1, Slot: 2, Seg: &Segment{Size: 65536, SendSlots: 32, RecvSlots: 16}},
		Message{H: 5, QPN: 17, PSN: 99, Queue: 1, Slot: 2, Seg: &Segment{Size: 65536, SendSlots: 32, RecvSlots: 16}},
		`{"id":7,"H":5,"Seg":{"size":65536,"send":32,"recv":16},"QPN":17,"PSN":99,"Slot":2,"Queue":1}`},
	{&QPReply{H: 5, QPN: 17, PSN: 99, Queue: 1, Slot: 2, Seg: &Segment{Size: 65536, SendSlots: 32, RecvSlots: 16}, MaxMessage: 1024},
		Message{H: 5, QPN: 17, PSN: 99, Queue: 1, Slot: 2, Seg: &Segment{Size: 65536, SendSlots: 32, RecvSlots: 16}, MaxMessage: 1024},
		`{"id":7,"H":5,"Seg":{"size":65536,"send":32,"recv":16},"QPN":17,"PSN":99,"Slot":2,"Queue":1,"max_message":1024}`},
	{&UDAnsweredReply{Answered: 4}, Message{Answered: 4}, `{"id":7,"answered":4}`},
	{&UDDestReply{Addr: "198.18.0.2", MAC: "02:00:00:00:00:02", QPN: 17, QKey: 0x11111111},
		Message{Addr: "198.18.0.2", MAC: "02:00:00:00:00:02", QPN: 17, QKey: 0x11111111},
		`{"id":7,"QPN":17,"Addr":"198.18.0.2","MAC":"02:00:00:00:00:02","qkey":286331153}`},
	{&UDDestReply{MAC: "02:00:00:00:00:02"}, Message{MAC: "02:00:00:00:00:02"}, `{"id":7,"MAC":"02:00:00:00:00:02"}`},
	{&ConnReply{H: 1, IRD: 4, ORD: 8, Data: []byte("hi"), Addr: "198.18.0.1:4000", Addr2: "198.18.0.2:5000"},
		Message{H: 1, IRD: 4, ORD: 8, Data: []byte("hi"), Addr: "198.18.0.1:4000", Addr2: "198.18.0.2:5000"},
		`{"id":7,"H":1,"IRD":4,"ORD":8,"Data":"aGk=","Addr":"198.18.0.1:4000","Addr2":"198.18.0.2:5000"}`},
	{&AddrReply{H: 1, Addr: "198.18.0.1:4000"}, Message{H: 1, Addr: "198.18.0.1:4000"}, `{"id":7,"H":1,"Addr":"198.18.0.1:4000"}`},
	{&Report{Raw: json.RawMessage(`[]`)}, Message{Raw: json.RawMessage(`[]`)}, `{"id":7,"Raw":[]}`},
}

// TestReplyWire: each typed reply encodes to the bytes the same answer
// had as a Message, and reads back from them.
func TestReplyWire(t *testing.T) {
	for _, c := range replies {
		t.Run(fmt.Sprintf("%T", c.rep), func(t *testing.T) {
			b, err := EncodeReply(7, c.rep)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.golden {
				t.Fatalf("encoded\n %s\nwant\n %s", b, c.golden)
			}
			want := c.legacy
			want.ID = 7
			old, _ := json.Marshal(&want)
			if string(old) != c.golden {
				t.Fatalf("as a Message\n %s\nwant\n %s", old, c.golden)
			}
			if c.rep == nil {
				return
			}
			back := reflect.New(reflect.TypeOf(c.rep).Elem()).Interface()
			if err := json.Unmarshal(old, back); err != nil || !reflect.DeepEqual(back, c.rep) {
				t.Fatalf("read back %+v (%v), want %+v", back, err, c.rep)
			}
		})
	}
}

// TestEncodeRefusesNonObject: a body that is not a JSON object is an
// error, not a broken message.
func TestEncodeRefusesNonObject(t *testing.T) {
	if b, err := Encode(1, "x", 5); err == nil {
		t.Fatalf("encoded %s", b)
	}
}

// TestDecodeHeader: a message that is not JSON, or names no op, is
// refused.
func TestDecodeHeader(t *testing.T) {
	for _, b := range []string{`{{{`, `{"id":1}`, `[]`} {
		if h, err := DecodeHeader([]byte(b)); err == nil {
			t.Errorf("%s: decoded %+v", b, h)
		}
	}
}

// FuzzDecodeHeader: any bytes decode to a header naming an op, or to an
// error; never a panic, and a header read is the one an Encode wrote.
func FuzzDecodeHeader(f *testing.F) {
	for _, c := range requests {
		f.Add([]byte(c.golden))
	}
	f.Add([]byte(`{"id":1}`))
	f.Add([]byte(`{"op":"x","Timeout":"y"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			return
		}
		if h.Op == "" {
			t.Fatalf("%q: header without op", b)
		}
		again, err := Encode(h.ID, h.Op, &Deadline{Timeout: h.Timeout})
		if err != nil {
			t.Fatal(err)
		}
		if h2, err := DecodeHeader(again); err != nil || h2 != h {
			t.Fatalf("%+v encodes to %s, read back as %+v (%v)", h, again, h2, err)
		}
	})
}
