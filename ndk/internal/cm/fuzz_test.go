package cm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// machine is a Manager driven by a fuzzer: MADs from a peer that does
// what the input says, the consumer's calls on what the Manager handed it,
// and the fake clock, all in the order the input gives.
type machine struct {
	t       *testing.T
	clk     *cmtest.Clock
	link    *cmtest.Link
	m       *cm.Manager
	ls      *listener
	backlog int
	// The Manager's connectors the input may act on: those its listener
	// handed over and those it made to connect.
	conns []*cm.Connector
	qpn   uint32
	// Communication IDs the Manager used in what it sent, so that the
	// peer can answer them, and how many frames were scanned for them.
	ids     []uint32
	scanned int
}

const fuzzPort = 8500

func newMachine(t *testing.T) *machine {
	clk := cmtest.NewClock()
	link := cmtest.NewLink(clk, cmtest.Faults{})
	p := cm.DefaultParams()
	p.ListenBacklog = 4
	p.CMResponseTimeout = 12 // 16 ms: retries and time-waits end within the run
	p.MaxCMRetries = 2
	p.TimeWait = 50 * time.Millisecond
	m, err := cm.New(cm.Config{Transport: link.B, Clock: clk, CAGUID: link.B.GUID(), Params: p, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	link.B.Attach(m) // A has no Manager: what B sends is only recorded
	x := &machine{t: t, clk: clk, link: link, m: m, backlog: p.ListenBacklog, qpn: 1000}
	x.ls = listen(t, m, netip.AddrPortFrom(ipB, fuzzPort))
	return x
}

// fromPeer is the path back to the peer, as CheckGSI gives it.
func (x *machine) fromPeer() cm.PathInfo { return x.link.B.PathTo(ipB, ipA) }

func (x *machine) deliver(msg rocev2.CMMessage, tid uint64) {
	mad := rocev2.NewCMMAD(tid, msg)
	b := make([]byte, rocev2.MADLen)
	if err := mad.Encode(b); err != nil {
		x.t.Fatal(err)
	}
	x.m.HandleMAD(x.fromPeer(), rocev2.GSIQP, b)
}

// scan collects the communication IDs in what the Manager sent since the
// last scan.
func (x *machine) scan() {
	frames := x.link.B.Frames()
	for _, f := range frames[x.scanned:] {
		var pkt rocev2.Packet
		_, _, raw, err := cm.ParseGSI(f, &pkt)
		if err != nil {
			x.t.Fatalf("the Manager sent a frame that is not a GSI MAD: %v", err)
		}
		mad, err := rocev2.DecodeMAD(raw)
		if err != nil {
			x.t.Fatalf("the Manager sent a MAD that does not decode: %v", err)
		}
		var id uint32
		switch m := mad.Message.(type) {
		case *rocev2.CMReq:
			id = m.LocalCommID
		case *rocev2.CMRep:
			id = m.LocalCommID
		case *rocev2.CMRej:
			id = m.LocalCommID
		case *rocev2.CMMra:
			id = m.LocalCommID
		case *rocev2.CMDreq:
			id = m.LocalCommID
		case *rocev2.CMDrep:
			id = m.LocalCommID
		case *rocev2.CMRtu:
			id = m.LocalCommID
		}
		if id != 0 && len(x.ids) < 64 {
			x.ids = append(x.ids, id)
		}
	}
	x.scanned = len(frames)
}

// input reads the fuzzer's bytes; past the end it reads zeros.
type input struct{ b []byte }

func (in *input) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	v := in.b[0]
	in.b = in.b[1:]
	return v
}

func (in *input) u32() uint32 {
	return uint32(in.byte()) | uint32(in.byte())<<8 | uint32(in.byte())<<16 | uint32(in.byte())<<24
}

// ourID picks one of the Manager's communication IDs, or a made-up one.
func (x *machine) ourID(in *input) uint32 {
	k := int(in.byte())
	if k < 224 && len(x.ids) > 0 {
		return x.ids[k%len(x.ids)]
	}
	return in.u32()
}

// peerID picks one of eight communication IDs of the peer's.
func peerID(in *input) uint32 { return 0x7000_0000 + uint32(in.byte()%8) }

func (x *machine) conn(in *input) *cm.Connector {
	all := append(x.lsConns(), x.conns...)
	if len(all) == 0 {
		return nil
	}
	return all[int(in.byte())%len(all)]
}

func (x *machine) lsConns() []*cm.Connector {
	x.ls.mu.Lock()
	defer x.ls.mu.Unlock()
	return append([]*cm.Connector(nil), x.ls.conns...)
}

// step runs one operation of the input.
func (x *machine) step(in *input) {
	op := in.byte()
	switch op % 12 {
	case 0: // REQ, maybe for another port, MTU or transport, or with a bad rdma_cm header
		port := uint16(fuzzPort)
		if in.byte()&7 == 0 {
			port++
		}
		b := rawREQ(x.link.A.GUID(), peerID(in), 0x200+uint32(in.byte()%8), netip.AddrPortFrom(ipA, 40000), netip.AddrPortFrom(ipB, port))
		switch v := in.byte(); v % 8 {
		case 1:
			b[rocev2.MADHeaderLen+50] = b[rocev2.MADHeaderLen+50]&0x0F | v&0xF0 // path MTU
		case 2:
			b[rocev2.MADHeaderLen+43] ^= v & 7 // transport type, end-to-end flow control
		case 3:
			b[rocev2.MADHeaderLen+140+int(in.byte())%rocev2.CMAHeaderLen] ^= in.byte() // rdma_cm header
		}
		x.m.HandleMAD(x.fromPeer(), rocev2.GSIQP, b)
	case 1:
		x.deliver(&rocev2.CMRep{LocalCommID: peerID(in), RemoteCommID: x.ourID(in), LocalQPN: 0x300 + uint32(in.byte()%8),
			StartingPSN: rocev2.PSN(in.u32()) & rocev2.PSNMask, ResponderResources: in.byte() % 32, InitiatorDepth: in.byte() % 32,
			RNRRetryCount: in.byte() % 8, LocalCAGUID: x.link.A.GUID()}, uint64(in.byte()))
	case 2:
		x.deliver(&rocev2.CMRtu{LocalCommID: peerID(in), RemoteCommID: x.ourID(in)}, uint64(in.byte()))
	case 3:
		x.deliver(&rocev2.CMRej{LocalCommID: peerID(in), RemoteCommID: x.ourID(in), MessageRejected: rocev2.CMMessageKind(in.byte() % 4),
			Reason: rocev2.RejectReason(in.byte() % 40)}, uint64(in.byte()))
	case 4:
		x.deliver(&rocev2.CMDreq{LocalCommID: peerID(in), RemoteCommID: x.ourID(in), RemoteQPN: x.qpn - uint32(in.byte()%8)}, uint64(in.byte()))
	case 5:
		x.deliver(&rocev2.CMDrep{LocalCommID: peerID(in), RemoteCommID: x.ourID(in)}, uint64(in.byte()))
	case 6:
		x.deliver(&rocev2.CMMra{LocalCommID: peerID(in), RemoteCommID: x.ourID(in), MessageMRAed: rocev2.CMMessageKind(in.byte() % 4),
			ServiceTimeout: in.byte() % 32}, uint64(in.byte()))
	case 7: // raw bytes, with a CM header often enough to reach the decoder
		b := make([]byte, rocev2.MADLen)
		for i := range b {
			b[i] = in.byte()
		}
		if b[0]&1 == 0 {
			b[0], b[1], b[2], b[3] = rocev2.MADBaseVersion, rocev2.MgmtClassCM, rocev2.CMClassVersion, rocev2.MethodSend
		}
		x.m.HandleMAD(x.fromPeer(), rocev2.GSIQP, b)
	case 8: // the consumer accepts, rejects, disconnects, completes or closes
		c := x.conn(in)
		if c == nil {
			return
		}
		switch in.byte() % 5 {
		case 0:
			x.qpn++
			_ = c.Accept(cmtest.NewQP(x.qpn, rocev2.PSN(x.qpn)), cm.AcceptParams{InboundReadLimit: 4, OutboundReadLimit: 4}, nil, func(error) {})
		case 1:
			_ = c.Reject([]byte("no"))
		case 2:
			_ = c.Disconnect(func(error) {})
		case 3:
			_ = c.CompleteConnect(nil)
		case 4:
			c.Close(nil)
		}
	case 9: // the consumer connects to the peer
		if len(x.conns) >= 8 {
			return
		}
		c := x.m.NewConnector()
		x.qpn++
		if c.Connect(cmtest.NewQP(x.qpn, 0), x.link.B.PathTo(ipB, ipA), netip.AddrPort{}, netip.AddrPortFrom(ipA, 9000+uint16(in.byte()%2)),
			cm.ConnectParams{InboundReadLimit: 4, OutboundReadLimit: 4}, func(error) {}) == nil {
			x.conns = append(x.conns, c)
		}
	case 10: // the first packet on a QP of ours
		x.m.CommEstablished(x.qpn - uint32(in.byte()%8))
	case 11:
		x.clk.Advance(time.Duration(in.byte()) * time.Millisecond)
	}
	x.scan()
	if s := x.m.Stats(); s.HalfOpen > x.backlog {
		x.t.Fatalf("%d half-open connections, backlog %d", s.HalfOpen, x.backlog)
	}
}

// finish closes everything the consumer holds and lets the clock run: no
// connection state may outlive its retries and time-wait.
func (x *machine) finish() {
	for _, c := range append(x.lsConns(), x.conns...) {
		c.Close(nil)
	}
	x.ls.l.Close(nil)
	if !x.clk.RunUntil(func() bool { return x.m.Stats().Connections == 0 }, time.Hour) {
		x.t.Fatalf("%d connections left an hour after everything closed", x.m.Stats().Connections)
	}
}

// fuzzSeeds are inputs that walk the state machines through whole
// exchanges (TestFuzzSeeds checks that they do): a passive connection
// (REQ, accept, RTU, the peer's DREQ), an active one (connect, REP,
// complete, the peer's DREQ), and a REQ whose REP the peer rejects.
func fuzzSeeds() [][]byte {
	seq := func(ops ...[]byte) []byte {
		var b []byte
		for _, o := range ops {
			b = append(b, o...)
		}
		return b
	}
	req := []byte{0, 1, 0, 0, 0}  // REQ: port 8500, peer ID 0, QP 0x200, unaltered
	rtu := []byte{2, 0, 0, 0}     // RTU answering the Manager's first ID
	dreq := []byte{4, 0, 0, 0, 0} // DREQ for it
	accept := []byte{8, 0, 0}     // accept the first connector
	complete := []byte{8, 0, 3}   // complete it
	wait := []byte{11, 200}       // 200 ms
	rep := []byte{1, 0, 0, 0, 0, 0, 0, 0, 4, 4, 7, 0}
	return [][]byte{
		seq(req, accept, rtu, dreq, wait),
		seq([]byte{9, 0}, rep, complete, dreq, wait),
		seq(req, accept, []byte{3, 0, 0, 1, 28, 0}, wait),
	}
}

// FuzzManagerMADs feeds a Manager sequences of MADs (REQ, REP, RTU, REJ,
// DREQ, DREP, MRA and raw bytes, with communication IDs taken from what
// it sent so they reach its state machines), interleaved with the
// consumer's calls and the clock. The Manager must not panic or send a
// malformed MAD, must hold at most its backlog of half-open connections,
// and must end every connection once everything is closed.
func FuzzManagerMADs(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	var many []byte
	for i := range 12 {
		many = append(many, 0, 1, byte(i), byte(i), 0)
	}
	f.Add(many)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		x := newMachine(t)
		in := &input{b: data}
		for len(in.b) > 0 {
			x.step(in)
		}
		x.finish()
	})
}

// TestFuzzSeeds checks that the seeds do what fuzzSeeds says, so that the
// fuzzer starts from inputs that reach every state.
func TestFuzzSeeds(t *testing.T) {
	run := func(data []byte) cm.Stats {
		x := newMachine(t)
		in := &input{b: data}
		for len(in.b) > 0 {
			x.step(in)
		}
		s := x.m.Stats()
		x.finish()
		return s
	}
	seeds := fuzzSeeds()
	if s := run(seeds[0]); s.Sent[rocev2.AttrREP] != 1 || s.Received[rocev2.AttrRTU] != 1 || s.Sent[rocev2.AttrDREP] != 1 {
		t.Errorf("passive seed: sent %v, received %v", s.Sent, s.Received)
	}
	if s := run(seeds[1]); s.Sent[rocev2.AttrREQ] != 1 || s.Sent[rocev2.AttrRTU] != 1 || s.Sent[rocev2.AttrDREP] != 1 {
		t.Errorf("active seed: sent %v, received %v", s.Sent, s.Received)
	}
	if s := run(seeds[2]); s.Received[rocev2.AttrREJ] != 1 || s.Unmatched != 0 || s.HalfOpen != 0 {
		t.Errorf("rejected seed: %+v", s)
	}
}
