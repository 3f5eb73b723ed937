package rc

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ntstatus"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// spoofer rewrites the IP source of A's WRITE frames while on: the
// frames keep the connection's QPN and PSN, and a valid ICRC, so only
// the sender's address betrays them (ReDMArk's injection).
type spoofer struct {
	on       atomic.Bool
	from     netip.Addr
	rewrites atomic.Int64
}

func (s *spoofer) filter(dir porttest.Direction, frame []byte) porttest.Verdict {
	if dir != porttest.AtoB || !s.on.Load() {
		return porttest.Pass
	}
	var p rocev2.Packet
	if rocev2.Parse(frame, &p) != nil {
		return porttest.Pass
	}
	switch p.BTH.Opcode {
	case rocev2.RCWriteOnly, rocev2.RCWriteFirst, rocev2.RCWriteMiddle, rocev2.RCWriteLast:
	default:
		return porttest.Pass
	}
	payload := bytes.Clone(p.Payload)
	h := p.Headers
	h.IP.Src = s.from
	if n, err := h.Encode(frame, payload); err != nil || n != len(p.Frame) {
		panic("re-encoding a spoofed frame changed its length")
	}
	s.rewrites.Add(1)
	return porttest.Pass
}

// TestSpoofedSourceDroppedNotExecuted: a WRITE that carries the live
// connection's QPN, PSN and R_Key but comes from another address is
// dropped and counted, and touches no byte; the genuine retransmission
// then lands. With Config.AnySource the same forgery is executed, which
// is what the check prevents.
func TestSpoofedSourceDroppedNotExecuted(t *testing.T) {
	for _, any := range []bool{false, true} {
		s := &spoofer{from: netip.MustParseAddr("198.18.0.66")}
		s.on.Store(true)
		a, b := newPair(t, pairOptions{pipe: porttest.PipeConfig{Filter: s.filter}, anySource: any})
		src := a.buffer(64, 0, false)
		fill(src.b, 3)
		dst := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
		mustPost(t, a.qps[0].PostSend(&SendWR{Op: OpWrite, Context: 1, SGL: []SGE{src.sge(0, 64)},
			RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
		deadline := time.Now().Add(5 * time.Second)
		for s.rewrites.Load() == 0 || b.eng.Stats().FramesIn == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no spoofed frame reached B")
			}
			time.Sleep(time.Millisecond)
		}
		st := b.eng.Stats()
		if any {
			if st.WrongSource != 0 {
				t.Fatalf("AnySource: %d frames dropped for their source", st.WrongSource)
			}
			checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ntstatus.Success, typeWrite, 1)
			sameBytes(t, "memory written by the forged frame (AnySource)", dst.b, src.b)
			continue
		}
		if st.WrongSource == 0 {
			t.Fatalf("spoofed WRITE not counted: %+v", st)
		}
		sameBytes(t, "memory after the spoofed WRITE", dst.b, bytes.Repeat([]byte{0xEE}, 64))
		s.on.Store(false) // the requester's retransmission is genuine
		checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ntstatus.Success, typeWrite, 1)
		sameBytes(t, "memory after the genuine retransmission", dst.b, src.b)
		if !dst.guardsIntact() {
			t.Fatal("bytes outside the region changed")
		}
	}
}
