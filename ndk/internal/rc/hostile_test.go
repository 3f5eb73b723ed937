package rc

// The hostile-peer suite (issue 13): crafted RoCEv2 frames, with a valid
// ICRC and the live connection's addresses, QPNs and PSNs, injected into
// engine B's port while B is connected to engine A over a porttest.Pipe.
// Every case builds a fresh pair, runs a genuine WRITE first (so B's
// expected PSN is 0xFFFFFF and every case crosses the 2^24 wrap), injects,
// and then checks what B answered (the exact list of ACKs, NAKs, READ
// responses and ATOMIC_ACKNOWLEDGEs it sent), whether B's QP is in error,
// which Stats counter recorded a drop, and that no byte of any of B's
// regions changed except those the verdict names; each region is fenced
// by guard bytes. Cases marked "live" then show the connection still
// works: a genuine WRITE from A lands.
//
// E is B's expected PSN, S its requester's next PSN; MR is a 1024-byte
// region with every remote right; PMTU is 256. "NAK x" ends the
// connection: B's QP is in error and its receives are flushed.
//
//	case                           injected                                verdict (IBTA / rxe)
//	write/bad-token                WRITE_ONLY, R_Key with a wrong key      NAK remote access, error, MR untouched
//	write/deregistered-token       WRITE_ONLY to a deregistered region     NAK remote access, error
//	write/other-pd-token           WRITE_ONLY, a token of another PD       NAK remote access, error
//	write/no-write-right           WRITE_ONLY to a read-only region        NAK remote access, error
//	write/one-past-end             16 bytes at MR end-15                   NAK remote access, error, MR untouched
//	write/below-start              16 bytes at MR start-1                  NAK remote access, error
//	write/va-wraps-2^64            VA 2^64-8, 16 bytes                     NAK remote access, error
//	write/dmalen-wraps             VA MR+8, DMA length 2^32-1              NAK remote access, error
//	write/reth-longer-than-payload RETH 32, 16 bytes                       NAK invalid request, error, MR untouched
//	write/reth-shorter-than-payload RETH 8, 16 bytes                       NAK invalid request, error, MR untouched
//	write/zero-length-garbage-key  RETH 0, R_Key 0, VA 1                   ACK, nothing written (C9-88), live
//	write/middle-without-first     WRITE_MIDDLE at E                       NAK invalid request, error
//	write/last-without-first       WRITE_LAST at E                         NAK invalid request, error
//	write/first-short              WRITE_FIRST with less than PMTU         NAK invalid request, error
//	write/last-longer-than-reth    RETH 512: FIRST 256, LAST 200           NAK invalid request at E+1, FIRST placed
//	write/last-shorter-than-reth   RETH 512: FIRST 256, LAST 100           NAK invalid request at E+1, FIRST placed
//	write/last-empty               RETH 256: FIRST 256, LAST 0             NAK invalid request at E+1 (rxe check_length)
//	write/only-over-pmtu           WRITE_ONLY of 512 bytes, PMTU 256       NAK invalid request, MR untouched (rxe check_length)
//	write/with-immediate-no-receive  RDMA_WRITE_ONLY_WITH_IMMEDIATE, no receive  RNR NAK at E (it consumes one), MR untouched, live
//	send/middle-without-first      SEND_MIDDLE at E, receive posted        NAK invalid request, error, receive flushed
//	send/last-without-first        SEND_LAST at E                          NAK invalid request, error
//	send/only-over-pmtu            SEND_ONLY of 512 bytes, PMTU 256        NAK invalid request, error, receive untouched
//	send/larger-than-receive       SEND_ONLY 128 into a 64-byte receive    receive BUFFER_OVERFLOW, NAK invalid request, error
//	send/overflows-on-last         FIRST 256 + LAST 256 into 300 bytes     FIRST placed, receive BUFFER_OVERFLOW, NAK at E+1
//	send/no-receive                SEND_ONLY, no receive posted            RNR NAK at E, no error, live
//	send-inv/other-pd              SEND_ONLY_INV of another PD's token     receive ACCESS_VIOLATION, NAK invalid request, token still valid
//	send-inv/already-invalidated   two SEND_ONLY_INV of one token          first completes, second NAK invalid request (memreg seed 002)
//	send-inv/not-invalidatable     SEND_ONLY_INV of a plain region         receive ACCESS_VIOLATION, NAK invalid request, token still valid
//	send-inv/memory-window         -                                       not applicable: no memory windows yet
//	read/larger-than-mr            READ 1024 bytes at MR+512               NAK remote access, error, no data
//	read/no-read-right             READ of a write-only region             NAK remote access, error, no data
//	read/va-wraps-2^64             READ VA 2^64-4, 8 bytes                 NAK remote access, error
//	read/dmalen-over-2^31          READ 2^31+1 bytes                       NAK remote access, error
//	read/zero-length-odd-address   READ 0 bytes at VA 3, R_Key 0           one empty READ_RESPONSE_ONLY, no error (C9-88)
//	read/beyond-responder-resources two READs with one resource, one batch first answered, NAK invalid request at E+1, error
//	read/inside-a-write            READ after WRITE_FIRST                  NAK invalid request at E+1, error
//	atomic/misaligned              FETCH_ADD at MR+4                       NAK invalid request, error, MR untouched
//	atomic/no-atomic-right         FETCH_ADD on a read/write region        NAK remote access, error
//	atomic/last-4-bytes            CMP_SWAP at MR+1020                     NAK remote access (bounds before alignment, rxe)
//	atomic/last-4-aligned          FETCH_ADD at the last 4 of a 12-byte MR NAK remote access, error
//	atomic/inside-a-send           FETCH_ADD after SEND_FIRST              NAK invalid request at E+1, error
//	psn/far-future                 WRITEs at E+2^23-1, E+2^22                 one PSN sequence NAK naming E, no error, live
//	psn/half-way                   WRITE at E+2^23                         ACK E-1: a duplicate (rxe psn_compare), not executed, live
//	psn/wrap                       WRITEs at 0xFFFFFF and 0, then 0xFFFFFF ACK 0 twice, executed once each
//	psn/duplicate-write            WRITE at E-1 (the warm-up's PSN)        ACK E-1, not executed, live
//	psn/ancient-duplicate-write    WRITE at E-2^23+1                       ACK E-1, not executed, live
//	psn/ancient-duplicate-read     READ at E-1000                          dropped (no resource), Stale, live
//	psn/duplicate-read-longer      READ 256 at E, again with 512           answered once; the longer one dropped (rxe)
//	psn/duplicate-read-shorter     READ 512 at E, again with 100           the duplicate answered with 100 bytes (rxe)
//	psn/duplicate-read-invalidated READ, SEND_INV of its token, READ again NAK remote access, no data (rxe rechecks the MR)
//	psn/duplicate-read-deregistered READ, deregister, READ again           NAK remote access, no data
//	psn/duplicate-atomic           FETCH_ADD +5 at E, again with +100      the saved original again, executed once
//	dup/read-same-key              READ 64 at E, the same again (control)  answered twice
//	dup/read-wrong-key             READ at E, again with a wrong R_Key     NAK remote access, no data (re-validated, not the saved key)
//	dup/read-other-regions-key     READ at E, again with another MR's key  NAK remote access: not the key the READ was granted
//	dup/read-second-packet-deregistered READ 512, deregister, READ E+1     NAK remote access at E+1
//	dup/atomic-wrong-key           FETCH_ADD at E, again with a wrong key  NAK remote access, executed once
//	dup/atomic-deregistered        FETCH_ADD, deregister, FETCH_ADD again  NAK remote access, executed once
//	dup/atomic-other-address       FETCH_ADD at E, again at MR+8           dropped, Stale, executed once, live
//	dup/write-wrong-key            WRITE_ONLY at E-1 with a wrong key      NAK remote access (not re-ACKed), MR untouched
//	dup/write-no-write-right       WRITE_FIRST at E-1 to a read-only MR    NAK remote access
//	dup/write-zero-length-any-key  WRITE_ONLY at E-1, 0 bytes, R_Key 0     ACK E-1 (C9-88), live
//	forged/ack-never-sent          ACK for S+10                            dropped, Stale; the request completes later
//	forged/ack-nothing-outstanding ACK with nothing outstanding            dropped, Stale
//	forged/nak-never-sent          remote access NAK for S+5               dropped, no error
//	forged/seq-nak-never-sent      sequence NAK for S+5                    dropped, Stale; the request completes later
//	forged/rnr-never-sent          RNR NAK for S+5                         dropped
//	forged/read-response-never-sent READ_RESPONSE_ONLY for S+3             dropped, sink untouched
//	forged/read-response-for-write READ_RESPONSE_ONLY at a WRITE's PSN     dropped, sink untouched
//	forged/atomic-ack-never-sent   ATOMIC_ACKNOWLEDGE for S+2              dropped
//	forged/read-response-too-long  RESPONSE_ONLY, 100 bytes for a 64 READ  READ fails DATA_OVERRUN (LOC_LEN_ERR), sink untouched
//	aeth/reserved-type             ACK with syndrome type 0b10             REMOTE_RESOURCES, BAD_RESP_ERR at once, error (rxe check_ack)
//	aeth/reserved-type-zero        ACK with syndrome 0x40                  the same
//	aeth/bit-7                     ACK with syndrome bit 7 set             the same (bit 7 is reserved)
//	aeth/read-response-nak         READ_RESPONSE_ONLY with a NAK syndrome  the same: a READ response's AETH is an ACK
//	aeth/read-response-rnr         READ_RESPONSE_ONLY with an RNR syndrome the same
//	aeth/read-response-reserved    READ_RESPONSE_ONLY with syndrome 0x5F   the same
//	aeth/atomic-ack-nak            ATOMIC_ACKNOWLEDGE with a NAK syndrome  REMOTE_RESOURCES, BAD_RESP_ERR at once, error
//	aeth/atomic-ack-reserved       ATOMIC_ACKNOWLEDGE with syndrome 0x41   the same
//	aeth/atomic-ack-with-credits   ATOMIC_ACKNOWLEDGE, credit code 7       the atomic completes successfully
//	aeth/ack-with-credits          ACK with credit code 5 (control)        the request completes successfully
//	aeth/read-response-with-credits READ_RESPONSE_ONLY, credit code 3      the READ completes, its data placed
//	aeth/reserved-nak-code         NAK code 7 at the WRITE's PSN           REMOTE_RESOURCES, REM_OP_ERR, error (rxe "unexpected nak")
//	aeth/remote-operational        NAK code 3 at the WRITE's PSN           REMOTE_RESOURCES, REM_OP_ERR, error
//	dest/write-*, dest/read-*      WRITE or READ to another IP (v4, v6,    dropped before it runs, WrongDestination, MR untouched, live
//	                               broadcast, multicast) or MAC
//	dest/*-to-b-ipv4, -ipv6        the same frames addressed to B (control) executed: ACK, or the READ answered
//	malformed/pad-beyond-payload   WRITE_ONLY, no payload, PadCnt 3        dropped, Malformed
//	malformed/pad-disagrees        RETH 16, 16 bytes on the wire, PadCnt 2 NAK invalid request (14 bytes != 16), MR untouched
//	malformed/pad-on-ack           ACKNOWLEDGE with PadCnt 1               dropped, Malformed
//	malformed/truncated-reth       WRITE_ONLY with 8 of RETH's 16 bytes    dropped, Malformed
//	malformed/truncated-atomiceth  FETCH_ADD with 16 of AtomicETH's 28     dropped, Malformed
//	malformed/truncated-aeth       ACKNOWLEDGE without its AETH            dropped, Malformed
//	malformed/read-with-payload    READ request carrying 8 bytes           dropped, Malformed
//	malformed/wrong-pkey           WRITE_ONLY with P_Key 0x8123            dropped before the QP is looked up, BadPKey (C9-42, rxe check_keys)
//	malformed/bad-icrc             WRITE_ONLY with a flipped ICRC bit      dropped, BadICRC
//
// Defects the suite found, fixed in the engine and kept as regressions:
// write/last-empty, write/only-over-pmtu and send/only-over-pmtu (a LAST
// or ONLY packet was not checked against the path MTU); the aeth cases
// with REM_OP_ERR (a remote operational or reserved NAK code completed
// with REM_INV_REQ_ERR); psn/duplicate-read-shorter (the rest of the
// original READ was sent instead of the length asked for);
// psn/duplicate-read-invalidated and psn/duplicate-read-deregistered (a
// duplicate READ was answered from memory whose token no longer allowed
// it); malformed/wrong-pkey (the P_Key was not checked).

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port/porttest"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// injectPort is engine B's port: the pipe's end, plus frames a test
// injects, which the next Receive returns ahead of the pipe's, all in
// one batch.
type injectPort struct {
	port.Port
	mu      sync.Mutex
	pending [][]byte
	mine    bool // the last Receive returned injected frames (engine goroutine)
}

func (p *injectPort) Receive(out [][]byte) int {
	p.mu.Lock()
	if len(p.pending) > 0 {
		n := copy(out, p.pending)
		if n == len(p.pending) {
			p.pending = p.pending[:0] // the next inject reuses the array (TestDroppedFramesAllocateNothing)
		} else {
			p.pending = p.pending[n:]
		}
		p.mu.Unlock()
		p.mine = true
		return n
	}
	p.mu.Unlock()
	p.mine = false
	return p.Port.Receive(out)
}

func (p *injectPort) Release() {
	if !p.mine {
		p.Port.Release()
	}
}

func (p *injectPort) inject(frames ...[]byte) {
	p.mu.Lock()
	p.pending = append(p.pending, frames...)
	p.mu.Unlock()
	p.Doorbell()
}

// answer is one frame B's responder sent: ACK, NAK, READ response or
// ATOMIC_ACKNOWLEDGE.
type answer struct {
	op   rocev2.Opcode
	psn  rocev2.PSN
	syn  rocev2.Syndrome // ACKNOWLEDGE, READ_RESPONSE_FIRST/LAST/ONLY, ATOMIC_ACKNOWLEDGE
	n    int             // payload bytes
	orig uint64          // ATOMIC_ACKNOWLEDGE
}

var okSyn = rocev2.ACKSyndrome(rocev2.CreditInvalid)

func ackAt(psn rocev2.PSN) answer { return answer{op: rocev2.RCAck, psn: psn, syn: okSyn} }
func nakAt(psn rocev2.PSN, c rocev2.NAKCode) answer {
	return answer{op: rocev2.RCAck, psn: psn, syn: rocev2.NAKSyndrome(c)}
}

// recorder watches the pipe: it records B's answers and, while hold is
// set, loses B's requests (so they stay outstanding for forged answers).
type recorder struct {
	mu   sync.Mutex
	out  []answer
	hold atomic.Bool
}

func (r *recorder) filter(dir porttest.Direction, frame []byte) porttest.Verdict {
	if dir != porttest.BtoA {
		return porttest.Pass
	}
	var p rocev2.Packet
	if rocev2.Parse(frame, &p) != nil {
		return porttest.Pass
	}
	if !p.BTH.Opcode.Info().Response {
		if r.hold.Load() {
			return porttest.Drop
		}
		return porttest.Pass
	}
	r.mu.Lock()
	r.out = append(r.out, answer{p.BTH.Opcode, p.BTH.PSN, p.AETH.Syndrome, len(p.Payload), p.AtomicAckETH.OrigData})
	r.mu.Unlock()
	return porttest.Pass
}

func (r *recorder) take() []answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.out
	r.out = nil
	return out
}

// hostile is one case's world: A and B connected, B's port open to
// injection, B's regions fenced.
type hostile struct {
	t      *testing.T
	a, b   *host
	qa, qb *QP
	inj    *injectPort
	rec    *recorder
	mr     *buffer // MR: 1024 bytes, every right
	fenced []fence
	ipID   uint16
}

// fence is a region of B's and what it must hold at the end of the case.
type fence struct {
	b    *buffer
	want []byte
}

type hostileOptions struct {
	inboundReads int  // B's responder resources (default 16)
	ipv6         bool // A and B talk over IPv6 (2001:2::1, 2001:2::2)
}

const (
	hostileMTU = rocev2.MTU256
	pmtu       = 256
	allRemote  = memreg.AccessLocalWrite | memreg.AccessRemoteRead | memreg.AccessRemoteWrite | memreg.AccessRemoteAtomic
	aPSN       = 0xFFFFFE // the warm-up WRITE takes it: B expects 0xFFFFFF
	bPSN       = 0x1000
)

func newHostile(t *testing.T, o hostileOptions) *hostile {
	t.Helper()
	rec := &recorder{}
	pipe, err := porttest.NewPipe(porttest.PipeConfig{Depth: 1024, Filter: rec.filter})
	if err != nil {
		t.Fatal(err)
	}
	po := &pairOptions{}
	inj := &injectPort{Port: pipe.B()}
	h := &hostile{t: t, inj: inj, rec: rec}
	ipA, ipB := "198.18.0.1", "198.18.0.2"
	if o.ipv6 {
		ipA, ipB = "2001:2::1", "2001:2::2"
	}
	h.a = newHost(t, pipe.A(), ipA, 1, po)
	h.b = newHost(t, inj, ipB, 2, po)
	h.qa, h.qb = h.a.createQP(0x100, 64), h.b.createQP(0x100, 64)
	pA := defaultParams(hostileMTU)
	pA.Local = Endpoint{IP: h.a.ip, MAC: h.a.mac, QPN: 0x100, PSN: aPSN}
	pA.Remote = Endpoint{IP: h.b.ip, MAC: h.b.mac, QPN: 0x100, PSN: bPSN}
	pB := pA
	pB.Local, pB.Remote = pA.Remote, pA.Local
	if o.inboundReads > 0 {
		pB.InboundReadLimit = o.inboundReads
	}
	if err := h.qa.Connect(pA); err != nil {
		t.Fatal(err)
	}
	if err := h.qb.Connect(pB); err != nil {
		t.Fatal(err)
	}
	h.mr = h.region(1024, allRemote, testPD, false)
	h.genuineWrite() // the connection is live; B now expects 0xFFFFFF
	if e := h.ePSN(); e != 0xFFFFFF {
		t.Fatalf("B expects PSN %#x after the warm-up, want 0xFFFFFF", e)
	}
	rec.take()
	return h
}

// region registers n fenced bytes of B's in protection domain pd.
func (h *hostile) region(n int, access memreg.Access, pd uint32, invalidatable bool) *buffer {
	h.t.Helper()
	all := bytes.Repeat([]byte{0xEE}, n+2*guardLen)
	b := &buffer{all: all, b: all[guardLen : guardLen+n]}
	tok, err := h.b.regions.Register(memreg.Region{PD: pd, VA: addrOf(b.b), Buf: b.b, Access: access, Invalidatable: invalidatable})
	if err != nil {
		h.t.Fatal(err)
	}
	b.tokens = tok
	h.fenced = append(h.fenced, fence{b, bytes.Repeat([]byte{0xEE}, n)})
	return b
}

// expect records that off.. of b must hold data at the end of the case.
func (h *hostile) expect(b *buffer, off int, data []byte) {
	for i := range h.fenced {
		if h.fenced[i].b == b {
			copy(h.fenced[i].want[off:], data)
			return
		}
	}
	h.t.Fatal("expect: not a fenced region")
}

// genuineWrite has A write 8 bytes into a fresh region of B's and checks
// they land: the connection works.
func (h *hostile) genuineWrite() {
	h.t.Helper()
	src := h.a.buffer(8, 0, false)
	fill(src.b, 77)
	dst := h.region(8, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, testPD, false)
	mustPost(h.t, h.qa.PostSend(&SendWR{Op: OpWrite, Context: "genuine", SGL: []SGE{src.sge(0, 8)},
		RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	checkEntry(h.t, waitCQ(h.t, h.a.scq, 1, 5*time.Second)[0], ndkpi.StatusSuccess, ndkpi.OpWrite, "genuine")
	h.b.eng.Stats() // orders the engine's placement before the check
	h.expect(dst, 0, src.b)
}

// onB runs fn on B's engine goroutine.
func (h *hostile) onB(fn func(t *qpTransport)) {
	if err := h.b.eng.do(func() { fn(&h.qb.t) }); err != nil {
		h.t.Fatal(err)
	}
}

func (h *hostile) ePSN() (p rocev2.PSN) {
	h.onB(func(t *qpTransport) { p = t.ePSN })
	return p
}

// resync moves A's requester to the PSN B expects, as if A had sent what
// the case forged in its name, so that a genuine request is executed.
func (h *hostile) resync() {
	e := h.ePSN()
	if err := h.a.eng.do(func() {
		t := &h.qa.t
		if t.sqHead == t.sqStart {
			t.nextPSN, t.una = e, e
		}
	}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *hostile) nextPSN() (p rocev2.PSN) {
	h.onB(func(t *qpTransport) { p = t.nextPSN })
	return p
}

// settle returns once B has received everything injected before and sent
// its answers: control calls run after receive and before transmit, so
// three of them span a whole loop; the sleep lets held ACKs leave.
func (h *hostile) settle() {
	for i := 0; i < 3; i++ {
		h.onB(func(*qpTransport) {})
	}
	time.Sleep(time.Millisecond)
	for i := 0; i < 3; i++ {
		h.onB(func(*qpTransport) {})
	}
}

// hdr returns headers as A would send them to B's QP.
func (h *hostile) hdr(op rocev2.Opcode, psn rocev2.PSN) rocev2.Headers {
	h.ipID++
	ip := rocev2.NewIPFields(h.a.ip, h.b.ip)
	ip.ID = h.ipID
	return rocev2.Headers{
		Eth: rocev2.EthernetFields{Dst: h.b.mac, Src: h.a.mac},
		IP:  ip,
		UDP: rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, 0x100, 0x100)},
		BTH: rocev2.BTHFields{Opcode: op, PSN: psn, PKey: rocev2.DefaultPKey, DestQP: h.qb.QPN(), AckReq: true},
	}
}

func (h *hostile) frame(hd rocev2.Headers, payload []byte) []byte {
	h.t.Helper()
	buf := make([]byte, hd.FrameLen(len(payload)))
	if _, err := hd.Encode(buf, payload); err != nil {
		h.t.Fatalf("encode %v: %v", hd.BTH.Opcode, err)
	}
	return buf
}

func (h *hostile) write(op rocev2.Opcode, psn rocev2.PSN, va uint64, rkey, dmaLen uint32, payload []byte) []byte {
	hd := h.hdr(op, psn)
	hd.RETH = rocev2.RETHFields{VA: va, RKey: rkey, DMALen: dmaLen}
	return h.frame(hd, payload)
}

func (h *hostile) read(psn rocev2.PSN, va uint64, rkey, n uint32) []byte {
	hd := h.hdr(rocev2.RCReadRequest, psn)
	hd.RETH = rocev2.RETHFields{VA: va, RKey: rkey, DMALen: n}
	return h.frame(hd, nil)
}

func (h *hostile) atomicOp(op rocev2.Opcode, psn rocev2.PSN, va uint64, rkey uint32, cmp, swapAdd uint64) []byte {
	hd := h.hdr(op, psn)
	hd.AtomicETH = rocev2.AtomicETHFields{VA: va, RKey: rkey, Compare: cmp, SwapAdd: swapAdd}
	return h.frame(hd, nil)
}

func (h *hostile) send(op rocev2.Opcode, psn rocev2.PSN, payload []byte, ieth uint32) []byte {
	hd := h.hdr(op, psn)
	hd.IETH = ieth
	return h.frame(hd, payload)
}

// answerFrame forges a response to B's requester: ACK, NAK, READ
// response or ATOMIC_ACKNOWLEDGE.
func (h *hostile) answerFrame(op rocev2.Opcode, psn rocev2.PSN, syn rocev2.Syndrome, payload []byte) []byte {
	hd := h.hdr(op, psn)
	hd.BTH.AckReq = false
	hd.AETH = rocev2.AETHFields{Syndrome: syn, MSN: 1}
	return h.frame(hd, payload)
}

// reICRC recomputes the ICRC of an IPv4 frame after a test edited it.
func reICRC(t *testing.T, f []byte) {
	t.Helper()
	l3 := rocev2.EthernetLen
	crc, err := rocev2.ICRC(f[l3:len(f)-rocev2.ICRCLen], nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	rocev2.PutICRC(f[len(f)-rocev2.ICRCLen:], crc)
}

// bthAt is where the BTH of an IPv4 frame without VLAN starts.
const bthAt = rocev2.EthernetLen + rocev2.IPv4Len + rocev2.UDPLen

func payloadOf(n int, seed uint64) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}

func u64(b []byte) uint64 { return binary.NativeEndian.Uint64(b) }

func putU64(b []byte, v uint64) { binary.NativeEndian.PutUint64(b, v) }

// hostileCase is one row of the table at the top of this file.
type hostileCase struct {
	name string
	opts hostileOptions
	// run injects and returns B's answers the case expects, in order.
	run func(h *hostile) []answer
	// fails: B's QP ends in error.
	fails bool
	// counter, when set, is a Stats count the case must raise.
	counter func(Stats) uint64
	// live: a genuine WRITE from A lands afterwards.
	live bool
}

func TestHostilePeer(t *testing.T) {
	cases := hostileCases()
	if len(cases) < 40 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runHostile(t, c) })
	}
}

func runHostile(t *testing.T, c hostileCase) {
	h := newHostile(t, c.opts)
	before := h.b.eng.Stats()
	want := c.run(h)
	h.settle()
	got := h.rec.take()
	if len(got) != len(want) {
		t.Fatalf("B answered %+v, want %+v", got, want)
	}
	for i := range want {
		w, g := want[i], got[i]
		if g != w {
			t.Fatalf("answer %d: %+v, want %+v (all: %+v)", i, g, w, got)
		}
	}
	if failed := h.qb.State() == StateError; failed != c.fails {
		t.Fatalf("B's QP in error: %v, want %v", failed, c.fails)
	}
	after := h.b.eng.Stats()
	if c.counter != nil && c.counter(after) == c.counter(before) {
		t.Fatalf("the drop was not counted: before %+v after %+v", before, after)
	}
	for i, f := range h.fenced {
		if !f.b.guardsIntact() {
			t.Fatalf("region %d: bytes outside it changed", i)
		}
		sameBytes(t, "region contents", f.b.b, f.want)
	}
	if c.live {
		h.resync()
		h.genuineWrite()
	}
}
