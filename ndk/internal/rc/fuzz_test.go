package rc

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// FuzzEngineFrames feeds an engine well-formed RoCEv2 frames with
// arbitrary opcodes, PSNs, RETH/AETH/IETH fields and payload lengths from
// a peer it is connected to. The engine must not crash, must not touch a
// byte outside its regions, and must keep serving a valid SEND afterwards
// unless the frames put the QP in error. A program of odd length runs
// against a UC QP, its opcodes under the UC transport (uc.go).
func FuzzEngineFrames(f *testing.F) {
	f.Add([]byte{0x04, 0, 0, 0x0a, 1, 0, 0, 0, 0, 0, 0x10, 0x0c, 0, 0x11, 0x60})
	f.Add([]byte{0x06, 0, 1, 0x07, 1, 0x08, 2, 0x0c, 3, 0x0d, 0, 0x11, 0x20})
	// An ACK with a reserved syndrome (0x40, then bit 7), a WRITE and a
	// READ to another host's address (bit 7 of the PSN byte), duplicates.
	f.Add([]byte{0x11, 0, 0x40, 0x11, 0, 0xC1, 0x0a, 0x80, 8, 0x0c, 0x81, 9, 0x0a, 0, 8, 0x0a, 0, 8})
	f.Fuzz(func(t *testing.T, prog []byte) {
		pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 1024})
		if err != nil {
			t.Fatal(err)
		}
		h := newHost(t, pipe.B(), "198.18.0.2", 2, &pairOptions{cqDepth: 1024})
		uc := len(prog)%2 == 1
		q := h.createQPOf(0x100, 64, uc)
		peer := Endpoint{IP: netip.MustParseAddr("198.18.0.1"), MAC: rocev2.MAC{2, 0, 0, 0, 0, 1}, QPN: 0x200, PSN: 100}
		p := defaultParams(rocev2.MTU256)
		p.Local = Endpoint{IP: h.ip, MAC: h.mac, QPN: 0x100, PSN: 500}
		p.Remote = peer
		if err := q.Connect(p); err != nil {
			t.Fatal(err)
		}
		recv := h.buffer(1024, memreg.AccessLocalWrite, false)
		wr := h.buffer(1024, memreg.AccessRemoteWrite|memreg.AccessLocalWrite|memreg.AccessRemoteRead, true)
		for i := 0; i < 4; i++ {
			mustPost(t, q.PostReceive(i, []SGE{recv.sge(0, 1024)}))
		}
		src := h.buffer(300, 0, false)
		mustPost(t, q.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 300)}}))

		hdr := rocev2.Headers{
			Eth: rocev2.EthernetFields{Dst: h.mac, Src: peer.MAC},
			IP:  rocev2.NewIPFields(peer.IP, h.ip),
			BTH: rocev2.BTHFields{PKey: 0xFFFF, DestQP: 0x100},
		}
		buf := make([]byte, 2048)
		payload := make([]byte, 600)
		a := pipe.A()
		for len(prog) >= 3 {
			op, dpsn, arg := rocev2.Opcode(prog[0]&0x1F), prog[1], prog[2]
			if uc {
				op |= rocev2.Opcode(rocev2.TransportUC)
			}
			prog = prog[3:]
			info := op.Info()
			if !info.Valid {
				continue
			}
			hdr.BTH.Opcode = op
			hdr.BTH.PSN = rocev2.PSN(100).Add(uint32(dpsn) % 16)
			hdr.BTH.AckReq = arg&1 != 0
			hdr.BTH.SE = arg&2 != 0 && info.SolicitedEvent
			hdr.RETH = rocev2.RETHFields{VA: wr.addr(int(arg) * 4), RKey: wr.tokens.Remote, DMALen: uint32(arg) * 3}
			if arg&4 != 0 {
				hdr.RETH.RKey ^= 0xff
			}
			hdr.AETH = rocev2.AETHFields{Syndrome: rocev2.Syndrome(arg), MSN: 1}
			hdr.IP.Dst = h.ip
			if dpsn&0x80 != 0 {
				hdr.IP.Dst = netip.MustParseAddr("198.18.0.9") // another host's
			}
			hdr.IETH = wr.tokens.Remote
			n := 0
			if info.Payload {
				n = int(arg) * 2
				if info.FixedPayload > 0 {
					n = info.FixedPayload
				}
			}
			fl, err := hdr.Encode(buf, payload[:n])
			if err != nil {
				continue
			}
			_ = a.Transmit([][]byte{buf[:fl]})
		}
		time.Sleep(2 * time.Millisecond)
		h.eng.Stats() // the engine is alive and has handled what came before
		if !recv.guardsIntact() || !wr.guardsIntact() || !src.guardsIntact() {
			t.Fatal("guard bytes changed")
		}
		var e cq.Entry
		for h.rcq.Pop(&e) {
			if e.Status == 0 && e.BytesTransferred > 1024 {
				t.Fatalf("receive of %d bytes into 1024", e.BytesTransferred)
			}
		}
	})
}
