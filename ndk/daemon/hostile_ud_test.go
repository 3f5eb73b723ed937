package daemon_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/daemon"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
)

// udQP makes a UD QP for a raw client, as rawQP does an RC one.
func (r *raw) udQP(pd uint32) *rawQP {
	r.t.Helper()
	q, m := r.qpWith(proto.Request{Op: proto.OpCreateQP, PD: pd, Depth: 16, SendDepth: 16, RecvSGE: 1, SendSGE: 1, Inline: 64,
		UD: true, QKey: ndk.RDMAUDPQKey})
	if m.MaxMessage == 0 {
		r.t.Fatalf("create_qp of a UD QP: reply without its datagram size: %+v", m)
	}
	return q
}

// peerUDQP makes an in-process UD QP on B (depth 4, one SGE each way)
// with its CQ, and registers mem for it with flags; all close when the
// test ends.
func (bd *bed) peerUDQP(t *testing.T, mem []byte, flags ndk.MRFlag) (*ndk.QP, *ndk.CQ, *ndk.MR) {
	t.Helper()
	pd, err := bd.b.CreatePD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := bd.b.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateUDQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: 4, InitiatorQueueDepth: 4,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}, ndk.RDMAUDPQKey)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegisterMR(mem, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close(); _ = mr.Deregister(); pd.Close(); cq.Close() })
	return qp, cq, mr
}

// TestHostileUD: a client's UD control requests and SEND records that no
// correct client makes are refused with a status, each record completing
// with the status the in-process post gives inline (a destination without
// address or QPN, no destination, a WRITE on a UD QP, a destination of
// the other address family); the QP goes on sending what is right, and
// the daemon goes on serving.
func TestHostileUD(t *testing.T) {
	bd := newBed(t)
	r := dialRaw(t, bd.sock)
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})

	for _, c := range []struct {
		name string
		req  *proto.Request
		want ndk.Status
	}{
		{"a UD QP on an SRQ", &proto.Request{Op: proto.OpCreateQP, UD: true, PD: pd.H, SRQ: 1, SendDepth: 1}, ndk.StatusNotSupported},
		{"a controlled Q_Key", &proto.Request{Op: proto.OpCreateQP, UD: true, PD: 1, QKey: 0x80000001}, ndk.StatusInvalidParameter},
		{"a PD never given", &proto.Request{Op: proto.OpCreateQP, UD: true, PD: 9999, Depth: 1, SendDepth: 1}, ndk.StatusInvalidHandle},
		{"serve_ud with a PD's handle", &proto.Request{Op: proto.OpServeUD, Addr: "0.0.0.0:7174", QP: pd.H}, ndk.StatusInvalidHandle},
		{"serve_ud of no address", &proto.Request{Op: proto.OpServeUD, Addr: "nowhere", QP: 1}, ndk.StatusInvalidAddress},
		{"resolve_ud of no address", &proto.Request{Op: proto.OpResolveUD, Addr: ""}, ndk.StatusInvalidAddress},
		{"next_hop of no address", &proto.Request{Op: proto.OpNextHop, Addr: "x"}, ndk.StatusInvalidAddress},
		{"ud_answered of no service", &proto.Request{Op: proto.OpUDAnswered, H: pd.H}, ndk.StatusInvalidHandle},
		{"close_ud_service of no service", &proto.Request{Op: proto.OpCloseUDService, H: 12345}, ndk.StatusInvalidHandle},
	} {
		if m, _ := r.call(c.req); ndk.Status(m.Status) != c.want {
			t.Errorf("%s: status %#x (%s), want %v", c.name, m.Status, m.Msg, c.want)
		}
	}

	q := r.udQP(pd.H)
	// B's UD QP, in process, receives what is right.
	mem := make([]byte, 256)
	bq, bcq, mr := bd.peerUDQP(t, mem, ndk.MRFlagAllowLocalWrite)
	sge, _ := mr.SGE(0, 256)
	if err := bq.Receive("r", []ndk.SGE{sge}); err != nil {
		t.Fatal(err)
	}
	to := proto.UDDest{Set: true, IP: bd.b.LocalAddress(), MAC: [6]byte(bd.b.MAC()), QPN: bq.QPN(), QKey: ndk.RDMAUDPQKey}
	v6 := to
	v6.IP = netip.MustParseAddr("2001:2::9")
	noAddr, noQPN := to, to
	noAddr.IP, noQPN.QPN = netip.Addr{}, 0
	inline := uint32(ndk.OpFlagInline)
	for i, c := range []struct {
		name string
		rec  proto.Send
		want ndk.Status
	}{
		{"a destination without address", proto.Send{Op: proto.OpSend, Flags: inline, InlineLen: 4, Dest: noAddr}, ndk.StatusInvalidParameter},
		{"a destination without QPN", proto.Send{Op: proto.OpSend, Flags: inline, InlineLen: 4, Dest: noQPN}, ndk.StatusInvalidParameter},
		{"no destination", proto.Send{Op: proto.OpSend, Flags: inline, InlineLen: 4}, ndk.StatusInvalidParameter},
		{"a WRITE", proto.Send{Op: proto.OpWrite, Flags: inline, InlineLen: 4, RemoteAddr: 1 << 20, RemoteToken: 3}, ndk.StatusNotSupported},
		{"an IPv6 destination from an IPv4 QP", proto.Send{Op: proto.OpSend, Flags: inline, InlineLen: 4, Dest: v6}, ndk.StatusInvalidAddress},
		{"a datagram to B", proto.Send{Op: proto.OpSendImm, Flags: inline, InlineLen: 4, Imm: 0xbeef, Dest: to}, ndk.StatusSuccess},
	} {
		c.rec.Seq = uint64(i)
		copy(c.rec.Inline[:], "ping")
		c.rec.Encode(q.send.Reserve())
		q.send.Publish()
		r.post(q)
		got := q.completion(t, c.name)
		if ndk.Status(got.Status) != c.want || got.Seq != uint64(i) || got.Kind != proto.KindSend {
			t.Errorf("%s: completed %#x seq %d kind %d, want %v seq %d", c.name, got.Status, got.Seq, got.Kind, c.want, i)
		}
	}
	var res [1]ndk.ResultEx
	deadline := time.Now().Add(5 * time.Second)
	for bcq.GetResultsEx(res[:]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("B received nothing")
		}
		time.Sleep(time.Millisecond)
	}
	bd.b.Stats()
	if res[0].Status != ndk.StatusSuccess || res[0].Immediate != 0xbeef || res[0].TypeSpecificCompletionOutput != uint64(q.qpn) ||
		string(mem[ndk.UDGRHSize:ndk.UDGRHSize+4]) != "ping" {
		t.Fatalf("B's receive: %+v, payload %q", res[0], mem[ndk.UDGRHSize:ndk.UDGRHSize+4])
	}
	bd.healthy(t)
}

// TestHostileMulticast: join and leave requests no correct client makes
// are refused with a status (a bad address, a unicast group, another
// session's or no QP, an RC QP, a leave of a group not joined), and a
// session's distinct groups are held to quotas.per_session.groups: its
// QPs' memberships of one group count once, a leave or a QP's close gives
// the group back; the daemon goes on serving.
func TestHostileMulticast(t *testing.T) {
	bd := newBedWith(t, daemon.Config{Quotas: daemon.Quotas{PerSession: daemon.Limits{Groups: 2}}}, 0o600)
	r := dialRaw(t, bd.sock)
	pd, _ := r.ok(&proto.Request{Op: proto.OpCreatePD})
	q1, q2 := r.udQP(pd.H), r.udQP(pd.H)
	rc := r.qp(pd.H)
	join := func(q uint32, g string) *proto.Message {
		m, _ := r.call(&proto.Request{Op: proto.OpJoinMulticast, QP: q, Addr: g})
		return m
	}
	leave := func(q uint32, g string) *proto.Message {
		m, _ := r.call(&proto.Request{Op: proto.OpLeaveMulticast, QP: q, Addr: g})
		return m
	}
	for _, c := range []struct {
		name string
		m    *proto.Message
		want ndk.Status
	}{
		{"no address", join(q1.h, "not-an-address"), ndk.StatusInvalidAddress},
		{"a unicast group", join(q1.h, "198.18.0.9"), ndk.StatusInvalidParameter},
		{"no such QP", join(9999, "239.1.1.1"), ndk.StatusInvalidHandle},
		{"a PD's handle", join(pd.H, "239.1.1.1"), ndk.StatusInvalidHandle},
		{"an RC QP", join(rc.h, "239.1.1.1"), ndk.StatusInvalidDeviceRequest},
		{"leave a group not joined", leave(q1.h, "239.1.1.1"), ndk.StatusInvalidParameter},
	} {
		if ndk.Status(c.m.Status) != c.want {
			t.Errorf("%s: status %#x %s, want %#x", c.name, c.m.Status, c.m.Msg, uint32(c.want))
		}
	}
	for _, c := range []struct {
		q uint32
		g string
	}{{q1.h, "239.1.1.1"}, {q2.h, "239.1.1.1"}, {q1.h, "239.1.1.1"}, {q1.h, "239.1.1.2"}} {
		if m := join(c.q, c.g); m.Status != 0 {
			t.Fatalf("join %s: %#x %s", c.g, m.Status, m.Msg)
		}
	}
	refusedWith(t, join(q2.h, "239.1.1.3"), ndk.StatusQuotaExceeded, "per_session.groups")
	// One member of 239.1.1.1 leaving keeps the group; q1's close gives
	// back 239.1.1.2 and with q2's leave 239.1.1.1 too.
	if m := leave(q1.h, "239.1.1.1"); m.Status != 0 {
		t.Fatalf("leave: %#x %s", m.Status, m.Msg)
	}
	refusedWith(t, join(q2.h, "239.1.1.3"), ndk.StatusQuotaExceeded, "per_session.groups")
	r.ok(&proto.Request{Op: proto.OpCloseQP, H: q1.h})
	if m := join(q2.h, "239.1.1.3"); m.Status != 0 {
		t.Fatalf("join after a QP's close gave its group back: %#x %s", m.Status, m.Msg)
	}
	r.ok(&proto.Request{Op: proto.OpLeaveMulticast, QP: q2.h, Addr: "239.1.1.1"})
	r.ok(&proto.Request{Op: proto.OpJoinMulticast, QP: q2.h, Addr: "ff0e::42"})
	bd.status(t) // the daemon serves on
}
