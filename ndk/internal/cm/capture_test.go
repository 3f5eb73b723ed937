package cm_test

import (
	"math/bits"
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/ndk/internal/cm/cmtest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// captureDir holds the public captures, read in place from the repository
// root's sibling directory (never copied into the project).
const captureDir = "../../../../shared/testdata/pcaps"

// cmCaptures are the captures of complete rdma_cm exchanges (ROCEV2.md 4).
var cmCaptures = []string{
	"linlinw5__rdma_ib_tutorial/rdma_cm.pcap",
	"linlinw5__rdma_ib_tutorial/rping.pcap",
	"montybeatnik__rdma-roce-lab/roce_capture_read-write-ecn.pcap",
	"montybeatnik__rdma-roce-lab/test.pcap",
}

// gsiMAD is one MAD sent to QP1, with the packet that carried it.
type gsiMAD struct {
	index int
	pkt   rocev2.Packet
	mad   rocev2.MAD
}

func decodeGSI(t *testing.T, frames [][]byte, index func(int) int) []gsiMAD {
	t.Helper()
	var out []gsiMAD
	for i, f := range frames {
		var g gsiMAD
		if rocev2.Parse(f, &g.pkt) != nil {
			continue
		}
		_, _, mad, err := cm.CheckGSI(&g.pkt)
		if err != nil {
			continue
		}
		if g.mad, err = rocev2.DecodeMAD(mad); err != nil {
			t.Fatalf("frame %d: %v", index(i), err)
		}
		g.index = index(i)
		out = append(out, g)
	}
	return out
}

func readCapture(t *testing.T, name string) []gsiMAD {
	t.Helper()
	path := testenv.RequireFile(t, filepath.Join(captureDir, name))
	f, err := pcapfile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frames := make([][]byte, len(f.Packets))
	for i, p := range f.Packets {
		frames[i] = p.Data
	}
	return decodeGSI(t, frames, func(i int) int { return f.Packets[i].Index })
}

// exchange is one connection's MADs, as Linux or as we sent them.
type exchange struct {
	req, rep, rtu, dreq, drep *gsiMAD
	dreqFromActive            bool
}

// follow picks the connection started by req out of a MAD sequence.
func follow(mads []gsiMAD, req *gsiMAD) exchange {
	x := exchange{req: req}
	aID := req.mad.Message.(*rocev2.CMReq).LocalCommID
	var pID uint32
	for i := range mads {
		if m, ok := mads[i].mad.Message.(*rocev2.CMRep); ok && m.RemoteCommID == aID && x.rep == nil {
			x.rep, pID = &mads[i], m.LocalCommID
		}
	}
	for i := range mads {
		g := &mads[i]
		switch m := g.mad.Message.(type) {
		case *rocev2.CMRtu:
			if m.LocalCommID == aID && x.rtu == nil {
				x.rtu = g
			}
		case *rocev2.CMDreq:
			if x.dreq == nil && ((m.LocalCommID == aID && m.RemoteCommID == pID) || (m.LocalCommID == pID && m.RemoteCommID == aID)) {
				x.dreq, x.dreqFromActive = g, m.LocalCommID == aID
			}
		}
	}
	for i := range mads {
		if m, ok := mads[i].mad.Message.(*rocev2.CMDrep); ok && x.dreq != nil && x.drep == nil &&
			m.RemoteCommID == x.dreq.mad.Message.(*rocev2.CMDreq).LocalCommID {
			x.drep = &mads[i]
		}
	}
	return x
}

// replay runs the connection x describes through two Managers: the same
// MACs and addresses, QPNs, PSNs, ports, read limits and private data,
// and the packet lifetime the capture's kernel used (its REQ ACK timeout
// less one: 16 in current Linux, 18 before 5.10). It returns our exchange.
func replay(t *testing.T, x exchange) exchange {
	t.Helper()
	req := x.req.mad.Message.(*rocev2.CMReq)
	rep := x.rep.mad.Message.(*rocev2.CMRep)
	hdr, err := rocev2.DecodeCMAHeader(req.PrivateData[:])
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := rocev2.ParseServiceID(req.ServiceID)
	params := cm.DefaultParams()
	params.PacketLifeTime = req.Primary.LocalAckTimeout - 1

	clk := cmtest.NewClock()
	link := cmtest.NewLink(clk, cmtest.Faults{})
	link.A.MAC, link.B.MAC = x.req.pkt.Eth.Src, x.req.pkt.Eth.Dst
	p := newPairOn(t, clk, link, params)
	activeIP, passiveIP := x.req.pkt.IP.Src, x.req.pkt.IP.Dst

	ls := listen(t, p.b, netip.AddrPortFrom(passiveIP, port))
	qpA := cmtest.NewQP(req.LocalQPN, req.StartingPSN)
	qpB := cmtest.NewQP(rep.LocalQPN, rep.StartingPSN)
	var connected, accepted result
	active := p.a.NewConnector()
	err = active.Connect(qpA, link.A.PathTo(activeIP, passiveIP), netip.AddrPortFrom(activeIP, hdr.SrcPort), netip.AddrPortFrom(passiveIP, port),
		cm.ConnectParams{InboundReadLimit: req.ResponderResources, OutboundReadLimit: req.InitiatorDepth, PrivateData: req.PrivateData[rocev2.CMAHeaderLen:]}, connected.done)
	if err != nil {
		t.Fatal(err)
	}
	clk.RunUntil(func() bool { return ls.count() == 1 }, time.Minute)
	if err := ls.conn(0).Accept(qpB, cm.AcceptParams{InboundReadLimit: rep.ResponderResources, OutboundReadLimit: rep.InitiatorDepth, PrivateData: rep.PrivateData[:]}, nil, accepted.done); err != nil {
		t.Fatal(err)
	}
	clk.RunUntil(connected.called, time.Minute)
	if err := active.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	clk.RunUntil(accepted.called, time.Minute)
	if x.dreq != nil {
		side := ls.conn(0)
		if x.dreqFromActive {
			side = active
		}
		var d result
		if err := side.Disconnect(d.done); err != nil {
			t.Fatal(err)
		}
		clk.RunUntil(d.called, time.Minute)
	}
	var frames [][]byte
	for _, f := range link.A.Frames() {
		frames = append(frames, f)
	}
	frames = append(frames, link.B.Frames()...)
	ours := decodeGSI(t, frames, func(i int) int { return i + 1 })
	for i := range ours {
		if _, ok := ours[i].mad.Message.(*rocev2.CMReq); ok {
			return follow(ours, &ours[i])
		}
	}
	t.Fatal("we sent no REQ")
	return exchange{}
}

// withoutIDs returns a copy of a CM message with the communication IDs,
// which are random on both stacks, cleared.
func withoutIDs(m rocev2.CMMessage) any {
	v := reflect.ValueOf(m).Elem()
	c := reflect.New(v.Type()).Elem()
	c.Set(v)
	for _, f := range []string{"LocalCommID", "RemoteCommID"} {
		if fv := c.FieldByName(f); fv.IsValid() {
			fv.SetUint(0)
		}
	}
	return c.Interface()
}

// diffFields lists the fields in which a and b (same struct type) differ.
func diffFields(a, b any) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, va.Type().Field(i).Name)
		}
	}
	return out
}

// checkTIDs checks the transaction ID rules Linux follows (cm.c
// cm_form_tid and the handlers reusing a request's TID).
func checkTIDs(t *testing.T, who string, x exchange) {
	t.Helper()
	reqID := x.req.mad.Message.(*rocev2.CMReq).LocalCommID
	tid := x.req.mad.Header.TransactionID
	if uint32(tid) != bits.ReverseBytes32(reqID) {
		t.Errorf("%s: REQ TID %#x, low word is not the byte-swapped comm ID %#x", who, tid, reqID)
	}
	for _, g := range []*gsiMAD{x.rep, x.rtu} {
		if g.mad.Header.TransactionID != tid {
			t.Errorf("%s: %v TID %#x, want the REQ's %#x", who, g.mad.Header.AttributeID, g.mad.Header.TransactionID, tid)
		}
	}
	if x.dreq != nil {
		d := x.dreq.mad.Header.TransactionID
		if uint32(d) != bits.ReverseBytes32(x.dreq.mad.Message.(*rocev2.CMDreq).LocalCommID) {
			t.Errorf("%s: DREQ TID %#x not formed from its comm ID", who, d)
		}
		if x.drep != nil && x.drep.mad.Header.TransactionID != d {
			t.Errorf("%s: DREP TID %#x, want the DREQ's %#x", who, x.drep.mad.Header.TransactionID, d)
		}
	}
}

// TestMADsMatchLinux replays every connection of the rdma_cm captures and
// checks that the REQ, REP, RTU, DREQ and DREP we send decode, field for
// field, to what Linux sent, apart from the communication IDs and the
// transaction IDs; and that the UD frames carrying them match too, apart
// from the GSI PSN and the IPv4 identification (per-host counters).
func TestMADsMatchLinux(t *testing.T) {
	connections := 0
	for _, name := range cmCaptures {
		mads := readCapture(t, name)
		for i := range mads {
			if _, ok := mads[i].mad.Message.(*rocev2.CMReq); !ok {
				continue
			}
			linux := follow(mads, &mads[i])
			if linux.rep == nil || linux.rtu == nil || linux.dreq == nil || linux.drep == nil {
				t.Fatalf("%s frame %d: incomplete exchange %+v", name, mads[i].index, linux)
			}
			connections++
			ours := replay(t, linux)
			checkTIDs(t, name+" (Linux)", linux)
			checkTIDs(t, name+" (ndkxdp)", ours)
			pairs := []struct {
				what        string
				linux, ours *gsiMAD
			}{
				{"REQ", linux.req, ours.req}, {"REP", linux.rep, ours.rep}, {"RTU", linux.rtu, ours.rtu},
				{"DREQ", linux.dreq, ours.dreq}, {"DREP", linux.drep, ours.drep},
			}
			for _, p := range pairs {
				if p.ours == nil {
					t.Errorf("%s frame %d: we sent no %s", name, p.linux.index, p.what)
					continue
				}
				if d := diffFields(withoutIDs(p.linux.mad.Message), withoutIDs(p.ours.mad.Message)); len(d) != 0 {
					t.Errorf("%s frame %d: %s differs in %v\nLinux %+v\nours  %+v", name, p.linux.index, p.what, d, p.linux.mad.Message, p.ours.mad.Message)
				}
				lh, oh := p.linux.mad.Header, p.ours.mad.Header
				lh.TransactionID, oh.TransactionID = 0, 0
				if lh != oh {
					t.Errorf("%s %s: MAD header %+v, Linux %+v", name, p.what, oh, lh)
				}
				lp, op := p.linux.pkt, p.ours.pkt
				lp.BTH.PSN, op.BTH.PSN = 0, 0
				lp.IP.ID, op.IP.ID = 0, 0
				if lp.Headers != op.Headers || len(lp.Frame) != len(op.Frame) {
					t.Errorf("%s %s: frame headers\nLinux %+v\nours  %+v", name, p.what, lp.Headers, op.Headers)
				}
			}
		}
	}
	if connections != 5 {
		t.Fatalf("%d connections in the captures, want 5", connections)
	}
}
