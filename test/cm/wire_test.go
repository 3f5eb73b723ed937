package cm

import (
	"bytes"
	"context"
	"net/netip"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// captureDir holds the public captures, read in place (never copied into
// the project): ../shared/testdata/pcaps from the repository root.
const captureDir = "../../../shared/testdata/pcaps"

// gsiMAD is one CM MAD and the frame that carried it.
type gsiMAD struct {
	pkt rocev2.Packet
	mad rocev2.MAD
}

func decodeMADs(t *testing.T, frames [][]byte) []gsiMAD {
	t.Helper()
	var out []gsiMAD
	for _, f := range frames {
		var g gsiMAD
		if rocev2.Parse(f, &g.pkt) != nil {
			continue
		}
		if g.pkt.BTH.Opcode != rocev2.UDSendOnly || g.pkt.BTH.DestQP != rocev2.GSIQP || len(g.pkt.Payload) != rocev2.MADLen {
			continue
		}
		var err error
		if g.mad, err = rocev2.DecodeMAD(g.pkt.Payload); err != nil {
			t.Fatalf("undecodable MAD: %v", err)
		}
		out = append(out, g)
	}
	return out
}

// connection is the MADs of one connection, by kind.
type connection struct {
	req, rep, rtu, dreq, drep *gsiMAD
	dreqFromActive            bool
}

func firstConnection(mads []gsiMAD) connection {
	var c connection
	var aID, pID uint32
	for i := range mads {
		g := &mads[i]
		switch m := g.mad.Message.(type) {
		case *rocev2.CMReq:
			if c.req == nil {
				c.req, aID = g, m.LocalCommID
			}
		case *rocev2.CMRep:
			if c.rep == nil && c.req != nil && m.RemoteCommID == aID {
				c.rep, pID = g, m.LocalCommID
			}
		case *rocev2.CMRtu:
			if c.rtu == nil && c.rep != nil && m.LocalCommID == aID {
				c.rtu = g
			}
		case *rocev2.CMDreq:
			if c.dreq == nil && c.rtu != nil && (m.LocalCommID == aID || m.LocalCommID == pID) {
				c.dreq, c.dreqFromActive = g, m.LocalCommID == aID
			}
		case *rocev2.CMDrep:
			if c.drep == nil && c.dreq != nil && m.RemoteCommID == c.dreq.mad.Message.(*rocev2.CMDreq).LocalCommID {
				c.drep = g
			}
		}
	}
	return c
}

// TestAdapterMADsMatchLinux runs, between two ndkxdp adapters, the
// connection each public rdma_cm capture shows between two Linux hosts:
// the same listening port and source port, read limits, private data,
// path MTU, packet lifetime, and the same side disconnecting. The REQ,
// REP, RTU, DREQ and DREP the adapters put on the wire (recorded by
// Options.Capture) must decode to Linux's, field for field, apart from
// what identifies the hosts and the connection: communication and
// transaction IDs, CA GUIDs, QP numbers, starting PSNs, GIDs and the IP
// addresses in the rdma_cm header. The frames must match too, apart from
// MACs, IP addresses, the IPv4 identification and the GSI PSN.
func TestAdapterMADsMatchLinux(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		for _, name := range []string{"linlinw5__rdma_ib_tutorial/rdma_cm.pcap", "linlinw5__rdma_ib_tutorial/rping.pcap"} {
			t.Run(filepath.Base(name), func(t *testing.T) {
				path := testenv.RequireFile(t, filepath.Join(captureDir, name))
				f, err := pcapfile.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				var frames [][]byte
				for _, p := range f.Packets {
					frames = append(frames, p.Data)
				}
				linux := firstConnection(decodeMADs(t, frames))
				if linux.req == nil || linux.rep == nil || linux.rtu == nil || linux.dreq == nil || linux.drep == nil {
					t.Fatalf("%s: no complete connection", name)
				}
				ours := runLikeLinux(t, m, linux)
				compare(t, linux, ours)
			})
		}
	})
}

func runLikeLinux(t *testing.T, m mode, linux connection) connection {
	t.Helper()
	req := linux.req.mad.Message.(*rocev2.CMReq)
	rep := linux.rep.mad.Message.(*rocev2.CMRep)
	hdr, err := rocev2.DecodeCMAHeader(req.PrivateData[:])
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := rocev2.ParseServiceID(req.ServiceID)
	mtu := map[rocev2.MTU]int{rocev2.MTU1024: 1500, rocev2.MTU2048: 3000, rocev2.MTU4096: 9000}[req.PathMTU]
	if mtu == 0 {
		t.Fatalf("capture's path MTU %v", req.PathMTU)
	}
	var buf bytes.Buffer
	var mu sync.Mutex
	cmOpts := ndk.CMOptions{PacketLifeTime: int(req.Primary.LocalAckTimeout) - 1}
	capture := &lockedWriter{w: &buf, mu: &mu}
	p, a, b := pair(t, m, harness.Config{MTU: mtu, StaticNeighbours: true}, ndk.Options{Capture: capture, CM: cmOpts}, ndk.Options{CM: cmOpts})

	accepted := make(chan *ndk.Connector, 1)
	qb := b.qp()
	l, err := b.Adapter.CreateListener(func(c *ndk.Connector) {
		err := c.Accept(context.Background(), qb, int(rep.ResponderResources), int(rep.InitiatorDepth), rep.PrivateData[:], nil)
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Listen(netip.AddrPortFrom(p.B.IPv4, port)); err != nil {
		t.Fatal(err)
	}
	c, err := a.Adapter.CreateConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = c.Connect(ctx, a.qp(), netip.AddrPortFrom(p.A.IPv4, hdr.SrcPort), netip.AddrPortFrom(p.B.IPv4, port),
		int(req.ResponderResources), int(req.InitiatorDepth), req.PrivateData[rocev2.CMAHeaderLen:])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	sc := <-accepted
	quitter := sc
	if linux.dreqFromActive {
		quitter = c
	}
	if err := quitter.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	sc.Close()
	<-c.Closed()
	<-sc.Closed()
	a.Close() // flushes the capture's last frames

	mu.Lock()
	defer mu.Unlock()
	rf, err := pcapfile.Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for _, pk := range rf.Packets {
		frames = append(frames, pk.Data)
	}
	ours := firstConnection(decodeMADs(t, frames))
	if ours.req == nil || ours.rep == nil || ours.rtu == nil || ours.dreq == nil || ours.drep == nil {
		t.Fatalf("the adapter's capture holds no complete connection: %+v", ours)
	}
	return ours
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// hostFields clears, in a copy of a CM message, what differs between any
// two connections or hosts: the fields listed in TestAdapterMADsMatchLinux.
func hostFields(m rocev2.CMMessage) any {
	switch x := m.(type) {
	case *rocev2.CMReq:
		c := *x
		c.LocalCommID, c.LocalCAGUID, c.LocalQPN, c.StartingPSN = 0, 0, 0, 0
		c.Primary.LocalGID, c.Primary.RemoteGID = rocev2.GID{}, rocev2.GID{}
		if h, err := rocev2.DecodeCMAHeader(c.PrivateData[:]); err == nil {
			h.Src, h.Dst = netip.Addr{}, netip.Addr{}
			return struct {
				rocev2.CMReq
				rocev2.CMAHeader
			}{c, h}
		}
		return c
	case *rocev2.CMRep:
		c := *x
		c.LocalCommID, c.RemoteCommID, c.LocalCAGUID, c.LocalQPN, c.StartingPSN = 0, 0, 0, 0, 0
		return c
	case *rocev2.CMRtu:
		c := *x
		c.LocalCommID, c.RemoteCommID = 0, 0
		return c
	case *rocev2.CMDreq:
		c := *x
		c.LocalCommID, c.RemoteCommID, c.RemoteQPN = 0, 0, 0
		return c
	case *rocev2.CMDrep:
		c := *x
		c.LocalCommID, c.RemoteCommID = 0, 0
		return c
	}
	return m
}

func compare(t *testing.T, linux, ours connection) {
	t.Helper()
	for _, p := range []struct {
		what        string
		linux, ours *gsiMAD
	}{
		{"REQ", linux.req, ours.req}, {"REP", linux.rep, ours.rep}, {"RTU", linux.rtu, ours.rtu},
		{"DREQ", linux.dreq, ours.dreq}, {"DREP", linux.drep, ours.drep},
	} {
		lm, om := hostFields(p.linux.mad.Message), hostFields(p.ours.mad.Message)
		if lreq, ok := lm.(struct {
			rocev2.CMReq
			rocev2.CMAHeader
		}); ok {
			// The private data holds the addresses too; compare it
			// through the decoded header and the user bytes.
			oreq := om.(struct {
				rocev2.CMReq
				rocev2.CMAHeader
			})
			if !bytes.Equal(lreq.PrivateData[rocev2.CMAHeaderLen:], oreq.PrivateData[rocev2.CMAHeaderLen:]) {
				t.Errorf("REQ user private data differs")
			}
			lreq.PrivateData, oreq.PrivateData = [92]byte{}, [92]byte{}
			lm, om = lreq, oreq
		}
		if !reflect.DeepEqual(lm, om) {
			t.Errorf("%s differs\nLinux %+v\nours  %+v", p.what, lm, om)
		}
		lh, oh := p.linux.mad.Header, p.ours.mad.Header
		lh.TransactionID, oh.TransactionID = 0, 0
		if lh != oh {
			t.Errorf("%s MAD header %+v, Linux %+v", p.what, oh, lh)
		}
		lp, op := p.linux.pkt.Headers, p.ours.pkt.Headers
		for _, h := range []*rocev2.Headers{&lp, &op} {
			h.Eth.Src, h.Eth.Dst = rocev2.MAC{}, rocev2.MAC{}
			h.IP.Src, h.IP.Dst, h.IP.ID = netip.Addr{}, netip.Addr{}, 0
			h.BTH.PSN = 0
		}
		if lp != op || len(p.linux.pkt.Frame) != len(p.ours.pkt.Frame) {
			t.Errorf("%s frame (%d bytes)\nLinux %+v (%d bytes)\nours  %+v", p.what, len(p.ours.pkt.Frame), lp, len(p.linux.pkt.Frame), op)
		}
	}
	if ours.dreqFromActive != linux.dreqFromActive {
		t.Errorf("DREQ from the active side: %v, Linux %v", ours.dreqFromActive, linux.dreqFromActive)
	}
}
