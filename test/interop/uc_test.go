package interop

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// testPerftestUC runs perftest's send and write tests with -c UC against
// rxe, each side as server and as client: without -R (control over TCP,
// the UC QPs connected out of band) every test, and with -R (rdma_cm,
// whose REQ says RC for a UC QP as Linux's does) ib_send_bw and
// ib_write_lat. Both sides print their rows, and every frame ndkxdp sent
// on a data QP is a UC SEND or RDMA WRITE without AckReq: nothing
// answers them.
func testPerftestUC(t *testing.T, p *peer) {
	const size = 4096
	for _, c := range []perfCase{
		{"ib_send_bw", perftest.Send, perftest.BW},
		{"ib_write_bw", perftest.Write, perftest.BW},
		{"ib_send_lat", perftest.Send, perftest.Lat},
		{"ib_write_lat", perftest.Write, perftest.Lat},
	} {
		prm := c.params(size)
		prm.MTU, prm.UC = p.dev.Adapter.PathMTU(), true
		args := fmt.Sprintf("-d rxe0 -x %d -F -n %d -p %d -s %d -c UC", p.vm.Guest.GIDIndex, prm.Iterations, prm.Port, prm.Size)
		tcpBothWays(t, p, c.tool+"_uc", prm, c.timeout(), c.tool+" "+args, func(t *testing.T, rxeServer bool, theirs, ours string, res perftest.Result) {
			requireRow(t, "rxe", theirs, theirs, prm)
			who, calib := "ndkxdp", ours
			if !rxeServer && prm.Kind == perftest.BW && prm.Verb != perftest.Send {
				who, calib = "ndkxdp's server (printing rxe's report)", theirs
			}
			requireRow(t, who, ours, calib, prm)
			requireOOBAddresses(t, theirs, ours, res)
			requireUCFrames(t, p, res)
		})
	}
	for _, c := range []perfCase{{"ib_send_bw", perftest.Send, perftest.BW}, {"ib_write_lat", perftest.Write, perftest.Lat}} {
		prm := c.params(size)
		prm.MTU, prm.UC, prm.Comm = p.dev.Adapter.PathMTU(), true, perftest.CommRDMACM
		cmd := c.tool + " " + guestArgs(prm) + " -c UC"
		t.Run(c.tool+"_uc_R/rxe_server", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			var res perftest.Result
			theirs = p.guestServer(t, ctx, cmd, perfPort, func() (err error) {
				res, err = perftest.RunClient(ctx, prm, &ndkverbs.Connector{Dev: p.dev, Peer: GuestIPv4}, &ours)
				return err
			})
			t.Logf("rxe server:\n%s\nndkxdp client:\n%s", theirs, ours.String())
			requireRow(t, "rxe", theirs, theirs, prm)
			requireRow(t, "ndkxdp", ours.String(), ours.String(), prm)
			requireUCFrames(t, p, res)
		})
		t.Run(c.tool+"_uc_R/rxe_client", func(t *testing.T) {
			var ours bytes.Buffer
			var theirs string
			p.captureRows(t, func() (string, string) { return reportLines(theirs), reportLines(ours.String()) })
			ctx := ctxFor(t, c.timeout())
			var res perftest.Result
			theirs = p.hostServer(t, ctx, perfPort, func(ctx context.Context, l verbs.Listener) (err error) {
				res, err = perftest.RunServer(ctx, prm, l, &ours)
				return err
			}, fmt.Sprintf("%s %v", cmd, HostIPv4))
			t.Logf("rxe client:\n%s\nndkxdp server:\n%s", theirs, ours.String())
			requireRow(t, "rxe", theirs, theirs, prm)
			if c.kind == perftest.Lat {
				requireRow(t, "ndkxdp", ours.String(), ours.String(), prm)
			}
			requireUCFrames(t, p, res)
		})
	}
}

// requireUCFrames checks the frames ndkxdp sent to the data QP(s) of res
// since the case began: some, each a UC opcode without AckReq.
func requireUCFrames(t *testing.T, p *peer, res perftest.Result) {
	t.Helper()
	peers := res.Peers
	if peers == nil {
		peers = []perftest.Dest{res.Peer}
	}
	data := map[uint32]bool{}
	for _, d := range peers {
		data[uint32(d.QPN)] = true
	}
	n := 0
	for _, f := range p.framesNow(t) {
		var pkt rocev2.Packet
		if !f.Outgoing || rocev2.Parse(f.Data, &pkt) != nil || !data[pkt.BTH.DestQP] {
			continue
		}
		if pkt.BTH.Opcode.Transport() != rocev2.TransportUC || pkt.BTH.AckReq {
			t.Fatalf("ndkxdp sent %v (AckReq %v) to the UC data QP %#x", pkt.BTH.Opcode, pkt.BTH.AckReq, pkt.BTH.DestQP)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("ndkxdp sent no frame to the data QP(s) %v", peers)
	}
}
