package rc

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
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
			checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, 1)
			sameBytes(t, "memory written by the forged frame (AnySource)", dst.b, src.b)
			continue
		}
		if st.WrongSource == 0 {
			t.Fatalf("spoofed WRITE not counted: %+v", st)
		}
		sameBytes(t, "memory after the spoofed WRITE", dst.b, bytes.Repeat([]byte{0xEE}, 64))
		s.on.Store(false) // the requester's retransmission is genuine
		checkEntry(t, waitCQ(t, a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, 1)
		sameBytes(t, "memory after the genuine retransmission", dst.b, src.b)
		if !dst.guardsIntact() {
			t.Fatal("bytes outside the region changed")
		}
	}
}

// TestKeyGuessingCostsTheConnection plays a peer that guesses R_Keys as
// fast as it can post for a second: the first wrong guess draws a remote
// access error NAK and moves both QPs to error, so every later guess is
// flushed (on the guesser) or dropped (at the target) and never looked
// up. One connection buys one guess; with memreg's 15-bit keys a guess
// for a given region succeeds with p = 2^-15.
func TestKeyGuessingCostsTheConnection(t *testing.T) {
	a, b := newPair(t, pairOptions{depth: 4096})
	src := a.buffer(8, 0, false)
	dst := b.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
	rng := uint32(0x9e3779b9)
	posted := 0
	for start := time.Now(); time.Since(start) < time.Second && posted < 4000; {
		rng = rng*1664525 + 1013904223
		key := rng
		if key == dst.tokens.Remote {
			continue // the guesser does not know the key
		}
		if a.qps[0].PostSend(&SendWR{Op: OpWrite, Context: posted, SGL: []SGE{src.sge(0, 8)},
			RemoteAddr: dst.addr(0), RemoteToken: key}) != ndkpi.StatusSuccess {
			break // the QP failed: posting goes on only into the flush
		}
		posted++
	}
	es := waitCQ(t, a.scq, posted, 10*time.Second)
	if es[0].Status != ndkpi.StatusAccessViolation {
		t.Fatalf("first guess completed with %#x, want STATUS_ACCESS_VIOLATION", es[0].Status)
	}
	for i, e := range es[1:] {
		if e.Status != ndkpi.StatusCancelled {
			t.Fatalf("guess %d after the failure completed with %#x, want STATUS_CANCELLED", i+1, e.Status)
		}
	}
	sameBytes(t, "target memory", dst.b, bytes.Repeat([]byte{0xEE}, 64))
	if !dst.guardsIntact() {
		t.Fatal("bytes outside the region changed")
	}
	if a.qps[0].State() != StateError || b.qps[0].State() != StateError {
		t.Fatalf("states after a wrong key: guesser %v, target %v; want both in error", a.qps[0].State(), b.qps[0].State())
	}
	st := b.eng.Stats()
	if st.NAKsSent != 1 {
		t.Fatalf("the target sent %d NAKs, want 1 (one guess looked up)", st.NAKsSent)
	}
	t.Logf("%d guesses posted in the second; the target NAKed 1 and dropped %d frames of the failed connection", posted, st.NotConnected)
}
