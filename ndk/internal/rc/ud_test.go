package rc

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

const testQKey = 0x01234567 // rdma_cm's RDMA_UDP_QKEY

// udPair builds two hosts, each with one active UD QP (QPN 0x200 on A,
// 0x300 on B) whose Q_Key is qkey.
func udPair(t testing.TB, o pairOptions, qkeyA, qkeyB uint32) (a, b *host, qa, qb *QP) {
	t.Helper()
	o.noConnect, o.qps = true, 0
	if o.mtu == 0 {
		o.mtu = rocev2.MTU1024
	}
	if o.pipe.Depth == 0 {
		o.pipe.Depth = 4096
	}
	pipe, err := porttest.NewPipe(o.pipe)
	if err != nil {
		t.Fatal(err)
	}
	ipA, ipB := "198.18.0.1", "198.18.0.2"
	if o.v6 {
		ipA, ipB = "2001:2::1", "2001:2::2"
	}
	a = newHost(t, pipe.A(), ipA, 1, &o)
	b = newHost(t, pipe.B(), ipB, 2, &o)
	mk := func(h *host, qpn, qkey uint32) *QP {
		q, err := h.eng.CreateQP(QPConfig{QPN: qpn, PD: testPD, RecvCQ: h.rcq, SendCQ: h.scq, Context: qpn,
			RecvDepth: 64, SendDepth: 64, MaxRecvSGE: 4, MaxSendSGE: 4, UD: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.ActivateUD(UDParams{Local: Endpoint{IP: h.ip, MAC: h.mac, QPN: qpn}, QKey: qkey, PathMTU: o.mtu}); err != nil {
			t.Fatal(err)
		}
		return q
	}
	return a, b, mk(a, 0x200, qkeyA), mk(b, 0x300, qkeyB)
}

func (h *host) dest(q *QP, qkey uint32) UDDest {
	return UDDest{IP: h.ip, MAC: h.mac, QPN: q.QPN(), QKey: qkey}
}

// TestUD_SendBothWays: datagrams go both ways; each receive holds the GRH
// (rxe's layout: the IPv4 header in the last 20 of 40 bytes, or the whole
// IPv6 header) and then the payload, and its completion counts both and
// names the source QPN.
func TestUD_SendBothWays(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "IPv4"
		if v6 {
			name = "IPv6"
		}
		t.Run(name, func(t *testing.T) {
			a, b, qa, qb := udPair(t, pairOptions{v6: v6}, testQKey, testQKey)
			for _, dir := range []struct {
				from, to   *host
				qfrom, qto *QP
			}{{a, b, qa, qb}, {b, a, qb, qa}} {
				const n = 1024 // a whole path MTU
				src := dir.from.buffer(n, 0, false)
				fill(src.b, uint64(dir.qfrom.QPN()))
				dst := dir.to.buffer(GRHLen+n, memreg.AccessLocalWrite, false)
				mustPost(t, dir.qto.PostReceive("r", []SGE{dst.sge(0, GRHLen+n)}))
				mustPost(t, dir.qfrom.PostSend(&SendWR{Op: OpSend, Context: "s", SGL: []SGE{src.sge(0, n)},
					UD: dir.to.dest(dir.qto, testQKey)}))
				checkEntry(t, waitCQ(t, dir.from.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpSend, "s")
				r := waitCQ(t, dir.to.rcq, 1, 5*time.Second)[0]
				checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, "r")
				if r.BytesTransferred != GRHLen+n || r.TypeSpecificCompletionOutput != uint64(dir.qfrom.QPN()) {
					t.Fatalf("receive completion %+v: want %d bytes from QPN %#x", r, GRHLen+n, dir.qfrom.QPN())
				}
				sameBytes(t, "payload", dst.b[GRHLen:], src.b)
				checkGRH(t, dst.b[:GRHLen], dir.from.ip, dir.to.ip)
				if !dst.guardsIntact() {
					t.Fatal("receive wrote outside its buffer")
				}
			}
		})
	}
}

// checkGRH checks the 40 bytes verbs puts ahead of a UD payload.
func checkGRH(t *testing.T, grh []byte, src, dst netip.Addr) {
	t.Helper()
	if src.Is4() {
		for i, x := range grh[:20] {
			if x != 0 {
				t.Fatalf("GRH byte %d is %#x: the first 20 bytes of an IPv4 datagram's GRH are zero", i, x)
			}
		}
		ip := rocev2.IPv4(grh[20:])
		if grh[20]>>4 != 4 || grh[29] != 17 || ip.Src() != src || ip.Dst() != dst {
			t.Fatalf("GRH bytes 20-40 %x are not the IPv4 header %v -> %v", grh[20:], src, dst)
		}
		return
	}
	if grh[0]>>4 != 6 || grh[6] != 17 || netip.AddrFrom16([16]byte(grh[8:24])) != src || netip.AddrFrom16([16]byte(grh[24:40])) != dst {
		t.Fatalf("GRH %x is not the IPv6 header %v -> %v", grh, src, dst)
	}
}

// TestUD_QKey: a datagram whose Q_Key is not the receiving QP's is
// dropped and counted; a work request's Q_Key with the high bit set sends
// the QP's own (IBTA 10.2.5), and the wire carries the Q_Key and source
// QPN in the DETH.
func TestUD_QKey(t *testing.T) {
	var seen atomic.Uint64 // last DETH seen A->B: qkey<<32 | src QPN
	o := pairOptions{pipe: porttest.PipeConfig{Filter: func(dir porttest.Direction, f []byte) porttest.Verdict {
		var p rocev2.Packet
		if dir == porttest.AtoB && rocev2.Parse(f, &p) == nil && p.BTH.Opcode == rocev2.UDSendOnly {
			seen.Store(uint64(p.DETH.QKey)<<32 | uint64(p.DETH.SrcQP))
		}
		return porttest.Pass
	}}}
	a, b, qa, qb := udPair(t, o, testQKey, testQKey)
	src := a.buffer(8, 0, false)
	dst := b.buffer(GRHLen+8, memreg.AccessLocalWrite, false)
	mustPost(t, qb.PostReceive("r", []SGE{dst.sge(0, GRHLen+8)}))

	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}, UD: b.dest(qb, 0x11111111)}))
	waitCQ(t, a.scq, 1, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for b.eng.Stats().BadQKey != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Q_Key mismatch not counted: %+v", b.eng.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if got := seen.Load(); got != 0x11111111<<32|0x200 {
		t.Fatalf("DETH on the wire %#x, want Q_Key 0x11111111 and source QPN 0x200", got)
	}
	expectNone(t, b.rcq, 20*time.Millisecond)

	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}, UD: b.dest(qb, 0x80000000)}))
	r := waitCQ(t, b.rcq, 1, 5*time.Second)[0]
	checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, "r")
	if got := seen.Load(); got != testQKey<<32|0x200 {
		t.Fatalf("controlled Q_Key sent as %#x, want the QP's %#x", got>>32, testQKey)
	}
}

// TestUD_Refusals: what a UD QP refuses at post time, and the datagrams
// it drops on receive without failing (rxe: drop_msg for UD without an
// SRQ).
func TestUD_Refusals(t *testing.T) {
	a, b, qa, qb := udPair(t, pairOptions{mtu: rocev2.MTU1024}, testQKey, testQKey)
	src := a.buffer(2048, memreg.AccessRemoteRead, false)
	to := b.dest(qb, testQKey)
	for _, c := range []struct {
		name string
		wr   SendWR
		want ndkpi.Status
	}{
		{"over the path MTU", SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 1025)}, UD: to}, ndkpi.StatusInvalidParameter},
		{"no destination QPN", SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}, UD: UDDest{IP: b.ip, MAC: b.mac, QKey: testQKey}}, ndkpi.StatusInvalidParameter},
		{"no destination address", SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 8)}, UD: UDDest{QPN: 0x300, QKey: testQKey}}, ndkpi.StatusInvalidParameter},
		{"write", SendWR{Op: OpWrite, SGL: []SGE{src.sge(0, 8)}, UD: to}, ndkpi.StatusNotSupported},
		{"read", SendWR{Op: OpRead, SGL: []SGE{src.sge(0, 8)}, UD: to}, ndkpi.StatusNotSupported},
	} {
		if st := qa.PostSend(&c.wr); st != c.want {
			t.Errorf("%s: status %#x, want %#x", c.name, st, c.want)
		}
	}
	cp := defaultParams(rocev2.MTU1024)
	cp.Local = Endpoint{IP: a.ip, MAC: a.mac, QPN: qa.QPN()}
	cp.Remote = Endpoint{IP: b.ip, MAC: b.mac, QPN: qb.QPN()}
	if err := qa.Connect(cp); err == nil {
		t.Error("Connect on a UD QP succeeded")
	}

	// No receive posted, then one too small: both dropped and counted,
	// the small receive still posted for the next datagram that fits.
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 100)}, UD: to}))
	waitUDDropped(t, b, 1)
	small := b.buffer(GRHLen+50, memreg.AccessLocalWrite, false)
	mustPost(t, qb.PostReceive("small", []SGE{small.sge(0, GRHLen+50)}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 100)}, UD: to}))
	waitUDDropped(t, b, 2)
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 50)}, UD: to}))
	r := waitCQ(t, b.rcq, 1, 5*time.Second)[0]
	checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, "small")
	if r.BytesTransferred != GRHLen+50 || qb.State() != StateConnected {
		t.Fatalf("completion %+v, state %v", r, qb.State())
	}
	waitCQ(t, a.scq, 3, 5*time.Second)
}

func waitUDDropped(t *testing.T, h *host, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.eng.Stats().UDDropped != n {
		if time.Now().After(deadline) {
			t.Fatalf("ud_dropped %d, want %d", h.eng.Stats().UDDropped, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUD_RCFramesDropped: an RC request addressed to a UD QP is dropped
// and counted, never executed.
func TestUD_RCFramesDropped(t *testing.T) {
	a, b, _, qb := udPair(t, pairOptions{}, testQKey, testQKey)
	hd := rocev2.Headers{
		Eth: rocev2.EthernetFields{Dst: b.mac, Src: a.mac},
		IP:  rocev2.NewIPFields(a.ip, b.ip),
		UDP: rocev2.UDPFields{SrcPort: 0xC000},
		BTH: rocev2.BTHFields{Opcode: rocev2.RCSendOnly, PKey: rocev2.DefaultPKey, DestQP: qb.QPN()},
	}
	buf := make([]byte, 256)
	n, err := hd.Encode(buf, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	before := b.eng.Stats().NotConnected
	if err := a.port.Transmit([][]byte{buf[:n]}); err != nil {
		t.Fatal(err)
	}
	_ = a.port.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for b.eng.Stats().NotConnected == before {
		if time.Now().After(deadline) {
			t.Fatal("RC frame to a UD QP not counted as not_connected")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUD_AllocatesNothing: a datagram's post, send, receive and both
// completions allocate nothing.
func TestUD_AllocatesNothing(t *testing.T) {
	a, b, qa, qb := udPair(t, pairOptions{poll: PollBusy}, testQKey, testQKey)
	src := a.buffer(64, 0, false)
	dst := b.buffer(GRHLen+64, memreg.AccessLocalWrite, false)
	wr := SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 64)}, UD: b.dest(qb, testQKey)}
	rs := []SGE{dst.sge(0, GRHLen+64)}
	var e cq.Entry
	round := func() {
		qb.PostReceive(nil, rs)
		qa.PostSend(&wr)
		for !a.scq.Pop(&e) {
			runtime.Gosched()
		}
		for !b.rcq.Pop(&e) {
			runtime.Gosched()
		}
	}
	for i := 0; i < 50; i++ {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per datagram, want 0", n)
	}
	if got := binary.BigEndian.Uint32(dst.b[GRHLen-8:]); got != binary.BigEndian.Uint32(a.ip.AsSlice()) {
		t.Fatalf("GRH source %#x", got)
	}
}

// TestUD_SendWithImmediate: OpSendImm on a UD QP sends UD
// SEND_ONLY_WITH_IMMEDIATE (0x65) with the immediate, as udaddy's sends,
// and the receive completion reports it.
func TestUD_SendWithImmediate(t *testing.T) {
	var imm atomic.Uint64 // opcode<<32 | immediate of the last datagram A->B
	o := pairOptions{pipe: porttest.PipeConfig{Filter: func(dir porttest.Direction, f []byte) porttest.Verdict {
		var p rocev2.Packet
		if dir == porttest.AtoB && rocev2.Parse(f, &p) == nil {
			imm.Store(uint64(p.BTH.Opcode)<<32 | uint64(p.ImmDt))
		}
		return porttest.Pass
	}}}
	a, b, qa, qb := udPair(t, o, testQKey, testQKey)
	src := a.buffer(100, 0, false)
	dst := b.buffer(GRHLen+100, memreg.AccessLocalWrite, false)
	mustPost(t, qb.PostReceive("r", []SGE{dst.sge(0, GRHLen+100)}))
	to := b.dest(qb, testQKey)
	mustPost(t, qa.PostSend(&SendWR{Op: OpSendImm, Imm: qa.QPN(), SGL: []SGE{src.sge(0, 100)}, UD: to}))
	r := waitCQ(t, b.rcq, 1, 5*time.Second)[0]
	if r.Status != ndkpi.StatusSuccess || r.BytesTransferred != GRHLen+100 || r.TypeSpecificCompletionOutput != uint64(qa.QPN()) ||
		!r.HasImmediate || r.Immediate != qa.QPN() {
		t.Fatalf("receive %+v", r)
	}
	if got := imm.Load(); got != uint64(rocev2.UDSendOnlyImm)<<32|uint64(qa.QPN()) {
		t.Fatalf("opcode and immediate on the wire %#x", got)
	}
}

// TestUD_ReceiveRefill: a datagram that finds the receive queue empty
// asks the QP's receive refill, on the engine's goroutine, before it is
// dropped: a receive the refill posts takes it; a refill that posts
// nothing leaves the drop as it was.
func TestUD_ReceiveRefill(t *testing.T) {
	a, b, qa, qb := udPair(t, pairOptions{mtu: rocev2.MTU1024}, testQKey, testQKey)
	src := a.buffer(2048, memreg.AccessRemoteRead, false)
	dst := b.buffer(GRHLen+100, memreg.AccessLocalWrite, false)
	to := b.dest(qb, testQKey)
	var calls atomic.Int32
	var post atomic.Bool
	qb.SetReceiveRefill(func() bool {
		calls.Add(1)
		if !post.Swap(false) {
			return false
		}
		mustPost(t, qb.PostReceive("refilled", []SGE{dst.sge(0, GRHLen+100)}))
		return true
	})
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 100)}, UD: to}))
	waitUDDropped(t, b, 1)
	if calls.Load() != 1 {
		t.Fatalf("refill called %d times for one datagram on an empty queue, want 1", calls.Load())
	}
	post.Store(true)
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 100)}, UD: to}))
	r := waitCQ(t, b.rcq, 1, 5*time.Second)[0]
	checkEntry(t, r, ndkpi.StatusSuccess, ndkpi.OpReceive, "refilled")
	if r.BytesTransferred != GRHLen+100 || b.eng.Stats().UDDropped != 1 || calls.Load() != 2 {
		t.Fatalf("completion %+v, ud_dropped %d, refill calls %d", r, b.eng.Stats().UDDropped, calls.Load())
	}
	// A posted receive is taken without asking.
	mustPost(t, qb.PostReceive("posted", []SGE{dst.sge(0, GRHLen+100)}))
	mustPost(t, qa.PostSend(&SendWR{Op: OpSend, SGL: []SGE{src.sge(0, 100)}, UD: to}))
	checkEntry(t, waitCQ(t, b.rcq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpReceive, "posted")
	if calls.Load() != 2 {
		t.Fatalf("refill called with a receive posted: %d calls", calls.Load())
	}
	waitCQ(t, a.scq, 3, 5*time.Second)
}
