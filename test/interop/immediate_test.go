package interop

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// immPort is the rdma_cm port of the immediate-data case.
const immPort = 18610

// immMessages is how many SENDs and WRITEs with immediate each side
// posts per connection.
const immMessages = 4

// The immediates' tags, as guest/imm.c has them: the message index in
// the low bits.
const (
	immTagSend  = 0x51000000
	immTagWrite = 0x57000000
)

// testImmediate: SEND and RDMA WRITE with immediate between ndkxdp and
// rxe, both ways on one connection, with rxe as client and as server
// (guest/imm.c, ndkxdp-imm: the image's perftest 4.5-0.17 has no
// --write_with_imm). Each side sends a descriptor of its target region,
// then immMessages SEND_WITH_IMM and RDMA_WRITE_WITH_IMM; each checks
// the other's as its receives complete: the SEND's with the immediate
// and its bytes, the WRITE's as verbs' IBV_WC_RECV_RDMA_WITH_IMM
// (ndkxdp: OpReceiveWriteWithImmediate) with the WRITE's length and the
// bytes in the target. Sizes: 0 (a WRITE with immediate of no bytes, a
// bare notification), 1, and 5000 (several packets at either MTU,
// SEND_LAST/RDMA_WRITE_LAST_WITH_IMMEDIATE).
//
// The "late" cases post the receiving side's message receives only 300
// ms after its descriptor went out, so the first SEND or WRITE with
// immediate finds none: rxe must answer ndkxdp's with RNR NAKs
// (rxe_resp.c checks the receive queue for RXE_RWR_MASK opcodes, WRITE
// with immediate included) and ndkxdp must answer rxe's the same way; the
// capture shows the RNR NAKs and the messages still arrive once each.
func testImmediate(t *testing.T, p *peer) {
	for _, c := range []struct {
		name       string
		rxeServer  bool
		size       int
		late       string // "rxe", "ndkxdp" or ""
		wantRNRIn  bool   // RNR NAKs from rxe
		wantRNROut bool   // RNR NAKs from ndkxdp
	}{
		{name: "rxe_client/0B", size: 0},
		{name: "rxe_client/5000B", size: 5000},
		{name: "rxe_server/1B", rxeServer: true, size: 1},
		{name: "rxe_server/5000B", rxeServer: true, size: 5000},
		{name: "rxe_server/rxe_late", rxeServer: true, size: 3000, late: "rxe", wantRNRIn: true},
		{name: "rxe_client/ndkxdp_late", size: 3000, late: "ndkxdp", wantRNROut: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p.capture(t)
			ctx := ctxFor(t, 3*time.Minute)
			before := len(p.framesNow(t))
			guestLate := ""
			if c.late == "rxe" {
				guestLate = " late"
			}
			h := &immHost{p: p, n: immMessages, size: c.size, late: c.late == "ndkxdp"}
			var out string
			if c.rxeServer {
				cmd := fmt.Sprintf("%s server %d %d %d%s", ImmPath, immPort, immMessages, c.size, guestLate)
				out = p.guestServer(t, ctx, cmd, immPort, func() error { return h.client(ctx) })
			} else {
				cmd := fmt.Sprintf("%s client %v %d %d %d%s", ImmPath, HostIPv4, immPort, immMessages, c.size, guestLate)
				var err error
				if out, err = h.server(ctx, cmd); err != nil {
					t.Fatalf("%v\nndkxdp:\n%s", err, h.log.String())
				}
			}
			t.Logf("ndkxdp-imm in the guest:\n%sndkxdp:\n%s", out, h.log.String())
			for i := 0; i < immMessages; i++ {
				for _, want := range []string{
					fmt.Sprintf("recv_with_imm %d: opcode 128 flags %#x imm %#x byte_len %d: ok", i, 3, immTagSend|i, c.size),
					fmt.Sprintf("recv_rdma_with_imm %d: opcode 129 flags %#x imm %#x byte_len %d: ok", i, 3, immTagWrite|i, c.size),
				} {
					if !strings.Contains(out, want) {
						t.Fatalf("the guest did not print %q", want)
					}
				}
			}
			if !strings.Contains(out, "PASS: 0 failures") {
				t.Fatal("the guest did not pass")
			}
			var in, outRNR, imm int
			timers := map[string]map[rocev2.RNRTimer]int{"rxe": {}, "ndkxdp": {}}
			var pkt rocev2.Packet
			for _, f := range p.framesNow(t)[before:] {
				if rocev2.Parse(f.Data, &pkt) != nil {
					continue
				}
				switch op := pkt.BTH.Opcode; {
				case op == rocev2.RCAck && pkt.AETH.Syndrome.Type() == rocev2.AckTypeRNRNAK:
					if f.Outgoing {
						outRNR++
						timers["ndkxdp"][pkt.AETH.Syndrome.RNRTimer()]++
					} else {
						in++
						timers["rxe"][pkt.AETH.Syndrome.RNRTimer()]++
					}
				case op.Info().Headers&rocev2.HasImmDt != 0:
					imm++
				}
			}
			t.Logf("frames with ImmDt %d, RNR NAKs from rxe %d, from ndkxdp %d; their RNR timer codes %v", imm, in, outRNR, timers)
			if imm < 4*immMessages {
				t.Fatalf("%d frames with ImmDt, want at least %d", imm, 4*immMessages)
			}
			if c.wantRNRIn != (in > 0) || c.wantRNROut != (outRNR > 0) {
				t.Fatalf("RNR NAKs from rxe %d (want some: %v), from ndkxdp %d (want some: %v)", in, c.wantRNRIn, outRNR, c.wantRNROut)
			}
			// rxe's QP, connected through the kernel's IB CM, asks for
			// RNR timer code 0, the longest wait (655.36 ms): cm.c's
			// cm_init_qp_rtr_attr sets min_rnr_timer 0 for RC, and
			// librdmacm does not change it. ndkxdp waits it out, once.
			if in > 0 && timers["rxe"][rocev2.RNRTimer(0)] != in {
				t.Fatalf("rxe's RNR NAKs asked for timers %v, want code 0 (655.36 ms) in all", timers["rxe"])
			}
		})
	}
}

// immHost is ndkxdp's side of testImmediate, on the ndk API itself, doing
// what guest/imm.c does.
type immHost struct {
	p       *peer
	n, size int
	late    bool
	log     bytes.Buffer

	mem      []byte
	mr       *ndk.MR
	qp       *ndk.QP
	scq, rcq *ndk.CQ
}

// Memory layout, as in guest/imm.c: the peer's descriptor, ours, the
// goodbyes, the source, 2n receive buffers, n WRITE targets.
const (
	immDescIn  = 0
	immDescOut = 16
	immByeIn   = 32
	immByeOut  = 40
	immSrc     = 64
)

func (h *immHost) recvAt(k int) int   { return immSrc + h.size + k*h.size }
func (h *immHost) targetAt(i int) int { return h.recvAt(2*h.n) + i*h.size }

func immPattern(i, j int) byte { return byte(i*31 + j*7 + 1) }

func (h *immHost) logf(format string, a ...any) { fmt.Fprintf(&h.log, format+"\n", a...) }

func (h *immHost) sgl(off, n int) []ndk.SGE {
	if n == 0 {
		return nil
	}
	return []ndk.SGE{{Addr: h.mr.Addr() + uint64(off), Length: uint32(n), Token: h.mr.LocalToken()}}
}

// open makes the QP, its CQs and memory and posts the receives that go
// before the connection.
func (h *immHost) open() error {
	ad, pd := h.p.dev.Adapter, h.p.dev.PD
	var err error
	if h.mem, err = ad.Memory(h.targetAt(h.n) + 64); err != nil {
		return err
	}
	if h.mr, err = pd.RegisterMR(h.mem, ndk.MRFlagAllowRemoteWrite); err != nil {
		return err
	}
	if h.scq, err = ad.CreateCQ(16, nil); err != nil {
		return err
	}
	if h.rcq, err = ad.CreateCQ(4*immMessages+8, nil); err != nil {
		return err
	}
	if h.qp, err = pd.CreateQP(ndk.QPConfig{ReceiveCQ: h.rcq, InitiatorCQ: h.scq,
		ReceiveQueueDepth: 2*immMessages + 4, InitiatorQueueDepth: 8, MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1}); err != nil {
		return err
	}
	if err := h.qp.Receive("descriptor", h.sgl(immDescIn, 16)); err != nil {
		return err
	}
	if !h.late {
		return h.postMessages()
	}
	return nil
}

func (h *immHost) postMessages() error {
	for k := 0; k < 2*h.n; k++ {
		if err := h.qp.Receive(k, h.sgl(h.recvAt(k), max(h.size, 1))); err != nil {
			return err
		}
	}
	return h.qp.Receive("bye", h.sgl(immByeIn, 1))
}

func (h *immHost) close() {
	if h.qp != nil {
		_ = h.qp.Close()
	}
	for _, c := range []*ndk.CQ{h.scq, h.rcq} {
		if c != nil {
			c.Close()
		}
	}
	if h.mr != nil {
		_ = h.mr.Deregister()
	}
}

// server accepts the guest's connection on immPort and runs the exchange
// while cmd runs in the guest; it returns the guest's output.
func (h *immHost) server(ctx context.Context, cmd string) (string, error) {
	reqs := make(chan *ndk.Connector, 1)
	var l *ndk.Listener
	if err := h.p.vm.Host.Do(func() (err error) {
		l, err = h.p.dev.Adapter.CreateListener(func(c *ndk.Connector) {
			select {
			case reqs <- c:
			default:
				_ = c.Reject(nil)
				c.Close()
			}
		})
		if err != nil {
			return err
		}
		return l.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), immPort))
	}); err != nil {
		return "", fmt.Errorf("listen on %d: %w", immPort, err)
	}
	defer l.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serr := make(chan error, 1)
	go func() {
		serr <- func() error {
			defer h.close()
			if err := h.open(); err != nil {
				return err
			}
			var c *ndk.Connector
			select {
			case c = <-reqs:
			case <-sctx.Done():
				return fmt.Errorf("waiting for a connect request: %w", sctx.Err())
			}
			defer c.Close()
			gone := make(chan struct{})
			var once sync.Once
			if err := c.Accept(sctx, h.qp, 1, 1, nil, func() { once.Do(func() { close(gone) }) }); err != nil {
				return fmt.Errorf("accept: %w", err)
			}
			if err := h.exchange(sctx); err != nil {
				return err
			}
			// The guest disconnects after its goodbye.
			select {
			case <-gone:
			case <-time.After(10 * time.Second):
			}
			return nil
		}()
	}()
	out, errOut, code, err := h.p.vm.Run(ctx, cmd)
	if code != 0 || err != nil {
		cancel()
	}
	var se error
	select {
	case se = <-serr:
	case <-time.After(2 * time.Minute):
		se = errors.New("server did not finish")
	}
	if se != nil || err != nil || code != 0 {
		return out + errOut, fmt.Errorf("ndkxdp server: %v; guest %q: exit %d (%v)\n%s%s", se, cmd, code, err, out, errOut)
	}
	return out + errOut, nil
}

// client connects to the guest's server and runs the exchange.
func (h *immHost) client(ctx context.Context) error {
	defer h.close()
	if err := h.open(); err != nil {
		return err
	}
	c, err := h.p.dev.Adapter.CreateConnector()
	if err != nil {
		return err
	}
	defer c.Close()
	dst := netip.AddrPortFrom(GuestIPv4, immPort)
	if err := c.Connect(ctx, h.qp, netip.AddrPort{}, dst, 1, 1, nil); err != nil {
		return fmt.Errorf("connect to %v: %w", dst, err)
	}
	if err := c.CompleteConnect(nil); err != nil {
		return fmt.Errorf("complete connect: %w", err)
	}
	if err := h.exchange(ctx); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = c.Disconnect(dctx)
	return nil
}

// exchange is guest/imm.c's main after the connection.
func (h *immHost) exchange(ctx context.Context) error {
	binary.BigEndian.PutUint64(h.mem[immDescOut:], h.mr.Addr()+uint64(h.targetAt(0)))
	binary.BigEndian.PutUint32(h.mem[immDescOut+8:], h.mr.RemoteToken())
	if err := h.qp.Send("descriptor", h.sgl(immDescOut, 16), 0); err != nil {
		return err
	}
	if err := complete(ctx, h.scq, ndk.OpSend); err != nil {
		return fmt.Errorf("descriptor: %w", err)
	}
	if h.late {
		time.Sleep(300 * time.Millisecond)
		if err := h.postMessages(); err != nil {
			return err
		}
		h.logf("receives posted late")
	}
	r, err := next(ctx, h.rcq)
	if err != nil {
		return fmt.Errorf("peer descriptor: %w", err)
	}
	if r.Status != ndk.StatusSuccess || r.Type != ndk.OpReceive || r.Flags != 0 || r.BytesTransferred != 16 {
		return fmt.Errorf("peer descriptor: %+v", r)
	}
	raddr := binary.BigEndian.Uint64(h.mem[immDescIn:])
	rkey := binary.BigEndian.Uint32(h.mem[immDescIn+8:])
	h.logf("peer target %#x rkey %#x", raddr, rkey)
	for i := 0; i < h.n; i++ {
		for j := 0; j < h.size; j++ {
			h.mem[immSrc+j] = immPattern(i, j)
		}
		if err := h.qp.SendWithImmediate(i, h.sgl(immSrc, h.size), 0, immTagSend|uint32(i)); err != nil {
			return err
		}
		if err := complete(ctx, h.scq, ndk.OpSend); err != nil {
			return fmt.Errorf("send with immediate %d: %w", i, err)
		}
		if err := h.qp.WriteWithImmediate(i, h.sgl(immSrc, h.size), raddr+uint64(i*h.size), rkey, 0, immTagWrite|uint32(i)); err != nil {
			return err
		}
		if err := complete(ctx, h.scq, ndk.OpWrite); err != nil {
			return fmt.Errorf("write with immediate %d: %w", i, err)
		}
	}
	h.logf("sent %d send with immediate and %d write with immediate of %d bytes", h.n, h.n, h.size)
	failures := 0
	for k := 0; k < 2*h.n; k++ {
		i, write := k/2, k%2 == 1
		r, err := next(ctx, h.rcq)
		if err != nil {
			return fmt.Errorf("message %d: %w", k, err)
		}
		h.p.dev.Adapter.Stats() // orders the engine's placement before the reads below
		want, typ, data := uint32(immTagSend|i), ndk.OpReceive, []byte(nil)
		if write {
			want, typ = uint32(immTagWrite|i), ndk.OpReceiveWriteWithImmediate
			data = h.mem[h.targetAt(i):][:h.size]
		} else if slot, ok := r.RequestContext.(int); ok {
			data = h.mem[h.recvAt(slot):][:h.size]
		}
		ok := r.Status == ndk.StatusSuccess && r.Type == typ && r.Flags == ndk.ResultWithImmediate &&
			r.Immediate == want && r.BytesTransferred == uint32(h.size) && len(data) == h.size
		for j := 0; ok && j < h.size; j++ {
			ok = data[j] == immPattern(i, j)
		}
		verdict := "ok"
		if !ok {
			verdict = "WRONG"
			failures++
		}
		h.logf("%v %d: flags %v immediate %#x bytes %d: %s", r.Type, i, r.Flags, r.Immediate, r.BytesTransferred, verdict)
	}
	h.mem[immByeOut] = 'b'
	if err := h.qp.Send("bye", h.sgl(immByeOut, 1), 0); err != nil {
		return err
	}
	if err := complete(ctx, h.scq, ndk.OpSend); err != nil {
		return fmt.Errorf("goodbye: %w", err)
	}
	if _, err := next(ctx, h.rcq); err != nil {
		return fmt.Errorf("peer goodbye: %w", err)
	}
	if failures > 0 {
		return fmt.Errorf("%d of the guest's messages arrived wrong", failures)
	}
	return nil
}

// testPerftestWriteImm: `ib_write_bw --write_with_imm` and `ib_write_lat
// --write_with_imm` against ndkxdp's perf, rxe as server and as client,
// where the guest's perftest has the
// option (24.01 and later). Debian 12's 4.5-0.17 does not: there the case
// pins its refusal, so that the case runs as soon as the peer's perftest
// has it (testImmediate moves the same verbs with ndkxdp-imm meanwhile).
func testPerftestWriteImm(t *testing.T, p *peer) {
	ctx := ctxFor(t, 30*time.Second)
	help, helpErr, _, err := p.vm.Run(ctx, "ib_write_bw --help")
	if err != nil {
		t.Fatalf("ib_write_bw --help: %v", err)
	}
	if !strings.Contains(help+helpErr, "--write_with_imm") {
		out, errOut, code, err := p.vm.Run(ctx, "ib_write_bw -R -d rxe0 --write_with_imm -n 5")
		t.Logf("the guest's perftest has no --write_with_imm; ib_write_bw --write_with_imm: exit %d (%v)\n%s%s", code, err, out, errOut)
		if err != nil || code == 0 || !strings.Contains(out+errOut, "unrecognized option") {
			t.Fatalf("ib_write_bw --write_with_imm: exit %d (%v), want getopt's refusal of an unrecognized option", code, err)
		}
		return
	}
	prm := perftest.Params{Verb: perftest.Write, Kind: perftest.BW, WriteImm: true, Size: 4096, Iterations: bwIters, Port: perfPort,
		MTU: p.dev.Adapter.PathMTU(), ConnectRetry: perftest.Retry{Attempts: 100, Interval: 100 * time.Millisecond}}
	cmd := "ib_write_bw " + guestArgs(prm) + " --write_with_imm"
	t.Run("rxe_server", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, 90*time.Second)
		theirs = p.guestServer(t, ctx, cmd, perfPort, func() error {
			_, err := perftest.RunClient(ctx, prm, &ndkxdpConnector{p}, &ours)
			return err
		})
		t.Logf("rxe server:\n%sndkxdp client:\n%s", reportLines(theirs), reportLines(ours.String()))
		requireRow(t, "ndkxdp's client", ours.String(), ours.String(), prm)
		requireRow(t, "rxe's server", theirs, theirs, prm)
	})
	t.Run("rxe_client", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, 90*time.Second)
		theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
			_, err := perftest.RunServer(ctx, prm, l, &ours)
			return err
		}, cmd+" "+HostIPv4.String())
		t.Logf("rxe client:\n%sndkxdp server:\n%s", reportLines(theirs), reportLines(ours.String()))
		requireRow(t, "rxe's client", theirs, theirs, prm)
		requireRow(t, "ndkxdp's server", ours.String(), ours.String(), prm)
	})
	lat := prm
	lat.Kind, lat.Size, lat.Iterations = perftest.Lat, 64, latIters
	latCmd := "ib_write_lat " + guestArgs(lat) + " --write_with_imm"
	t.Run("ib_write_lat/rxe_server", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, 60*time.Second)
		theirs = p.guestServer(t, ctx, latCmd, perfPort, func() error {
			_, err := perftest.RunClient(ctx, lat, &ndkxdpConnector{p}, &ours)
			return err
		})
		requireRow(t, "ndkxdp's client", ours.String(), ours.String(), lat)
		requireRow(t, "rxe's server", theirs, theirs, lat)
	})
	t.Run("ib_write_lat/rxe_client", func(t *testing.T) {
		var ours bytes.Buffer
		var theirs string
		p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
		ctx := ctxFor(t, 60*time.Second)
		theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) error {
			_, err := perftest.RunServer(ctx, lat, l, &ours)
			return err
		}, latCmd+" "+HostIPv4.String())
		requireRow(t, "rxe's client", theirs, theirs, lat)
		requireRow(t, "ndkxdp's server", ours.String(), ours.String(), lat)
	})
}
