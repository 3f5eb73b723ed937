package rc

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// forwardRig is two engines of one adapter, each on its own pipe: the
// "arrival" engine X receives what the test injects on its pipe's far end;
// G owns QP1 (it has the GSI hook) and whatever QPNs owned says.
type forwardRig struct {
	x, g    *Engine
	inject  *porttest.PipeEnd // the far end of X's pipe
	gsiSeen atomic.Int64
	owned   atomic.Pointer[map[uint32]*Engine]
}

func newForwardRig(t *testing.T) *forwardRig {
	r := &forwardRig{}
	owner := func(qpn uint32) *Engine {
		if m := r.owned.Load(); m != nil {
			return (*m)[qpn]
		}
		return nil
	}
	px, err := porttest.NewPipe(porttest.PipeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pg, err := porttest.NewPipe(porttest.PipeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	regions, _ := memreg.New(16)
	r.g, err = NewEngine(Config{Port: pg.A(), Regions: regions, Owner: owner, GSI: func(p *rocev2.Packet) { r.gsiSeen.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	r.owned.Store(&map[uint32]*Engine{rocev2.GSIQP: r.g})
	r.x, err = NewEngine(Config{Port: px.A(), Regions: regions, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.x.Close)
	t.Cleanup(r.g.Close)
	r.inject = px.B()
	return r
}

func (r *forwardRig) frame(t *testing.T, op rocev2.Opcode, qpn uint32) []byte {
	h := &rocev2.Headers{
		Eth:  rocev2.EthernetFields{Dst: rocev2.MAC{2, 0, 0, 0, 0, 1}, Src: rocev2.MAC{2, 0, 0, 0, 0, 2}},
		IP:   rocev2.NewIPFields(netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1")),
		UDP:  rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, 1, qpn)},
		BTH:  rocev2.BTHFields{Opcode: op, PKey: rocev2.DefaultPKey, DestQP: qpn, AckReq: true, PSN: 5},
		DETH: rocev2.DETHFields{QKey: rocev2.GSIQKey, SrcQP: 1},
	}
	payload := make([]byte, rocev2.MADLen)
	buf := make([]byte, h.FrameLen(len(payload)))
	n, err := h.Encode(buf, payload)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func (r *forwardRig) send(t *testing.T, f []byte) {
	t.Helper()
	if err := r.inject.Transmit([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	if err := r.inject.Flush(); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestForwardGSIAndForeignQPs: QP1 datagrams that arrive on an engine
// without the GSI hook reach the one that has it; frames for a QPN another
// engine owns are handed to it (and counted there, where the QP is
// unknown in this rig); frames for a QPN nobody owns stay this engine's
// unknown-QP drops. Nothing is forwarded twice.
func TestForwardGSIAndForeignQPs(t *testing.T) {
	r := newForwardRig(t)
	for i := 0; i < 3; i++ {
		r.send(t, r.frame(t, rocev2.UDSendOnly, rocev2.GSIQP))
	}
	eventually(t, "3 MADs at the GSI engine", func() bool { return r.gsiSeen.Load() == 3 })
	// 0x200 is not owned by anyone: X drops it.
	r.send(t, r.frame(t, rocev2.RCSendOnly, 0x200))
	eventually(t, "unknown QP at X", func() bool { return r.x.Stats().UnknownQP == 1 })
	xs, gs := r.x.Stats(), r.g.Stats()
	if xs.ForwardedOut != 3 || gs.ForwardedIn != 3 || xs.ForwardDrops != 0 || gs.ForwardedOut != 0 || xs.NotRC != 0 {
		t.Fatalf("X %+v\nG %+v", xs, gs)
	}
}

// TestForwardAllocatesNothing: forwarding a frame and handling it at the
// owner allocate nothing, and every buffer comes back.
func TestForwardAllocatesNothing(t *testing.T) {
	r := newForwardRig(t)
	f := r.frame(t, rocev2.UDSendOnly, rocev2.GSIQP)
	var want int64
	round := func() {
		want++
		r.send(t, f)
		for r.gsiSeen.Load() != want {
			time.Sleep(10 * time.Microsecond)
		}
	}
	for i := 0; i < 20; i++ { // warm up
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%v allocations per forwarded frame", n)
	}
	eventually(t, "all forwarding buffers back", func() bool { return r.x.fwdFree.Len() == forwardBuffers })
}
