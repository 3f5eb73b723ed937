package rc

import (
	"bytes"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// udCapture is rxe's ibv_ud_pingpong (Q_Key 0x11111111, 1024-byte
// datagrams between QPs 0x22 and 0x23), read in place.
const udCapture = "../../../../shared/testdata/pcaps/linlinw5__rdma_ib_tutorial/pingpong_ud.pcap"

// TestUD_CapturedRxeDatagrams pins the UD path to rxe's frames: each UD
// SEND_ONLY rxe sent to QP 0x22 is received by a UD QP of that number and
// Q_Key, its receive holding rxe's IPv4 header in GRH bytes 20-40 and the
// payload after it, its completion naming rxe's source QP; and a datagram
// our engine sends for the same QPs carries the BTH and DETH rxe's did,
// PSN aside.
func TestUD_CapturedRxeDatagrams(t *testing.T) {
	f, err := pcapfile.ReadFile(udCapture)
	if err != nil {
		t.Fatal(err)
	}
	var toUs [][]byte
	var theirs rocev2.Packet
	for _, r := range f.Packets {
		var p rocev2.Packet
		if rocev2.Parse(r.Data, &p) != nil || p.BTH.Opcode != rocev2.UDSendOnly {
			continue
		}
		if p.BTH.DestQP == 0x22 {
			toUs = append(toUs, r.Data)
			theirs = p
		}
	}
	if len(toUs) < 5 {
		t.Fatalf("%d datagrams to QP 0x22 in %s", len(toUs), udCapture)
	}
	us, them := theirs.IP.Dst, theirs.IP.Src
	pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 64})
	if err != nil {
		t.Fatal(err)
	}
	o := pairOptions{}
	h := newHost(t, pipe.B(), us.String(), 1, &o)
	h.mac = theirs.Eth.Dst
	q, err := h.eng.CreateQP(QPConfig{QPN: 0x22, PD: testPD, RecvCQ: h.rcq, SendCQ: h.scq, RecvDepth: 16, SendDepth: 16, MaxRecvSGE: 1, MaxSendSGE: 1, UD: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.ActivateUD(UDParams{Local: Endpoint{IP: us, MAC: h.mac, QPN: 0x22}, QKey: 0x11111111, PathMTU: rocev2.MTU1024}); err != nil {
		t.Fatal(err)
	}
	bufs := make([]*buffer, len(toUs))
	for i := range toUs {
		bufs[i] = h.buffer(GRHLen+1024, memreg.AccessLocalWrite, false)
		mustPost(t, q.PostReceive(i, []SGE{bufs[i].sge(0, GRHLen+1024)}))
	}
	for _, fr := range toUs {
		if err := pipe.A().Transmit([][]byte{fr}); err != nil {
			t.Fatal(err)
		}
	}
	_ = pipe.A().Flush()
	for i, e := range waitCQ(t, h.rcq, len(toUs), 5*time.Second) {
		if e.Status != ndkpi.StatusSuccess || e.BytesTransferred != GRHLen+1024 || e.TypeSpecificCompletionOutput != 0x23 {
			t.Fatalf("completion %d: %+v", i, e)
		}
		var p rocev2.Packet
		if err := rocev2.Parse(toUs[i], &p); err != nil {
			t.Fatal(err)
		}
		b := bufs[e.RequestContext.(int)].b
		if !bytes.Equal(b[:20], make([]byte, 20)) || !bytes.Equal(b[20:GRHLen], p.Frame[p.L3Offset:p.L3Offset+rocev2.IPv4Len]) {
			t.Fatalf("GRH % x, want 20 zero bytes and rxe's IPv4 header % x", b[:GRHLen], p.Frame[p.L3Offset:p.L3Offset+rocev2.IPv4Len])
		}
		sameBytes(t, "payload", b[GRHLen:], p.Payload)
	}

	src := h.buffer(1024, 0, false)
	mustPost(t, q.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 1024)},
		UD: UDDest{IP: them, MAC: theirs.Eth.Src, QPN: 0x23, QKey: 0x11111111}}))
	waitCQ(t, h.scq, 1, 5*time.Second)
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		var rx [4][]byte
		if n := pipe.A().Receive(rx[:]); n > 0 {
			got = append(got, append([]byte(nil), rx[0]...))
			pipe.A().Release()
		}
	}
	if len(got) == 0 {
		t.Fatal("no datagram left our engine")
	}
	var ours rocev2.Packet
	if err := rocev2.Parse(got[0], &ours); err != nil {
		t.Fatal(err)
	}
	var rxe rocev2.Packet
	for _, r := range f.Packets {
		if rocev2.Parse(r.Data, &rxe) == nil && rxe.BTH.DestQP == 0x23 {
			break
		}
	}
	ob, rb := ours.Frame[ours.BTHOffset:ours.BTHOffset+20], rxe.Frame[rxe.BTHOffset:rxe.BTHOffset+20]
	if !bytes.Equal(ob[:9], rb[:9]) || !bytes.Equal(ob[12:], rb[12:]) || ours.IP.Dst != them {
		t.Fatalf("our BTH and DETH % x, rxe's % x (PSN bytes 9-11 aside)", ob, rb)
	}
}
