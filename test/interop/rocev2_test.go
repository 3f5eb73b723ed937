package interop

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// rpingPort is rping's default rdma_cm port.
const rpingPort = 7174

// isCMReq reports whether f is a CM REQ from the guest to QP1. Other MADs
// are passed over: a client killed while its REQ waits for an answer has
// the guest's CM send a REJ (Linux's cm_destroy_id in REQ_SENT), and that
// REJ can leave after the next client's capture began.
func isCMReq(f Frame) bool {
	var p rocev2.Packet
	if f.Outgoing || rocev2.Parse(f.Data, &p) != nil || p.BTH.DestQP != rocev2.GSIQP {
		return false
	}
	mad, err := rocev2.DecodeMAD(p.Payload)
	if err != nil {
		return false
	}
	_, ok := mad.Message.(*rocev2.CMReq)
	return ok
}

// TestLiveCMReqParses checks our codec against live rxe: an rdma_cm client
// in the guest connects to the host, where nothing answers, and the CM REQ
// it sends must parse (ICRC included) and decode to what rping asked for.
// The REQs of rping and of perftest carry the LocalAckTimeout the peer's
// versions put there (peerFacts).
func TestLiveCMReqParses(t *testing.T) { testLiveCMReq(t, sharedVM(t)) }

// liveREQ runs cmd, an rdma_cm client, in the guest and returns the first
// CM REQ it sends to the host, parsed and decoded.
func liveREQ(t *testing.T, vm *VM, cmd string) (*rocev2.Packet, *rocev2.CMReq) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	c, err := vm.Host.StartCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	p, err := vm.Start(ctx, "exec "+cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	f, err := c.WaitFor(wctx, isCMReq)
	if err != nil {
		out, errOut, _ := p.Output(ctx)
		t.Fatalf("no CM REQ to QP1 from the guest: %v\n%s: %s%s", err, cmd, out, errOut)
	}
	var pkt rocev2.Packet
	if err := rocev2.Parse(f.Data, &pkt); err != nil {
		t.Fatal(err)
	}
	mad, err := rocev2.DecodeMAD(pkt.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return &pkt, mad.Message.(*rocev2.CMReq)
}

func testLiveCMReq(t *testing.T, vm *VM) {
	facts := factsOf(t, vm)
	t.Run("perftest", func(t *testing.T) {
		_, req := liveREQ(t, vm, fmt.Sprintf("ib_send_bw -R -d rxe0 -n 5 -p %d %v", perfPort, HostIPv4))
		if ps, port, err := rocev2.ParseServiceID(req.ServiceID); err != nil || ps != rocev2.PortSpaceTCP || port != perfPort {
			t.Errorf("ServiceID %#x: port space %v port %d (%v); want TCP port %d", req.ServiceID, ps, port, err, perfPort)
		}
		if got := req.Primary.LocalAckTimeout; got != facts.perftestAckTimeout {
			t.Errorf("perftest's REQ has LocalAckTimeout %d, want %d on %s", got, facts.perftestAckTimeout, facts.name)
		}
	})
	pkt, req := liveREQ(t, vm, "rping -c -a "+HostIPv4.String()+" -C 1 -v")
	if pkt.IP.Src != GuestIPv4 || pkt.IP.Dst != HostIPv4 {
		t.Errorf("REQ from %v to %v, want %v to %v", pkt.IP.Src, pkt.IP.Dst, GuestIPv4, HostIPv4)
	}
	if pkt.BTH.Opcode != rocev2.UDSendOnly || pkt.DETH.QKey != rocev2.GSIQKey {
		t.Errorf("REQ carried by opcode %v with Q_Key %#x, want UD SEND_ONLY with %#x", pkt.BTH.Opcode, pkt.DETH.QKey, rocev2.GSIQKey)
	}
	if got := req.Primary.LocalAckTimeout; got != facts.rpingAckTimeout {
		t.Errorf("rping's REQ has LocalAckTimeout %d, want %d on %s", got, facts.rpingAckTimeout, facts.name)
	}
	if ps, port, err := rocev2.ParseServiceID(req.ServiceID); err != nil || ps != rocev2.PortSpaceTCP || port != rpingPort {
		t.Errorf("ServiceID %#x: port space %v port %d (%v); want TCP port %d", req.ServiceID, ps, port, err, rpingPort)
	}
	if req.TransportType != 0 { // RC
		t.Errorf("transport type %d, want RC (0)", req.TransportType)
	}
	if req.Primary.LocalGID != rocev2.GIDFromAddr(GuestIPv4) || req.Primary.RemoteGID != rocev2.GIDFromAddr(HostIPv4) {
		t.Errorf("primary path %v -> %v, want %v -> %v", req.Primary.LocalGID, req.Primary.RemoteGID, GuestIPv4, HostIPv4)
	}
	h, err := rocev2.DecodeCMAHeader(req.PrivateData[:])
	if err != nil {
		t.Fatal(err)
	}
	if h.Src != GuestIPv4 || h.Dst != HostIPv4 || h.SrcPort == 0 {
		t.Errorf("rdma_cm header %+v, want %v:<port> -> %v", h, GuestIPv4, HostIPv4)
	}
	t.Logf("live rxe REQ: %d-byte frame, UDP sport %d, QPN %#x, ICRC %#08x verified", len(pkt.Frame), pkt.UDP.SrcPort, req.LocalQPN, pkt.ICRC)
}

// TestRdmaCMLoopbackOrdered runs an rdma_cm server and client inside the
// guest over rxe0, starting the client only once the server listens.
func TestRdmaCMLoopbackOrdered(t *testing.T) { testRdmaCMLoopback(t, sharedVM(t)) }

func testRdmaCMLoopback(t *testing.T, vm *VM) {
	ctx := ctxFor(t, 2*time.Minute)
	srv, err := vm.Start(ctx, "exec rping -s -a "+GuestIPv4.String()+" -C 3 -v")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	if err := vm.WaitListen(ctx, rpingPort); err != nil {
		t.Fatal(err)
	}
	out, errOut, code, err := vm.Run(ctx, "rping -c -a "+GuestIPv4.String()+" -C 3 -v")
	if err != nil || code != 0 {
		t.Fatalf("rping client: exit %d err %v\n%s%s", code, err, out, errOut)
	}
	if n := strings.Count(out, "ping data: rdma-ping-"); n != 3 {
		t.Errorf("client printed %d pings, want 3:\n%s", n, out)
	}
	sout, serr, scode, err := srv.Wait(ctx)
	if err != nil || scode != 0 {
		t.Fatalf("rping server: exit %d err %v\n%s%s", scode, err, sout, serr)
	}
}
