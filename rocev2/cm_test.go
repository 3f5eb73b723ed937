package rocev2

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

// capturedMAD is a CM MAD found in a capture with the packet that carried it.
type capturedMAD struct {
	frame capturedFrame
	pkt   Packet
	mad   MAD
}

// loadCMMADs returns every MAD sent to QP1 in the captures, decoded.
func loadCMMADs(t *testing.T) []capturedMAD {
	t.Helper()
	var out []capturedMAD
	for _, c := range loadCaptures(t) {
		var p Packet
		if err := Parse(c.data, &p); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if p.BTH.Opcode != UDSendOnly || p.BTH.DestQP != GSIQP {
			continue
		}
		// A GSI MAD: UD to QP1 from QP1 with the well-known Q_Key (ROCEV2.md 3.1).
		if p.DETH.QKey != GSIQKey || p.DETH.SrcQP != GSIQP || len(p.Payload) != MADLen {
			t.Errorf("%v: QP1 datagram with Q_Key %#x, SrcQP %d, %d bytes", c, p.DETH.QKey, p.DETH.SrcQP, len(p.Payload))
			continue
		}
		m, err := DecodeMAD(p.Payload)
		if err != nil {
			t.Errorf("%v: %v", c, err)
			continue
		}
		out = append(out, capturedMAD{frame: c, pkt: p, mad: m})
	}
	return out
}

// TestCapturedMADsRoundTrip decodes every captured CM MAD and re-encodes it
// to the same 256 bytes.
func TestCapturedMADsRoundTrip(t *testing.T) {
	mads := loadCMMADs(t)
	counts := map[AttributeID]int{}
	for _, m := range mads {
		h := m.mad.Header
		if h.BaseVersion != 1 || h.MgmtClass != MgmtClassCM || h.ClassVersion != 2 || h.Method != MethodSend {
			t.Errorf("%v: header %+v", m.frame, h)
		}
		var buf [MADLen]byte
		if err := m.mad.Encode(buf[:]); err != nil {
			t.Fatalf("%v: %v", m.frame, err)
		}
		if !bytes.Equal(buf[:], m.pkt.Payload) {
			t.Errorf("%v: %v re-encodes differently\n got %x\nwant %x", m.frame, h.AttributeID, buf, m.pkt.Payload)
		}
		counts[h.AttributeID]++
	}
	// Four rdma_cm captures with one connection each plus rdma_cm.pcap with two
	// (ROCEV2.md 4): 5 REQ/REP/RTU; rdma_cm.pcap tears down with 3 DREQ/DREP.
	want := map[AttributeID]int{AttrREQ: 5, AttrREP: 5, AttrRTU: 5, AttrDREQ: 6, AttrDREP: 6}
	for a, n := range want {
		if counts[a] != n {
			t.Errorf("%v: %d captured, want %d", a, counts[a], n)
		}
	}
	if len(mads) != 27 {
		t.Errorf("%d CM MADs, want 27", len(mads))
	}
}

// TestCapturedREQ checks the REQs Linux sent against ROCEV2.md 3.3 and
// against the IP and Ethernet headers that carried them.
func TestCapturedREQ(t *testing.T) {
	// Per-capture values: the service port, and the two fields that differ
	// between the kernels of the two labs. ROCEV2.md 3.3 gives 0x13 and 1/1,
	// as the montybeatnik lab (rping-style client) sends; ib_write_bw asks
	// for no READ resources, and the linlinw5 kernel used ack timeout 17.
	type expect struct {
		port       uint16
		ackTimeout uint8
		rdAtomic   uint8
	}
	want := map[string]expect{
		"linlinw5__rdma_ib_tutorial/rdma_cm.pcap":                      {18515, 17, 0}, // perftest default port
		"linlinw5__rdma_ib_tutorial/rping.pcap":                        {7174, 17, 1},  // rping default port
		"montybeatnik__rdma-roce-lab/roce_capture_read-write-ecn.pcap": {7471, 0x13, 1},
		"montybeatnik__rdma-roce-lab/test.pcap":                        {7471, 0x13, 1},
	}
	seen := 0
	for _, m := range loadCMMADs(t) {
		req, ok := m.mad.Message.(*CMReq)
		if !ok {
			continue
		}
		seen++
		w, ok := want[m.frame.file]
		if !ok {
			t.Errorf("%v: REQ in an unexpected capture", m.frame)
			continue
		}
		ps, port, err := ParseServiceID(req.ServiceID)
		if err != nil || ps != PortSpaceTCP || port != w.port || req.ServiceID != 0x0000000001060000|uint64(w.port) {
			t.Errorf("%v: ServiceID %#x = (%v, %d, %v), want RDMA_PS_TCP port %d", m.frame, req.ServiceID, ps, port, err, w.port)
		}
		checks := []struct {
			name      string
			got, want uint64
		}{
			{"Q_Key", uint64(req.LocalQKey), 0},
			{"RemoteCMResponseTimeout", uint64(req.RemoteCMResponseTimeout), 20},
			{"LocalCMResponseTimeout", uint64(req.LocalCMResponseTimeout), 20},
			{"MaxCMRetries", uint64(req.MaxCMRetries), 15},
			{"RetryCount", uint64(req.RetryCount), 7},
			{"RNRRetryCount", uint64(req.RNRRetryCount), 7},
			{"PathMTU", uint64(req.PathMTU), uint64(MTU1024)},
			{"TransportType", uint64(req.TransportType), CMTransportRC},
			{"PKey", uint64(req.PKey), DefaultPKey},
			{"ResponderResources", uint64(req.ResponderResources), uint64(w.rdAtomic)},
			{"InitiatorDepth", uint64(req.InitiatorDepth), uint64(w.rdAtomic)},
			{"LocalAckTimeout", uint64(req.Primary.LocalAckTimeout), uint64(w.ackTimeout)},
			{"LocalLID", uint64(req.Primary.LocalLID), 0xFFFF},
			{"RemoteLID", uint64(req.Primary.RemoteLID), 0xFFFF},
			{"HopLimit", uint64(req.Primary.HopLimit), 64},
			{"SubnetLocal", b2u(req.Primary.SubnetLocal), 0},
			{"LocalCAGUID", req.LocalCAGUID, EUI64(m.pkt.Eth.Src)},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("%v: REQ %s = %#x, want %#x", m.frame, c.name, c.got, c.want)
			}
		}
		// GIDs are the IPv4-mapped addresses of the IP header.
		if req.Primary.LocalGID != GIDFromAddr(m.pkt.IP.Src) || req.Primary.RemoteGID != GIDFromAddr(m.pkt.IP.Dst) {
			t.Errorf("%v: GIDs %v -> %v, IP %v -> %v", m.frame, req.Primary.LocalGID, req.Primary.RemoteGID, m.pkt.IP.Src, m.pkt.IP.Dst)
		}
		if g := req.Primary.LocalGID; g.Addr() != m.pkt.IP.Src || !netip.AddrFrom16(g).Is4In6() {
			t.Errorf("%v: local GID %v is not IPv4-mapped %v", m.frame, g, m.pkt.IP.Src)
		}
		if req.Alternate != (CMPath{}) {
			t.Errorf("%v: alternate path %+v, want zeros", m.frame, req.Alternate)
		}
		// The cma header carries the same addresses as the IP header.
		h, err := DecodeCMAHeader(req.PrivateData[:])
		if err != nil {
			t.Errorf("%v: %v", m.frame, err)
			continue
		}
		if h.Src != m.pkt.IP.Src || h.Dst != m.pkt.IP.Dst || h.SrcPort == 0 {
			t.Errorf("%v: cma header %+v, IP %v -> %v", m.frame, h, m.pkt.IP.Src, m.pkt.IP.Dst)
		}
		if fl := CMAFlowLabel(h.SrcPort, port); req.Primary.FlowLabel != fl {
			t.Errorf("%v: flow label %d, cma hash of ports %d/%d gives %d", m.frame, req.Primary.FlowLabel, h.SrcPort, port, fl)
		}
		var enc [CMAHeaderLen]byte
		if err := h.Encode(enc[:]); err != nil || !bytes.Equal(enc[:], req.PrivateData[:CMAHeaderLen]) {
			t.Errorf("%v: cma header re-encodes to %x, want %x (%v)", m.frame, enc, req.PrivateData[:CMAHeaderLen], err)
		}
	}
	if seen != 5 {
		t.Errorf("%d REQs, want 5", seen)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestCapturedConnection follows the single connection of each rping-style
// capture: the QPNs and starting PSNs exchanged in REQ and REP are the ones
// the data packets then use, and newer rxe derives the UDP source port from
// the REQ's flow label (ROCEV2.md 1.7).
func TestCapturedConnection(t *testing.T) {
	files := map[string]bool{
		"linlinw5__rdma_ib_tutorial/rping.pcap":                        true, // newer rxe: rdma_get_udp_sport
		"montybeatnik__rdma-roce-lab/roce_capture_read-write-ecn.pcap": false,
		"montybeatnik__rdma-roce-lab/test.pcap":                        false,
	}
	mads := loadCMMADs(t)
	frames := loadCaptures(t)
	for file, flowSport := range files {
		var req *CMReq
		var rep *CMRep
		var active, passive netip.Addr
		for _, m := range mads {
			if m.frame.file != file {
				continue
			}
			switch v := m.mad.Message.(type) {
			case *CMReq:
				req, active, passive = v, m.pkt.IP.Src, m.pkt.IP.Dst
			case *CMRep:
				rep = v
			}
		}
		if req == nil || rep == nil {
			t.Errorf("%s: no REQ/REP pair", file)
			continue
		}
		// First RC request each way: it goes to the QPN the peer announced
		// and starts at the PSN the peer's CM message carried (Linux's CM has
		// each side announce the PSN it expects to receive).
		firstFrom := map[netip.Addr]*Packet{}
		for _, c := range frames {
			if c.file != file {
				continue
			}
			p := new(Packet)
			if err := Parse(c.data, p); err != nil {
				t.Fatal(err)
			}
			op := p.BTH.Opcode
			if op.Transport() != TransportRC || op.Info().Response {
				continue
			}
			if firstFrom[p.IP.Src] == nil {
				firstFrom[p.IP.Src] = p
			}
			if flowSport && p.UDP.SrcPort != UDPSourcePort(req.Primary.FlowLabel, 0, 0) {
				t.Errorf("%s: RC sport %d, UDPSourcePort(flow label %d) = %d", file, p.UDP.SrcPort, req.Primary.FlowLabel, UDPSourcePort(req.Primary.FlowLabel, 0, 0))
			}
		}
		a, p := firstFrom[active], firstFrom[passive]
		if a == nil {
			t.Errorf("%s: no request from the active side", file)
			continue
		}
		if a.BTH.DestQP != rep.LocalQPN || a.BTH.PSN != rep.StartingPSN {
			t.Errorf("%s: active side's first request QP %d PSN %d, REP QPN %d PSN %d", file, a.BTH.DestQP, a.BTH.PSN, rep.LocalQPN, rep.StartingPSN)
		}
		if p != nil && (p.BTH.DestQP != req.LocalQPN || p.BTH.PSN != req.StartingPSN) {
			t.Errorf("%s: passive side's first request QP %d PSN %d, REQ QPN %d PSN %d", file, p.BTH.DestQP, p.BTH.PSN, req.LocalQPN, req.StartingPSN)
		}
	}
}

// TestCMMessagesRoundTrip sets every field of every message to a distinct
// nonzero value and checks that it survives encode and decode, and that
// fields land at the documented offsets.
func TestCMMessagesRoundTrip(t *testing.T) {
	path := CMPath{
		LocalLID: 0x1234, RemoteLID: 0x5678, LocalGID: GIDFromAddr(netip.MustParseAddr("198.18.0.1")),
		RemoteGID: GIDFromAddr(netip.MustParseAddr("2001:db8::2")), FlowLabel: 0xABCDE, PacketRate: 0x2A,
		TrafficClass: 0x88, HopLimit: 64, SL: 0xC, SubnetLocal: true, LocalAckTimeout: 0x13,
	}
	req := &CMReq{
		LocalCommID: 0x01020304, VendorID: 0x0A0B0C, ServiceID: ServiceID(PortSpaceTCP, 7174), LocalCAGUID: 0x1122334455667788,
		LocalQKey: 0x99AABBCC, LocalQPN: 0xABCDEF, ResponderResources: 16, LocalEECN: 0x123456, InitiatorDepth: 8,
		RemoteEECN: 0x654321, RemoteCMResponseTimeout: 20, TransportType: CMTransportUC, EndToEndFlowControl: true,
		StartingPSN: 0xFEDCBA, LocalCMResponseTimeout: 21, RetryCount: 6, PKey: 0x7FFF, PathMTU: MTU4096,
		RDCExists: true, RNRRetryCount: 5, MaxCMRetries: 14, SRQ: true, ExtendedTransportType: 3,
		Primary: path, Alternate: path, SAPSupported: true,
	}
	req.Alternate.SL = 3
	for i := range req.PrivateData {
		req.PrivateData[i] = byte(i + 1)
	}
	rep := &CMRep{
		LocalCommID: 1, RemoteCommID: 2, LocalQKey: 3, LocalQPN: 0xABCDEF, VendorID: 0x010203, LocalEECN: 0x111111,
		StartingPSN: 0x222222, ResponderResources: 4, InitiatorDepth: 5, TargetAckDelay: 15, FailoverAccepted: 2,
		EndToEndFlowControl: true, RNRRetryCount: 6, SRQ: true, LocalCAGUID: 0xCAFE,
	}
	rep.PrivateData[195] = 0xEE
	rtu := &CMRtu{LocalCommID: 7, RemoteCommID: 8}
	rtu.PrivateData[223] = 0x77
	dreq := &CMDreq{LocalCommID: 9, RemoteCommID: 10, RemoteQPN: 0x123456}
	dreq.PrivateData[219] = 0x55
	drep := &CMDrep{LocalCommID: 11, RemoteCommID: 12}
	drep.PrivateData[0] = 0x44
	rej := &CMRej{LocalCommID: 13, RemoteCommID: 14, MessageRejected: CMKindREP, RejectedInfoLength: 72, Reason: RejConsumerDefined}
	rej.ARI[71], rej.PrivateData[147] = 0x33, 0x22
	mra := &CMMra{LocalCommID: 15, RemoteCommID: 16, MessageMRAed: CMKindOther, ServiceTimeout: 31}
	mra.PrivateData[221] = 0x11

	for _, msg := range []CMMessage{req, rep, rtu, dreq, drep, rej, mra} {
		m := NewCMMAD(0x0102030405060708, msg)
		var buf [MADLen]byte
		if err := m.Encode(buf[:]); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMAD(buf[:])
		if err != nil {
			t.Fatalf("%v: %v", msg.AttributeID(), err)
		}
		if got.Header != m.Header {
			t.Errorf("%v: header %+v, want %+v", msg.AttributeID(), got.Header, m.Header)
		}
		if !equalMessages(got.Message, msg) {
			t.Errorf("%v: decoded %+v\nwant %+v", msg.AttributeID(), got.Message, msg)
		}
	}

	// Spot-check positions against IBTA tables 106-113, MAD byte = 24 + offset.
	var b [MADLen]byte
	m := NewCMMAD(1, req)
	_ = m.Encode(b[:])
	spots := []struct {
		name string
		off  int
		want byte
	}{
		{"REQ LocalQPN low byte", 24 + 34, 0xEF},
		{"REQ ResponderResources", 24 + 35, 16},
		{"REQ InitiatorDepth", 24 + 39, 8},
		{"REQ RemoteCMResponseTimeout|TransportType|E2E", 24 + 43, 20<<3 | 1<<1 | 1},
		{"REQ LocalCMResponseTimeout|RetryCount", 24 + 47, 21<<3 | 6},
		{"REQ PathMTU|RDC|RNRRetry", 24 + 50, 5<<4 | 8 | 5},
		{"REQ MaxCMRetries|SRQ|ExtTransport", 24 + 51, 14<<4 | 8 | 3},
		{"REQ primary LocalGID ::ffff: marker", 24 + 56 + 10, 0xFF},
		{"REQ primary FlowLabel high byte", 24 + 88, 0xAB},
		{"REQ primary FlowLabel low nibble", 24 + 90, 0xE0},
		{"REQ primary PacketRate", 24 + 91, 0x2A},
		{"REQ primary SL|SubnetLocal", 24 + 94, 0xC<<4 | 8},
		{"REQ primary LocalAckTimeout", 24 + 95, 0x13 << 3},
		{"REQ alternate SL|SubnetLocal", 24 + 138, 3<<4 | 8},
		{"REQ alternate LocalAckTimeout|SAP", 24 + 139, 0x13<<3 | 4},
		{"REQ PrivateData first byte", 24 + 140, 1},
	}
	for _, s := range spots {
		if b[s.off] != s.want {
			t.Errorf("%s: byte %d = %#x, want %#x", s.name, s.off, b[s.off], s.want)
		}
	}
	m = NewCMMAD(1, rep)
	_ = m.Encode(b[:])
	if b[24+26] != 15<<3|2<<1|1 || b[24+27] != 6<<5|0x10 || b[24+15] != 1 || b[24+19] != 2 || b[24+23] != 3 {
		t.Errorf("REP bit fields: % x", b[24+12:24+28])
	}
	m = NewCMMAD(1, rej)
	_ = m.Encode(b[:])
	if b[24+8] != 1<<6 || b[24+9] != 72<<1 || b[24+10] != 0 || b[24+11] != 28 {
		t.Errorf("REJ fields: % x", b[24+8:24+12])
	}
	m = NewCMMAD(1, mra)
	_ = m.Encode(b[:])
	if b[24+8] != 2<<6 || b[24+9] != 31<<3 {
		t.Errorf("MRA fields: % x", b[24+8:24+10])
	}
}

func equalMessages(a, b CMMessage) bool {
	switch x := a.(type) {
	case *CMReq:
		y, ok := b.(*CMReq)
		return ok && *x == *y
	case *CMRep:
		y, ok := b.(*CMRep)
		return ok && *x == *y
	case *CMRtu:
		y, ok := b.(*CMRtu)
		return ok && *x == *y
	case *CMDreq:
		y, ok := b.(*CMDreq)
		return ok && *x == *y
	case *CMDrep:
		y, ok := b.(*CMDrep)
		return ok && *x == *y
	case *CMRej:
		y, ok := b.(*CMRej)
		return ok && *x == *y
	case *CMMra:
		y, ok := b.(*CMMra)
		return ok && *x == *y
	case *CMSIDRReq:
		y, ok := b.(*CMSIDRReq)
		return ok && *x == *y
	case *CMSIDRRep:
		y, ok := b.(*CMSIDRRep)
		return ok && *x == *y
	}
	return false
}

func TestDecodeMADRejects(t *testing.T) {
	good := NewCMMAD(1, &CMRtu{})
	var b [MADLen]byte
	if err := good.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(m []byte)) []byte {
		c := b
		f(c[:])
		return c[:]
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"short", b[:255], ErrMADTruncated},
		{"long", append(b[:], 0), ErrMADTruncated},
		{"base version", mutate(func(m []byte) { m[0] = 2 }), ErrMADVersion},
		{"class", mutate(func(m []byte) { m[1] = 0x03 }), ErrMADClass},
		{"class version", mutate(func(m []byte) { m[2] = 1 }), ErrMADVersion},
		{"attribute", mutate(func(m []byte) { m[17] = byte(AttrLAP) }), ErrMADAttribute},
	}
	for _, c := range cases {
		if _, err := DecodeMAD(c.in); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	var nomsg MAD
	if err := nomsg.Encode(b[:]); !errors.Is(err, ErrMADNoMessage) {
		t.Errorf("encode without message: %v", err)
	}
	if err := good.Encode(b[:100]); err == nil {
		t.Error("encode into a short buffer succeeded")
	}
}

func TestCMAHeader(t *testing.T) {
	v6 := CMAHeader{SrcPort: 40000, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2")}
	var b [CMAHeaderLen]byte
	if err := v6.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	if b[0] != 0 || b[1] != 0x60 || b[2] != 0x9C || b[3] != 0x40 || b[4] != 0x20 || b[35] != 2 {
		t.Errorf("IPv6 layout % x", b)
	}
	if got, err := DecodeCMAHeader(b[:]); err != nil || got != v6 {
		t.Errorf("IPv6 round trip %+v %v", got, err)
	}
	v4 := CMAHeader{SrcPort: 1, Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")}
	if err := v4.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	if b[1] != 0x40 || !bytes.Equal(b[4:16], make([]byte, 12)) || b[19] != 1 || b[35] != 2 {
		t.Errorf("IPv4 layout % x", b)
	}
	if got, err := DecodeCMAHeader(b[:]); err != nil || got != v4 {
		t.Errorf("IPv4 round trip %+v %v", got, err)
	}
	bad := []CMAHeader{
		{Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("2001:db8::2")},
		{},
	}
	for _, h := range bad {
		if err := h.Encode(b[:]); !errors.Is(err, ErrCMAHeader) {
			t.Errorf("encode %+v: %v", h, err)
		}
	}
	good := b
	for name, in := range map[string][]byte{
		"short":      good[:35],
		"version":    append([]byte{1}, good[1:]...),
		"ip version": append([]byte{0, 0x50}, good[2:]...),
	} {
		if _, err := DecodeCMAHeader(in); !errors.Is(err, ErrCMAHeader) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestServiceID(t *testing.T) {
	if got := ServiceID(PortSpaceTCP, 7174); got != 0x0000000001061C06 {
		t.Errorf("ServiceID(TCP, 7174) = %#x", got)
	}
	ps, port, err := ParseServiceID(0x0000000001064853)
	if err != nil || ps != PortSpaceTCP || port != 18515 {
		t.Errorf("ParseServiceID = %v %d %v", ps, port, err)
	}
	for _, sid := range []uint64{0x1000000001060001, 0x0000000001070001, 0} {
		if _, _, err := ParseServiceID(sid); !errors.Is(err, ErrServiceID) {
			t.Errorf("ParseServiceID(%#x) err %v", sid, err)
		}
	}
}

func TestGIDAndEUI64(t *testing.T) {
	g := GIDFromAddr(netip.MustParseAddr("10.1.16.62"))
	if g.String() != "::ffff:10.1.16.62" || g.Addr() != netip.MustParseAddr("10.1.16.62") {
		t.Errorf("GID %v addr %v", g, g.Addr())
	}
	// rxe on MAC 00:50:56:a7:7d:03 sent CA GUID 0x025056fffea77d03 (rdma_cm.pcap frame 1).
	if got := EUI64(MAC{0x00, 0x50, 0x56, 0xa7, 0x7d, 0x03}); got != 0x025056fffea77d03 {
		t.Errorf("EUI64 = %#x", got)
	}
}
